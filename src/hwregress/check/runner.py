"""Run the checks of :mod:`hwregress.check` on devices, each timed, a crash in one a failure of that one."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Sequence

from hwregress.check import (
    cold_compile,
    contender,
    energy,
    isolation,
    memory,
    numerics,
    nvml_match,
    peaks,
    quantization,
    timer,
)
from hwregress.check.result import CheckResult, judged

# in the order they run: the cheap ones first, isolation last (it compares this process, after everything, with a
# fresh one)
CHECKS: dict[str, Callable[[str], CheckResult]] = {
    module.NAME: module.check
    for module in (timer, memory, nvml_match, numerics, quantization, cold_compile, peaks, energy, contender, isolation)
}


def run_checks(devices: Sequence[str], names: Sequence[str] | None = None,
               on_result: Callable[[CheckResult], None] | None = None) -> list[CheckResult]:
    """Run each check of ``names`` (None: all of :data:`CHECKS`, in their order) on each of ``devices``.

    A check that raises is a failed check whose figures hold the exception and the last lines of its traceback.
    ``on_result`` is called with each result as it is known (to print it as the checks go).

    Raises:
        ValueError: a name that is not a check, or an empty ``names``; the message lists the checks.
    """
    chosen = chosen_checks(names)
    results = []
    for device in devices:
        for name in chosen:
            result = _run_one(name, device)
            results.append(result)
            if on_result is not None:
                on_result(result)
    return results


def chosen_checks(names: Sequence[str] | None) -> list[str]:
    """The checks ``names`` asks for (None: all), in the order they run.

    Raises:
        ValueError: a name that is not a check, or an empty ``names`` (it would run nothing); the message lists the
            checks.
    """
    if names is not None and not names:
        raise ValueError(f"no check named (an empty list would run nothing); the checks are {', '.join(CHECKS)}")
    unknown = [name for name in names or () if name not in CHECKS]
    if unknown:
        raise ValueError(f"no check named {', '.join(unknown)}; the checks are {', '.join(CHECKS)}")
    return [name for name in CHECKS if names is None or name in names]


def _run_one(name: str, device: str) -> CheckResult:
    started = time.perf_counter()
    try:
        result = CHECKS[name](device)
    except Exception as error:  # a check that crashes is a finding, and the others still run
        lines = traceback.format_exception(error)[-3:]
        result = judged(name, device, False, "the check itself", {"error": f"{type(error).__name__}: {error}",
                                                                  "traceback": "".join(lines)[-1200:]},
                        "the check raised: see its error (a missing driver library, a device that cannot run it)")
    result.seconds = round(time.perf_counter() - started, 2)
    return result

"""The probes of a bisection over interpreters (``python -m hwregress bisect --stacks PY1,PY2,...``): each probe is an
A/B session of the user's pytest selection (:mod:`hwregress.ab`), run by the reference's interpreter (stack A) with
the candidate's as stack B (``--ab-python``), at the probe's plan (:mod:`hwregress.bisect.budget`); its results.json
is read back and its tests' verdicts make the probe's.

A probe's verdict over its tests: ``regression`` where any test regressed (B slower beyond the threshold), else
``unstable`` where any stayed undecided, else ``improvement`` where every test was faster, else ``pass``. Its ratio
is the lowest of its tests' (the slowest test, with that test's bounds). A session that judged no test (the candidate
cannot import torch, its tests fail, the session crashed) skips the candidate, naming why: a bisection goes on around
it, as ``git bisect skip``.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hwregress.bisect.search import CandidateSkipped, ProbeOutcome

TAIL_CHARACTERS = 2000  # of a failed session's output, in the skip's reason
DECIDED = ("regression", "improvement", "pass", "unstable")


@dataclass(frozen=True)
class ProbeSettings:
    """How every probe runs.

    Attributes:
        pytest_args: the user's selection (``-m cpu -k resnet18``), given to every A/B session.
        threshold: the probes' threshold (fraction; ``--ab-threshold``).
        looks: the probes' planned looks (cumulative pair counts; ``--ab-looks``).
        work_dir: the folder of the probes' report folders, one each (``probe-03-c7-vs-c0``).
        timeout_s: the most one probe may take before it is stopped and its candidate skipped; None: no limit.
    """

    pytest_args: tuple[str, ...]
    threshold: float
    looks: tuple[int, ...]
    work_dir: Path
    timeout_s: float | None = None


def ab_command(reference: str, candidate: str, settings: ProbeSettings, report_dir: Path, seed: int) -> list[str]:
    """The command of one probe: the reference interpreter's pytest A/B session with the candidate as stack B."""
    return [reference, "-m", "pytest", *settings.pytest_args, f"--ab-python={candidate}",
            f"--ab-threshold={settings.threshold}", f"--ab-looks={','.join(str(n) for n in settings.looks)}",
            f"--ab-seed={seed}", f"--report-dir={report_dir}", "-p", "no:cacheprovider"]


def outcome_of(results: dict[str, Any], seconds: float, report_dir: Path) -> ProbeOutcome:
    """The probe's outcome from its A/B session's results.json (module doc).

    Raises:
        CandidateSkipped: no test of the session was judged as an A/B; names each test's verdict and message.
    """
    judged = [r for r in results.get("records", []) if isinstance(r.get("ab"), dict) and r.get("verdict") in DECIDED]
    if not judged:
        seen = "; ".join(f"{r.get('test_id')}: {r.get('verdict')} ({(r.get('message') or '')[:200]})"
                         for r in results.get("records", [])) or "no test ran"
        raise CandidateSkipped(f"the A/B session judged no test: {seen}")
    verdicts = [r["verdict"] for r in judged]
    if "regression" in verdicts:
        verdict = "regression"
    elif "unstable" in verdicts:
        verdict = "unstable"
    elif set(verdicts) == {"improvement"}:
        verdict = "improvement"
    else:
        verdict = "pass"
    slowest = min(judged, key=lambda r: r["ab"].get("ratio") if r["ab"].get("ratio") is not None else float("inf"))
    ab = slowest["ab"]
    tests = {r["test_id"]: {"verdict": r["verdict"], "ratio": r["ab"].get("ratio"),
                            "ratio_low": r["ab"].get("ratio_low"), "ratio_high": r["ab"].get("ratio_high"),
                            "pairs": len(r["ab"].get("pairs") or ())} for r in judged}
    return ProbeOutcome(verdict, ab.get("ratio"), ab.get("ratio_low"), ab.get("ratio_high"),
                        pairs=sum(test["pairs"] for test in tests.values()), seconds=seconds,
                        details={"report_dir": str(report_dir), "slowest_test": slowest["test_id"], "tests": tests})


class StackProbes:
    """The :data:`hwregress.bisect.search.ProbeRunner` of a bisection over the interpreters ``stacks`` (the first
    the good, the last the bad): ``probes(candidate, reference)`` runs one A/B session (:func:`ab_command`)."""

    def __init__(self, stacks: Sequence[str], settings: ProbeSettings) -> None:
        self.stacks = list(stacks)
        self.settings = settings
        self.run_count = 0

    def __call__(self, candidate: int, reference: int) -> ProbeOutcome:
        self.run_count += 1
        report_dir = self.settings.work_dir / f"probe-{self.run_count:02d}-c{candidate}-vs-c{reference}"
        command = ab_command(self.stacks[reference], self.stacks[candidate], self.settings, report_dir,
                             seed=self.run_count)
        started = time.perf_counter()
        log = self.settings.work_dir / f"{report_dir.name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        try:
            with log.open("w") as out:
                done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, timeout=self.settings.timeout_s,
                                      env={**os.environ, "PYTHONUNBUFFERED": "1"}, check=False)
        except subprocess.TimeoutExpired:
            raise CandidateSkipped(f"its A/B session ran past {self.settings.timeout_s:g} s (log: {log})") from None
        except OSError as error:
            raise CandidateSkipped(f"its A/B session did not start: {error}") from None
        seconds = time.perf_counter() - started
        results = report_dir / "results.json"
        if not results.is_file():
            tail = log.read_text(errors="replace")[-TAIL_CHARACTERS:]
            raise CandidateSkipped(f"its A/B session wrote no results.json (exit {done.returncode}); its output "
                                   f"ends:\n{tail}")
        return outcome_of(json.loads(results.read_text()), seconds, report_dir)

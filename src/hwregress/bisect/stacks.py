"""The probes of a bisection over stacks (interpreters, commits' built stacks, environment steps' wrappers): each
probe is an A/B session of the user's pytest selection (:mod:`hwregress.ab`), run by the reference's interpreter with
the reference as stack A (``--ab-python-a``) and the candidate as stack B (``--ab-python``), at the probe's plan
(:mod:`hwregress.bisect.budget`); its results.json is read back and its tests' verdicts make the probe's.

The session runs under a keeper (:mod:`hwregress.process_keeper`) in a process group of its own: a bisection that
stops (Ctrl-C, SIGTERM, an error) ends the session, and one killed outright closes the keeper's standard input, which
ends it too. Its A/B workers exit when the session is gone (they watch their standard input).

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
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hwregress import process_keeper
from hwregress.bisect.search import CandidateSkipped, ProbeOutcome

TAIL_CHARACTERS = 2000  # of a failed session's output, in the skip's reason
DEVICE_VARIABLE = "CUDA_VISIBLE_DEVICES"  # a probe's device, where probes run at once
DECIDED = ("regression", "improvement", "pass", "unstable")
FAILING = ("failed", "invalid", "oom")  # verdicts whose first test a skip names


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
    """The command of one probe: a pytest A/B session run by the reference's interpreter (the selection's modules,
    ``--workloads`` among them, must import where the session runs), the reference as stack A (``--ab-python-a``) and
    the candidate as stack B (``--ab-python``): both stacks' workers start the same way, each through its own
    interpreter or wrapper."""
    return [reference, "-m", "pytest", *settings.pytest_args, f"--ab-python-a={reference}",
            f"--ab-python={candidate}",
            f"--ab-threshold={settings.threshold}", f"--ab-looks={','.join(str(n) for n in settings.looks)}",
            f"--ab-seed={seed}", f"--report-dir={report_dir}", "-p", "no:cacheprovider"]


def outcome_of(results: dict[str, Any], seconds: float, report_dir: Path) -> ProbeOutcome:
    """The probe's outcome from its A/B session's results.json (module doc).

    Raises:
        CandidateSkipped: no test of the session was judged as an A/B; names each test's verdict and message.
    """
    judged = [r for r in results.get("records", []) if isinstance(r.get("ab"), dict) and r.get("verdict") in DECIDED]
    if not judged:
        raise CandidateSkipped(f"the A/B session judged no test: {_what_ran(results.get('records', []))}")
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


def _what_ran(records: list[dict[str, Any]]) -> str:
    """``2 failed (first: <test>: <message>), 30 unsupported``: the session's verdicts counted, with the first test of
    each failing verdict and its message."""
    if not records:
        return "no test ran"
    by_verdict: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_verdict.setdefault(str(record.get("verdict")), []).append(record)
    parts = []
    for verdict, group in sorted(by_verdict.items(), key=lambda item: (item[0] not in FAILING, -len(item[1]))):
        first = f" (first: {group[0].get('test_id')}: {(group[0].get('message') or '')[:300]})" \
            if verdict in FAILING else ""
        parts.append(f"{len(group)} {verdict}{first}")
    return ", ".join(parts)


class StackProbes:
    """The probes of a bisection over stacks: ``probes(candidate, reference)`` runs one A/B session
    (:func:`ab_command`) of the interpreters ``python_of(reference)`` (stack A) and ``python_of(candidate)`` (stack
    B), a :data:`hwregress.bisect.search.ProbeRunner`; :meth:`run_round` runs a round's probes at once, one per device
    of ``devices`` (each session sees its device alone, as ``CUDA_VISIBLE_DEVICES``), a
    :data:`hwregress.bisect.search.RoundRunner`. ``python_of`` raises :class:`CandidateSkipped` for a stack that
    cannot be built; stacks are built one at a time, before a round's sessions start."""

    def __init__(self, python_of: Callable[[int], str], settings: ProbeSettings, devices: Sequence[str] = ()) -> None:
        self.python_of = python_of
        self.settings = settings
        self.devices = list(devices)
        self.run_count = 0
        self._keepers: set[subprocess.Popen[bytes]] = set()  # the running sessions' keepers

    def __call__(self, candidate: int, reference: int) -> ProbeOutcome:
        (outcome,) = self.run_round([(candidate, reference)])
        if isinstance(outcome, CandidateSkipped):
            raise outcome
        return outcome

    def run_round(self, jobs: list[tuple[int, int]]) -> list[ProbeOutcome | CandidateSkipped]:
        """The probes ``jobs`` (``(candidate, reference)``), at once where there are devices for them.

        Raises:
            ValueError: more jobs than devices (with devices), or more than one job without.
        """
        if len(jobs) > max(1, len(self.devices)):
            raise ValueError(f"{len(jobs)} probes at once need as many devices, have {len(self.devices)}")
        started = time.perf_counter()
        prepared: list[tuple[int, list[str], Path] | CandidateSkipped] = []
        for candidate, reference in jobs:
            self.run_count += 1
            try:
                command_of = self._command(self.run_count, candidate, reference)
            except CandidateSkipped as skipped:
                prepared.append(skipped)
            else:
                prepared.append(command_of)
        devices: list[str | None] = list(self.devices) if self.devices else [None]
        with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
            futures = [pool.submit(self._session, job, device, started) if not isinstance(job, CandidateSkipped)
                       else None for job, device in zip(prepared, devices, strict=False)]
            try:
                return [job if future is None else _outcome(future)
                        for job, future in zip(prepared, futures, strict=True)]
            except BaseException:  # Ctrl-C, SIGTERM: end every session before the pool waits for its thread
                for keeper in list(self._keepers):
                    process_keeper.stop(keeper)
                raise

    def _command(self, number: int, candidate: int, reference: int) -> tuple[int, list[str], Path]:
        report_dir = self.settings.work_dir / f"probe-{number:02d}-c{candidate}-vs-c{reference}"
        return number, ab_command(self.python_of(reference), self.python_of(candidate), self.settings, report_dir,
                                  seed=number), report_dir

    def _session(self, job: tuple[int, list[str], Path], device: str | None, started: float) -> ProbeOutcome:
        _, command, report_dir = job
        log = self.settings.work_dir / f"{report_dir.name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        pinned = {} if device is None else {DEVICE_VARIABLE: device}
        log.write_text("$ " + " ".join([*(f"{k}={v}" for k, v in pinned.items()), *command]) + "\n")
        status = run_kept(command, log, self.settings.timeout_s, pinned, self._keepers)
        seconds = time.perf_counter() - started
        results = report_dir / "results.json"
        if not results.is_file():
            tail = log.read_text(errors="replace")[-TAIL_CHARACTERS:]
            raise CandidateSkipped(f"its A/B session wrote no results.json (exit {status}); its output ends:\n{tail}")
        return outcome_of(json.loads(results.read_text()), seconds, report_dir)


def _outcome(future: Future[ProbeOutcome]) -> ProbeOutcome | CandidateSkipped:
    try:
        return future.result()
    except CandidateSkipped as skipped:
        return skipped


def run_kept(command: list[str], log: Path, timeout_s: float | None, env: dict[str, str] | None = None,
             live: set[subprocess.Popen[bytes]] | None = None) -> int | str:
    """Run ``command`` under a keeper (module doc), its output appended to ``log``, with ``env`` over this process's
    environment, the keeper in ``live`` while it runs (so that another thread can stop it); returns its exit status (a
    negative one: killed by that signal), or what is known of it where the keeper did not say.

    Raises:
        CandidateSkipped: it could not start, or ran past ``timeout_s`` (then it is ended).
    """
    try:
        keeper = subprocess.Popen([sys.executable, "-m", process_keeper.__name__, str(log), "--", *command],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True,
                                  env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
    except OSError as error:
        raise CandidateSkipped(f"its A/B session did not start: {error}") from None
    live = set() if live is None else live
    live.add(keeper)
    try:
        keeper.wait(timeout_s)
        said = (keeper.stdout.read() if keeper.stdout else b"").decode(errors="replace").split()
    except subprocess.TimeoutExpired:
        raise CandidateSkipped(f"its A/B session ran past {timeout_s:g} s (log: {log})") from None
    finally:
        process_keeper.stop(keeper)  # ends the session's group wherever this returns or raises from
        live.discard(keeper)
    if "exited" in said and said.index("exited") + 1 < len(said):
        return int(said[said.index("exited") + 1])
    return f"unknown: its keeper said {' '.join(said)!r} and ended with {keeper.returncode}"

"""The default CPU tier before and after a change, measured in one run on this machine (issue 28 part 3).

    python scripts/before_after.py --before /tmp/ba-before --after /work/wt/i28-looks --out /tmp/ba-out
    python scripts/before_after.py --render /tmp/ba-out/before_after.json     # the Markdown again, from the JSON

BEFORE and AFTER are checkouts of hwregress. Each session runs in its own tree (cwd = the tree, so its own
``bench_tests`` and ``conftest.py``; ``PYTHONPATH=<tree>/src:<tree>``, so its own ``hwregress``) with the selection of
the README's quick start (``python -m pytest -m cpu``), into a scratch ``--baseline-dir`` per tree (never the committed
``baselines/``) and a fresh ``--report-dir`` per session. Per tree: ``--records`` recording sessions
(``--update-baselines``), ``--aa`` unchanged sessions judged against them, then one session under two busy loops
(``python -c "while True: pass"`` x2, killed by pid whatever happens). The trees alternate session by session in
balanced order (before/after, then after/before, ...), so a drift of the shared machine falls on both alike; the load
average is noted at each session's start. Each session runs under ``--timeout``; one that fails is reported, not fatal.

From each session's ``results.json``: per test its verdict, timed rounds (``rounds``; the planned-looks fields
``looks`` and ``alpha`` where present), wall time (``duration_s``) and diagnosis; the session's wall time
(``meta.duration_s``). Written to ``--out``: ``before_after.json`` (everything) and ``before_after.md`` (a table per
test; the timed-rounds ratio after/before over the tests whose decision is clear, i.e. ``pass`` in every unchanged
session and ``regression`` under load in both trees; the wall-time ratios; every verdict that differs).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from hwregress.store.atomic import atomic_write_json, atomic_write_text, read_regular_file

TREES = ("before", "after")
JUDGED_KINDS = ("aa", "load")
SHARED_CPU = 0.10
"""Other processes' share of the CPUs during a window beyond which it shared the machine (hwregress's own contention
diagnosis uses the same 10%); quiet windows of the 2-core VM measured about 0.5%."""


# --- what a session's results.json says -----------------------------------------------------------------------------

@dataclass
class TestFigures:
    """One record of a session's results.json, the fields this comparison reads.

    Attributes:
        verdict: the test's verdict (``pass``, ``regression``, ...).
        rounds: timed rounds of its window; None for a test without one (parity).
        duration_s: s, wall time of the test's call phase.
        looks: the planned looks and those taken (results schema 5; None before it or without a baseline).
        alpha: the significance level its verdict was judged at (schema 5).
        extended_rounds, verdict_rounds: rounds beyond ``--rounds``, and those added while the verdict was open.
        ratio, threshold: throughput over the baseline's, and the ratio below which it regresses.
        diagnosis: the likely causes of a regression, most likely first.
        other_cpu: fraction of the CPUs' time other processes used during its window (``health``; None: not
            sampled).
    """

    verdict: str
    rounds: int | None = None
    duration_s: float | None = None
    looks: dict[str, Any] | None = None
    alpha: float | None = None
    extended_rounds: int | None = None
    verdict_rounds: int | None = None
    ratio: float | None = None
    threshold: float | None = None
    diagnosis: list[str] = field(default_factory=list)
    other_cpu: float | None = None


def record_figures(record: Mapping[str, Any]) -> TestFigures:
    """The figures of one results.json record (schema 4 or 5): a record without timed rounds has ``rounds`` None."""
    details = record.get("details") or {}
    timed = bool(record.get("samples")) and record.get("rounds") is not None
    return TestFigures(verdict=str(record.get("verdict")), rounds=int(record["rounds"]) if timed else None,
                       duration_s=record.get("duration_s"), looks=record.get("looks"), alpha=record.get("alpha"),
                       extended_rounds=details.get("extended_rounds"), verdict_rounds=details.get("verdict_rounds"),
                       ratio=record.get("ratio"), threshold=record.get("threshold"),
                       diagnosis=list(record.get("diagnosis") or []),
                       other_cpu=(record.get("health") or {}).get("other_cpu_fraction"))


def read_session_figures(path: Path) -> dict[str, TestFigures]:
    """Per test id, the figures of the results.json at ``path``.

    Raises:
        ValueError: not JSON, or no ``records`` list of objects with a ``test_id`` (the message names ``path``).
        OSError: unreadable (:func:`hwregress.store.atomic.read_regular_file`).
    """
    try:
        data = json.loads(read_regular_file(path))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not JSON ({error}); the session did not finish writing it") from None
    records = data.get("records") if isinstance(data, dict) else None
    if not isinstance(records, list) or not all(isinstance(r, dict) and "test_id" in r for r in records):
        raise ValueError(f"{path}: 'records' must be a list of records with a test_id; is it a hwregress results.json?")
    return {record["test_id"]: record_figures(record) for record in records}


def session_duration(path: Path) -> float | None:
    """``meta.duration_s`` of the results.json at ``path`` (s), None where absent."""
    meta = json.loads(read_regular_file(path)).get("meta") or {}
    value = meta.get("duration_s")
    return float(value) if isinstance(value, (int, float)) else None


@dataclass
class Session:
    """One pytest session of one tree.

    Attributes:
        tree: ``before`` or ``after``.
        name: ``record1``, ``aa2``, ``load1``, ...; kind: ``record``, ``aa`` (unchanged, judged) or ``load``.
        load: ``os.getloadavg()`` at its start (1, 5, 15 min).
        wall_s: s, the pytest process's wall time; duration_s: s, the session's ``meta.duration_s``.
        status: ``ok`` (a results.json was read), else why not (timed out, no results).
        rc: pytest's exit code (1 where a test failed, e.g. a regression); None when killed at the timeout.
        records: per test id, its figures (empty when the session gave no results).
        cpu_busy: fraction of all CPUs' time busy over the seconds just before its start (other helpers' work).
        waited_s: s waited for the machine to be quiet (--quiet) before it started.
        superseded: rerun because other work shared the machine during it (:meth:`shared`): kept for the record,
            left out of the comparison.
    """

    tree: str
    name: str
    kind: str
    load: tuple[float, float, float]
    started_at: str
    wall_s: float
    status: str
    rc: int | None
    duration_s: float | None
    records: dict[str, TestFigures]
    cpu_busy: float | None = None
    waited_s: float = 0.0
    superseded: bool = False

    def others_cpu(self) -> float | None:
        """The largest fraction of the CPUs' time other processes used during one of its timed windows (None: none
        sampled)."""
        values = [f.other_cpu for f in self.records.values() if f.rounds is not None and f.other_cpu is not None]
        return max(values, default=None)

    def shared(self, limit: float = SHARED_CPU) -> bool:
        """Whether other processes used more than ``limit`` of the CPUs during one of its timed windows."""
        others = self.others_cpu()
        return others is not None and others > limit

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "records": {test: asdict(figures) for test, figures in self.records.items()}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Session:
        return cls(**{**data, "load": tuple(data["load"]),
                      "records": {test: TestFigures(**figures) for test, figures in data["records"].items()}})


# --- the comparison ------------------------------------------------------------------------------------------------

@dataclass
class Totals:
    """A sum over the before tree's sessions and the same over the after tree's."""

    before: float = 0.0
    after: float = 0.0

    @property
    def ratio(self) -> float | None:
        """after / before; None where before is 0."""
        return self.after / self.before if self.before else None


@dataclass
class VerdictChange:
    """A test whose verdict in the session ``session`` differs between the trees (``absent``: no record)."""

    session: str
    test_id: str
    before: str
    after: str


def counted(sessions: Sequence[Session]) -> list[Session]:
    """The sessions the comparison counts: all but the superseded ones (the comparisons below call this first)."""
    return [s for s in sessions if not s.superseded]


def _by_tree(sessions: Sequence[Session], kind: str) -> dict[str, list[Session]]:
    return {tree: [s for s in sessions if s.tree == tree and s.kind == kind] for tree in TREES}


def _verdict(session: Session, test_id: str) -> str:
    figures = session.records.get(test_id)
    return figures.verdict if figures is not None else "absent"


def timed_tests(sessions: Sequence[Session]) -> list[str]:
    """The ids of the tests with timed rounds in any session, sorted."""
    sessions = counted(sessions)
    return sorted({test for s in sessions for test, figures in s.records.items() if figures.rounds is not None})


def clear_tests(sessions: Sequence[Session]) -> list[str]:
    """The timed tests whose decision is clear in both trees: ``pass`` in every unchanged (``aa``) session and
    ``regression`` in every ``load`` session, each tree having at least one of each, all finished (``ok``)."""
    sessions = counted(sessions)
    clear = []
    for test in timed_tests(sessions):
        wanted = {"aa": "pass", "load": "regression"}
        if all(runs and all(s.status == "ok" and _verdict(s, test) == verdict for s in runs)
               for kind, verdict in wanted.items() for runs in _by_tree(sessions, kind).values()):
            clear.append(test)
    return clear


def rounds_totals(sessions: Sequence[Session], tests: Sequence[str]) -> dict[str, Totals]:
    """Timed rounds of ``tests`` summed per tree over the ``aa`` sessions, the ``load`` sessions and both
    (``judged``)."""
    return _judged_totals(sessions, tests, lambda record: record.rounds or 0)


def _judged_totals(sessions: Sequence[Session], tests: Sequence[str],
                   figure: Callable[[TestFigures], float]) -> dict[str, Totals]:
    """``figure`` of each record of ``tests`` summed per tree over the ``aa``, the ``load`` sessions and both."""
    totals = {kind: Totals() for kind in (*JUDGED_KINDS, "judged")}
    for s in counted(sessions):
        if s.kind not in JUDGED_KINDS:
            continue
        value = sum(figure(s.records[test]) for test in tests if test in s.records)
        for kind in (s.kind, "judged"):
            setattr(totals[kind], s.tree, getattr(totals[kind], s.tree) + value)
    return totals


def window_ratios(sessions: Sequence[Session], tests: Sequence[str]) -> dict[str, list[float]]:
    """Per judged kind (``aa``, ``load``), the timed rounds after / before of each window of ``tests``: a test in the
    session of one name (``aa2``) in both trees, both finished. A sum over windows is led by the few long ones; these
    show the typical window."""
    sessions = counted(sessions)
    ratios: dict[str, list[float]] = {kind: [] for kind in JUDGED_KINDS}
    for name in dict.fromkeys(s.name for s in sessions if s.kind in JUDGED_KINDS):
        pair = {s.tree: s for s in sessions if s.name == name}
        if set(pair) != set(TREES) or any(s.status != "ok" for s in pair.values()):
            continue
        for test in tests:
            before, after = (pair[tree].records.get(test) for tree in TREES)
            if before is not None and after is not None and before.rounds and after.rounds is not None:
                ratios[pair["before"].kind].append(after.rounds / before.rounds)
    return ratios


def duration_totals(sessions: Sequence[Session], tests: Sequence[str]) -> dict[str, Totals]:
    """Per-test wall time (``duration_s``, s) of ``tests`` summed per tree over the ``aa``, ``load`` and both."""
    return _judged_totals(sessions, tests, lambda record: record.duration_s or 0.0)


def wall_totals(sessions: Sequence[Session]) -> dict[str, Totals]:
    """Session wall time (``meta.duration_s``, s) per kind (``record``, ``aa``, ``load``; ``judged``: aa + load),
    summed per tree over the sessions that finished in both trees (a failed one would bias the sum)."""
    sessions = counted(sessions)
    totals = {kind: Totals() for kind in ("record", *JUDGED_KINDS, "judged")}
    pairs: dict[str, dict[str, Session]] = {}
    for s in sessions:
        pairs.setdefault(s.name, {})[s.tree] = s
    for pair in pairs.values():
        if set(pair) != set(TREES) or any(s.status != "ok" or s.duration_s is None for s in pair.values()):
            continue
        for tree, s in pair.items():
            for kind in {s.kind, "judged"} if s.kind in JUDGED_KINDS else {s.kind}:
                setattr(totals[kind], tree, getattr(totals[kind], tree) + s.duration_s)
    return totals


def verdict_changes(sessions: Sequence[Session]) -> list[VerdictChange]:
    """Each test whose verdict differs between the trees' sessions of the same name (every test, timed or not), in
    session order; a test recorded in one tree only is a change to or from ``absent``. Sessions that did not finish
    in both trees are left out (:func:`failed_sessions` names them)."""
    sessions = counted(sessions)
    changes = []
    names = list(dict.fromkeys(s.name for s in sessions))
    for name in names:
        pair = {s.tree: s for s in sessions if s.name == name}
        if set(pair) != set(TREES) or any(s.status != "ok" for s in pair.values()):
            continue
        for test in sorted(set(pair["before"].records) | set(pair["after"].records)):
            before, after = _verdict(pair["before"], test), _verdict(pair["after"], test)
            if before != after:
                changes.append(VerdictChange(name, test, before, after))
    return changes


def failed_sessions(sessions: Sequence[Session]) -> list[Session]:
    """The sessions that gave no results."""
    sessions = counted(sessions)
    return [s for s in sessions if s.status != "ok"]


# --- Markdown ------------------------------------------------------------------------------------------------------

def _short(test_id: str) -> str:
    return test_id.rpartition("::")[2]


def _ratio(totals: Totals, digits: int = 3) -> str:
    return "n/a" if totals.ratio is None else f"{totals.ratio:.{digits}f}"


def _cell(sessions: Sequence[Session], test: str, show: Any) -> str:
    """``before values → after values`` of ``show(figures)`` over ``sessions`` (one kind, both trees)."""
    sides = []
    for tree in TREES:
        values = [s.records.get(test) for s in sessions if s.tree == tree]
        sides.append(" ".join("-" if figures is None else show(figures) for figures in values) or "-")
    return " → ".join(sides)


def _mean_duration(sessions: Sequence[Session], test: str) -> str:
    sides = []
    for tree in TREES:
        values = [s.records[test].duration_s for s in sessions
                  if s.tree == tree and test in s.records and s.records[test].duration_s is not None]
        sides.append(f"{sum(values) / len(values):.1f}" if values else "-")
    return " → ".join(sides)


def _looks_taken(sessions: Sequence[Session], test: str) -> str:
    taken = [s.records[test].looks for s in sessions if s.tree == "after" and test in s.records]
    return "; ".join(",".join(map(str, looks.get("rounds") or [])) + f" of {len(looks.get('planned') or [])}"
                     if looks else "-" for looks in taken) or "-"


def _rounds(figures: TestFigures) -> str:
    return "-" if figures.rounds is None else str(figures.rounds)


def _verdict_of(figures: TestFigures) -> str:
    return figures.verdict


def per_test_table(sessions: Sequence[Session]) -> list[str]:
    """The Markdown table: one row per timed test, each cell ``before → after`` (several sessions: one value each)."""
    sessions = counted(sessions)
    aa = [s for s in sessions if s.kind == "aa"]
    load = [s for s in sessions if s.kind == "load"]
    clear = set(clear_tests(sessions))
    lines = ["| test | rounds, A/A | rounds, load | s per test, A/A (mean) | s per test, load | verdicts, A/A "
             "| verdict, load | looks taken, load (after) | clear |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for test in timed_tests(sessions):
        lines.append(f"| {_short(test)} | {_cell(aa, test, _rounds)} | {_cell(load, test, _rounds)} "
                     f"| {_mean_duration(aa, test)} | {_mean_duration(load, test)} | {_cell(aa, test, _verdict_of)} "
                     f"| {_cell(load, test, _verdict_of)} | {_looks_taken(load, test)} "
                     f"| {'yes' if test in clear else 'no'} |")
    return lines


def sessions_table(sessions: Sequence[Session]) -> list[str]:
    """The Markdown table of the sessions in the order they ran: load at the start, wall times, verdict counts."""
    lines = ["| # | session | tree | load avg at start (1/5/15 min) | CPUs busy before start | waited s "
             "| others' CPU in a window, max | wall s | meta.duration_s | status | verdicts |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for index, s in enumerate(sessions, start=1):
        counts = Counter(f.verdict for f in s.records.values())
        busy = "-" if s.cpu_busy is None else f"{s.cpu_busy:.0%}"
        others = s.others_cpu()
        status = s.status + (" (superseded: the machine was shared; rerun)" if s.superseded else "")
        lines.append(f"| {index} | {s.name} | {s.tree} | {' / '.join(f'{v:.2f}' for v in s.load)} | {busy} "
                     f"| {s.waited_s:.0f} | {'-' if others is None else f'{others:.0%}'} | {s.wall_s:.0f} "
                     f"| {'-' if s.duration_s is None else f'{s.duration_s:.0f}'} | {status} "
                     f"| {', '.join(f'{v} {n}' for v, n in sorted(counts.items())) or '-'} |")
    return lines


def _spread(ratios: Sequence[float]) -> str:
    """``median 0.417 (2 shorter, 0 the same, 0 longer)`` of per-window ratios."""
    if not ratios:
        return "no window"
    ordered = sorted(ratios)
    middle = len(ordered) // 2
    median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    shorter, same = sum(r < 1 for r in ratios), sum(r == 1 for r in ratios)
    return f"median {median:.3f} ({shorter} shorter, {same} the same, {len(ratios) - shorter - same} longer)"


def summary_lines(sessions: Sequence[Session]) -> list[str]:
    """The ratios after/before and the verdicts that differ, one bullet each."""
    clear, timed = clear_tests(sessions), timed_tests(sessions)
    rounds, seconds, walls = rounds_totals(sessions, clear), duration_totals(sessions, clear), wall_totals(sessions)
    lines = [f"- timed rounds after/before over the {len(clear)} clear test(s) of {len(timed)} timed: "
             f"**{_ratio(rounds['judged'])}** ({rounds['judged'].before:.0f} → {rounds['judged'].after:.0f}); "
             f"unchanged sessions {_ratio(rounds['aa'])} ({rounds['aa'].before:.0f} → {rounds['aa'].after:.0f}), "
             f"under load {_ratio(rounds['load'])} ({rounds['load'].before:.0f} → {rounds['load'].after:.0f})",
             "- per window of a clear test, rounds after/before: " + "; ".join(
                 f"{label}: {_spread(window_ratios(sessions, clear)[kind])}"
                 for kind, label in (("aa", "unchanged sessions"), ("load", "under load"))),
             f"- per-test wall time (duration_s) after/before over the clear tests: {_ratio(seconds['judged'])}; "
             f"unchanged sessions {_ratio(seconds['aa'])}, under load {_ratio(seconds['load'])}",
             f"- session wall time (meta.duration_s) after/before: unchanged sessions {_ratio(walls['aa'])}, "
             f"under load {_ratio(walls['load'])}, judged sessions together {_ratio(walls['judged'])}, "
             f"recording sessions {_ratio(walls['record'])}"]
    changes = verdict_changes(sessions)
    lines.append("- verdicts that differ: " + ("none" if not changes else "; ".join(
        f"{c.session}: {_short(c.test_id)} {c.before} → {c.after}" for c in changes)))
    failed = failed_sessions(sessions)
    lines.append("- sessions without results: " + ("none" if not failed else "; ".join(
        f"{s.tree} {s.name} ({s.status})" for s in failed)))
    shared = [s for s in counted(sessions) if s.kind != "load" and s.shared()]
    lines.append(f"- counted quiet sessions in which other processes still took more than {SHARED_CPU:.0%} of the "
                 "CPUs in a window: " + ("none" if not shared else "; ".join(
                     f"{s.tree} {s.name} ({s.others_cpu():.0%})" for s in shared)))
    superseded = [s for s in sessions if s.superseded]
    if superseded:
        lines.append(f"- superseded (rerun: the machine was shared): {len(superseded)} session(s)")
    return lines


def diagnosis_lines(sessions: Sequence[Session]) -> list[str]:
    """The first diagnosis of each regression under load, per tree."""
    lines = []
    for s in counted(sessions):
        if s.kind != "load":
            continue
        for test, figures in sorted(s.records.items()):
            if figures.verdict == "regression":
                lines.append(f"- {s.tree} {s.name}, {_short(test)}: {(figures.diagnosis or ['(none)'])[0]}")
    return lines


def markdown(report: Mapping[str, Any]) -> str:
    """The Markdown of a run (the dict :func:`main` writes as JSON): trees, sessions, the per-test table, the
    summary, the diagnoses under load."""
    sessions = [Session.from_json(s) for s in report["sessions"]]
    trees = report["trees"]
    head = [f"Before: `{trees['before']['path']}` at {trees['before']['commit']}; after: `{trees['after']['path']}` "
            f"at {trees['after']['commit']}; selection `pytest {shlex.join(report['selection'])}`"
            + (f", extra options `{shlex.join(report.get('extra') or [])}`" if report.get("extra") else "") + "."]
    return "\n".join([*head, "", *sessions_table(sessions), "", *per_test_table(sessions), "",
                      *summary_lines(sessions), "", "Diagnoses under load (the first of each regression):", "",
                      *(diagnosis_lines(sessions) or ["- none"]), ""])


# --- running the sessions ------------------------------------------------------------------------------------------

def readme_selection(tree: Path) -> list[str]:
    """The pytest arguments of the first command of ``tree``'s README quick start (the fenced bash block under
    ``## Quick start``, as ``.ci/run`` reads it): ``["-m", "cpu"]`` for ``... && python -m pytest -m cpu``.

    Raises:
        ValueError: no such block, or its first command runs no pytest (the message names the README).
    """
    readme = tree / "README.md"
    block, inside, fenced = [], False, False
    for line in read_regular_file(readme).decode().splitlines():
        if line.startswith("## Quick start"):
            inside = True
        elif inside and line.startswith("```bash"):
            fenced = True
        elif fenced and line.startswith("```"):
            break
        elif fenced:
            block.append(line)
    for part in (block[0] if block else "").split("&&"):
        words = shlex.split(part)
        if "pytest" in words:
            return words[words.index("pytest") + 1:]
    raise ValueError(f"{readme}: its quick start's first command runs no pytest ({block[:1]}); "
                     "give the selection with --selection")


def cpu_times(stat: str) -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs from the text of ``/proc/stat`` (its ``cpu`` line; idle and iowait are not
    busy).

    Raises:
        ValueError: no ``cpu`` line of numbers.
    """
    for line in stat.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            values = [int(value) for value in fields[1:]]
            idle = sum(values[3:5])
            return sum(values) - idle, sum(values)
    raise ValueError("/proc/stat: no 'cpu' line; this script measures a Linux machine's load")


def busy_between(first: tuple[int, int], second: tuple[int, int]) -> float:
    """Fraction (0 to 1) of the CPUs' time busy between two :func:`cpu_times` readings; 0 when no time passed."""
    total = second[1] - first[1]
    return (second[0] - first[0]) / total if total > 0 else 0.0


def cpu_busy(interval_s: float) -> float:
    """Fraction of all CPUs' time busy over the next ``interval_s`` seconds (/proc/stat)."""
    first = cpu_times(Path("/proc/stat").read_text())
    time.sleep(interval_s)
    return busy_between(first, cpu_times(Path("/proc/stat").read_text()))


def wait_until_quiet(max_busy: float, max_wait_s: float, interval_s: float = 3.0) -> tuple[float, float]:
    """Wait until the CPUs are busy at most ``max_busy`` (fraction) over ``interval_s`` s, or ``max_wait_s`` s have
    passed; returns (the last busy fraction, seconds waited)."""
    started = time.monotonic()
    busy = cpu_busy(interval_s)
    while busy > max_busy and time.monotonic() - started < max_wait_s:
        busy = cpu_busy(interval_s)
    return busy, time.monotonic() - started


@dataclass
class Outcome:
    """How a command ended: its exit code (None: killed at the timeout), wall seconds, whether it timed out."""

    rc: int | None
    wall_s: float
    timed_out: bool


def run_command(command: Sequence[str], cwd: Path, env: Mapping[str, str], timeout_s: float, log: Path) -> Outcome:
    """Run ``command`` in its own process group, stdout and stderr to ``log``; past ``timeout_s`` seconds the group is
    killed (SIGKILL to its id: the command and every child it started, e.g. a spawned rank)."""
    started = time.monotonic()
    with open(log, "wb") as out:
        process = subprocess.Popen(list(command), cwd=cwd, env=dict(env), stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        try:
            rc: int | None = process.wait(timeout=timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            rc, timed_out = None, True
    return Outcome(rc, time.monotonic() - started, timed_out)


@contextlib.contextmanager
def busy_loops(count: int) -> Iterator[list[int]]:
    """``count`` processes spinning ``while True: pass`` for the body's duration; yields their pids and kills each by
    its pid on the way out, whatever the body raised."""
    loops: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(count):
            loops.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
        yield [loop.pid for loop in loops]
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


def tree_env(tree: Path) -> dict[str, str]:
    """The environment of a session of ``tree``: its ``src`` and root first on the path, as a user's run, not CI's
    (no ``CI``, ``PYTEST_ADDOPTS`` or ``GITHUB_STEP_SUMMARY`` from the caller)."""
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS", "GITHUB_STEP_SUMMARY")}
    env["PYTHONPATH"] = f"{tree / 'src'}{os.pathsep}{tree}"
    return env


def check_tree(tree: Path) -> str:
    """``tree``'s commit (with ``+dirty`` for uncommitted changes), after checking that its sessions import its own
    hwregress.

    Raises:
        ValueError: ``tree`` is no checkout of hwregress, or another hwregress comes first on its path.
    """
    found = subprocess.run([sys.executable, "-c", "import hwregress; print(hwregress.__file__)"], cwd=tree,
                           env=tree_env(tree), capture_output=True, text=True, check=False)
    if not found.stdout.strip().startswith(str(tree.resolve())):
        raise ValueError(f"{tree}: its sessions would import hwregress from {found.stdout.strip() or found.stderr}; "
                         "give a checkout of hwregress (with src/hwregress)")
    commit = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip() or "unknown"
    dirty = subprocess.run(["git", "-C", str(tree), "status", "--porcelain"], capture_output=True, text=True,
                           check=False).stdout.strip()
    return commit + ("+dirty" if dirty else "")


def run_session(tree_name: str, tree: Path, name: str, out: Path, selection: Sequence[str], extra: Sequence[str],
                timeout_s: float, quiet: tuple[float, float] = (1.0, 0.0)) -> Session:
    """One session of ``tree`` (named ``tree_name``): ``name`` ``record<i>`` records, ``load<i>`` runs under two busy
    loops, anything else is judged. It starts once the CPUs are busy at most ``quiet[0]`` (fraction) or ``quiet[1]``
    seconds have passed. Its results in ``out/<tree_name>/<name>/``, its log beside them."""
    kind = name.rstrip("0123456789")
    folder = out / tree_name
    report_dir = folder / name
    command = [sys.executable, "-m", "pytest", *selection, "-p", "no:cacheprovider", "-q",
               f"--baseline-dir={folder / 'baselines'}", f"--report-dir={report_dir}", *extra]
    if kind == "record":
        command.append("--update-baselines")
    folder.mkdir(parents=True, exist_ok=True)
    busy, waited = wait_until_quiet(*quiet)
    load = os.getloadavg()
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    with busy_loops(2 if kind == "load" else 0):
        outcome = run_command(command, tree, tree_env(tree), timeout_s, folder / f"{name}.log")
    results = report_dir / "results.json"
    records: dict[str, TestFigures] = {}
    duration = None
    if outcome.timed_out:
        status = f"timed out after {timeout_s:.0f} s"
    else:
        try:
            records, duration, status = read_session_figures(results), session_duration(results), "ok"
        except (OSError, ValueError) as error:
            status = f"no results (exit {outcome.rc}): {error}"
    return Session(tree_name, name, kind, load, started_at, outcome.wall_s, status, outcome.rc, duration, records,
                   busy, waited)


def run_unshared(tree_name: str, tree: Path, name: str, out: Path, selection: Sequence[str], extra: Sequence[str],
                 timeout_s: float, quiet: tuple[float, float], retries: int) -> list[Session]:
    """:func:`run_session`, and for a recording or unchanged session that other processes shared
    (:meth:`Session.shared`) up to ``retries`` reruns. Every try is returned, the earlier ones ``superseded``, their
    results and logs kept under ``<name>-try<i>``; before rerunning a recording, the baseline folder is restored to
    what it held before it, so its entries count each session once."""
    kind = name.rstrip("0123456789")
    folder = out / tree_name
    baselines = folder / "baselines"
    tries: list[Session] = []
    for attempt in range(1, retries + 2):
        kept = folder / f"baselines-before-{name}"
        if kind == "record":
            shutil.rmtree(kept, ignore_errors=True)
            if baselines.exists():
                shutil.copytree(baselines, kept)
        session = run_session(tree_name, tree, name, out, selection, extra, timeout_s, quiet)
        tries.append(session)
        if kind == "load" or session.status != "ok" or not session.shared() or attempt > retries:
            break
        session.superseded = True
        (folder / name).rename(folder / f"{name}-try{attempt}")
        (folder / f"{name}.log").rename(folder / f"{name}-try{attempt}.log")
        if kind == "record":
            shutil.rmtree(baselines, ignore_errors=True)
            if kept.exists():
                shutil.copytree(kept, baselines)
    return tries


def session_plan(records: int, aa: int) -> list[tuple[str, str]]:
    """(tree, session name) in the order they run: each step's two sessions in balanced order (before then after,
    then after then before, ...)."""
    names = [f"record{i}" for i in range(1, records + 1)] + [f"aa{i}" for i in range(1, aa + 1)] + ["load1"]
    return [(tree, name) for step, name in enumerate(names)
            for tree in (TREES if step % 2 == 0 else TREES[::-1])]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, help="checkout of the code before the change")
    parser.add_argument("--after", type=Path, help="checkout of the code after the change")
    parser.add_argument("--out", type=Path, help="folder for the sessions, before_after.json and before_after.md")
    parser.add_argument("--records", type=int, default=3, help="recording sessions per tree (default 3)")
    parser.add_argument("--aa", type=int, default=3, help="unchanged sessions judged per tree (default 3)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds a session may run (default 1800)")
    parser.add_argument("--selection", help="pytest selection instead of the README quick start's, e.g. '-m cpu'")
    parser.add_argument("--extra", default="", help="more pytest options for both trees' sessions")
    parser.add_argument("--quiet", type=float, default=0.25,
                        help="start a session once the CPUs are busy at most this fraction over 3 s (default 0.25: "
                             "other work on a shared machine would be measured as the tier's)")
    parser.add_argument("--quiet-wait", type=float, default=900,
                        help="seconds to wait for --quiet before starting anyway (default 900)")
    parser.add_argument("--retries", type=int, default=2,
                        help="reruns of a recording or unchanged session that other processes shared (default 2)")
    parser.add_argument("--render", type=Path, help="print the Markdown of a before_after.json and exit")
    args = parser.parse_args(argv)
    if args.render:
        print(markdown(json.loads(read_regular_file(args.render))))
        return 0
    if not (args.before and args.after and args.out):
        parser.error("--before, --after and --out are required (or --render FILE)")
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    try:
        commits = {name: check_tree(tree) for name, tree in trees.items()}
        selections = {name: (shlex.split(args.selection) if args.selection else readme_selection(tree))
                      for name, tree in trees.items()}
    except (OSError, ValueError) as error:
        print(f"before_after: {error}", file=sys.stderr)
        return 2
    if selections["before"] != selections["after"]:
        print(f"before_after: the READMEs select different tests ({selections}); give one with --selection",
              file=sys.stderr)
        return 2
    extra = shlex.split(args.extra)
    report: dict[str, Any] = {"trees": {name: {"path": str(tree), "commit": commits[name]}
                                        for name, tree in trees.items()},
                              "selection": selections["before"], "extra": extra, "cpu_count": os.cpu_count(),
                              "sessions": []}
    for tree_name, name in session_plan(args.records, args.aa):
        for session in run_unshared(tree_name, trees[tree_name], name, args.out, selections[tree_name], extra,
                                    args.timeout, (args.quiet, args.quiet_wait), args.retries):
            report["sessions"].append(session.to_json())
            others = session.others_cpu()
            print(f"{tree_name} {name}: {session.status}, {session.wall_s:.0f} s, load {session.load[0]:.2f}, "
                  f"CPUs busy before it {session.cpu_busy:.0%} (waited {session.waited_s:.0f} s), others' CPU in a "
                  f"window up to {'-' if others is None else f'{others:.0%}'}"
                  + (", superseded" if session.superseded else ""), flush=True)
        atomic_write_json(args.out / "before_after.json", report)  # each session kept as soon as it ends
    text = markdown(report)
    atomic_write_text(args.out / "before_after.md", text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Measured tier durations: the per-test wall times of one session, kept as a small fixture
(``tests/data/tier_durations/*.json``, written by ``scripts/tier_durations.py`` from a ``results.json``), and the tier
estimate (:mod:`hwregress.plugin.tier_estimate`) set against them, per family and for the session.

A record's ``duration_s`` is pytest's wall time of its test's call (the digits test times its training alone), and
``meta.duration_s`` the session's clock. A window that was noisy or whose verdict was open ran extra rounds
(``details.extended_rounds``): their seconds (the window's share of them) are kept apart as ``extension_s``, since no
cost predicts them, and the comparison is of the rest.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hwregress.plugin import tiers
from hwregress.plugin.matrix import Selection, case_id
from hwregress.plugin.tier_estimate import TierEstimate, selection_cases
from hwregress.store.atomic import read_regular_file
from hwregress.store.results import SessionResults, TestRecord

FIXTURE_VERSION = 1
SOFTWARE = ("python", "torch", "torchvision", "cuda", "cudnn", "driver")


@dataclass(frozen=True)
class TestDuration:
    """One test of a measured session.

    Attributes:
        test_id: pytest's node id.
        family, device, model, mode, batch_size, dtype: the record's.
        verdict: the record's verdict.
        duration_s: pytest's wall time of the test's call, seconds (the digits test: its training).
        rounds: timed rounds, None without a window.
        extended_rounds: rounds beyond the plan (noise or an open verdict), None without a window.
        window_s: the timed window's wall time (the health sampler's), None without a window.
    """

    __test__ = False  # not a pytest test class

    test_id: str
    family: str
    device: str
    model: str | None
    mode: str | None
    batch_size: int | None
    dtype: str | None
    verdict: str
    duration_s: float
    rounds: int | None = None
    extended_rounds: int | None = None
    window_s: float | None = None

    @property
    def extension_s(self) -> float:
        """Seconds of the extended rounds: the window's share of them (0 without a window)."""
        if not self.rounds or not self.extended_rounds or not self.window_s:
            return 0.0
        return self.window_s * self.extended_rounds / self.rounds


@dataclass(frozen=True)
class MeasuredSession:
    """A session's measured durations (a fixture file).

    Attributes:
        measured: where, when and what measured them: date, session, hardware key, device, host, software, command,
            source file, a note.
        selection: ``devices``, ``models`` (None: the tier's), ``families``, ``tier`` (a fixture without one:
            ``default``) and ``visits`` (``--visits``: a number or ``auto``; a fixture without one: 1, it predates
            visits) of the session.
        session_s: the session's wall time (``meta.duration_s``), seconds.
        tests: its tests, in ``results.json``'s order (by test id).
    """

    measured: dict[str, Any]
    selection: dict[str, Any]
    session_s: float
    tests: list[TestDuration] = field(default_factory=list)

    @property
    def hardware_key(self) -> str:
        return str(self.measured["hardware_key"])

    @property
    def extension_s(self) -> float:
        return sum(test.extension_s for test in self.tests)

    @property
    def visits_setting(self) -> int | None:
        """The session's ``--visits`` as the estimate takes it (None: auto)."""
        value = self.selection.get("visits", 1)
        return value if isinstance(value, int) else None

    def family_s(self) -> dict[str, float]:
        """family -> its tests' seconds less their extensions, families in the order their tests ran."""
        totals: dict[str, float] = {}
        for test in self.tests:
            totals[test.family] = totals.get(test.family, 0.0) + test.duration_s - test.extension_s
        return totals

    def cases(self) -> dict[str, list[dict[str, Any]]]:
        """The session's cases, rebuilt from its selection in pytest's order (:func:`selection_cases`).

        Raises:
            ValueError: they are not the session's tests (the fixture's selection misses an option of its command).
        """
        selection = Selection(list(self.selection["devices"]), models=self.selection.get("models"),
                              tier=self.selection.get("tier", tiers.DEFAULT_TIER))
        cases = selection_cases(selection, self.selection["families"])
        rebuilt = sorted(case_id(case) for family in cases.values() for case in family)
        held = sorted(test.test_id.rpartition("[")[2].rstrip("]") for test in self.tests)
        if rebuilt != held:
            missing, extra = sorted(set(held) - set(rebuilt)), sorted(set(rebuilt) - set(held))
            raise ValueError(f"the selection {self.selection} does not rebuild the measured tests: not rebuilt "
                             f"{missing[:5]}, not measured {extra[:5]}; re-extract with scripts/tier_durations.py")
        return cases


@dataclass(frozen=True)
class Comparison:
    """The estimate beside the measurement, for one family or the session (``family`` ``"session"``).

    Attributes:
        family: the family, or ``"session"`` for the session's wall time.
        tests: tests counted.
        estimated_s: the estimate, seconds.
        measured_s: the measurement less its extended rounds, seconds.
        extension_s: the extended rounds' seconds, left out of ``measured_s``.
    """

    family: str
    tests: int
    estimated_s: float
    measured_s: float
    extension_s: float

    @property
    def ratio(self) -> float:
        """Estimated over measured (inf where nothing was measured)."""
        return self.estimated_s / self.measured_s if self.measured_s > 0 else float("inf")


def extract(session: SessionResults, source: str, note: str = "") -> dict[str, Any]:
    """The fixture of ``session`` (a loaded ``results.json``; ``source`` names the file, ``note`` says what the
    records do not: the device's datasheet figures, a library's version).

    Raises:
        ValueError: the session has no records, or a record lacks its family, device or ``duration_s``.
    """
    if not session.records:
        raise ValueError(f"{source}: no records; run the tier first")
    tests = [_test(record, source) for record in sorted(session.records, key=lambda r: r.test_id)]
    first, meta = session.records[0], session.meta
    args = [str(arg) for arg in meta.get("args") or []]
    host = next((h for h in meta.get("hardware") or [] if isinstance(h, dict) and h.get("device") == "cpu"), {})
    measured = {"date": meta.get("started_at"), "session": meta.get("session"), "hardware_key": first.hardware_key,
                "device": first.device_name,
                "host": f"{host.get('name')}, {(host.get('facts') or {}).get('logical_cores')} logical cores",
                "software": {name: first.environment.get(name) for name in SOFTWARE if first.environment.get(name)},
                "command": " ".join(["pytest", *args]), "source": source, "note": note}
    selection = {"devices": list(dict.fromkeys(test.device for test in tests)), "models": _option(args, "--models"),
                 "families": list(dict.fromkeys(test.family for test in tests)),
                 "tier": meta.get("tier") or (_option(args, "--tier") or [tiers.DEFAULT_TIER])[0],
                 "visits": meta.get("visits", 1)}
    return {"version": FIXTURE_VERSION, "measured": measured, "selection": selection,
            "session_s": round(float(meta.get("duration_s") or 0.0), 3), "tests": [asdict(test) for test in tests]}


def _test(record: TestRecord, source: str) -> TestDuration:
    if not record.family or not record.device or record.duration_s is None:
        raise ValueError(f"{source}: record {record.test_id} lacks its family, device or duration_s; extract "
                         "results.json files of hwregress 0.1 sessions whose records time their tests")
    window = record.health.get("window_s") if isinstance(record.health, dict) else None
    extended = record.details.get("extended_rounds")
    return TestDuration(record.test_id, record.family, record.device, record.model, record.mode, record.batch_size,
                        record.dtype, str(record.verdict), round(record.duration_s, 3), record.rounds,
                        extended if isinstance(extended, int) else None,
                        round(window, 3) if isinstance(window, (int, float)) else None)


def _option(args: list[str], name: str) -> list[str] | None:
    """The comma-separated values of option ``name`` in a pytest command line (``--x a,b`` or ``--x=a,b``)."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument(name)
    value = getattr(parser.parse_known_args(args)[0], name.lstrip("-").replace("-", "_"))
    return value.split(",") if value else None


def load(path: str | Path) -> MeasuredSession:
    """Read a fixture written by :func:`extract`.

    Raises:
        ValueError: not JSON, another version, or a field missing or of the wrong type; the message names the file
            and the fix.
    """
    try:
        data = json.loads(read_regular_file(path))
        if data.get("version") != FIXTURE_VERSION:
            raise ValueError(f"version {data.get('version')!r} is not {FIXTURE_VERSION}")
        tests = [TestDuration(**test) for test in data["tests"]]
        return MeasuredSession(dict(data["measured"]), dict(data["selection"]), float(data["session_s"]), tests)
    except (ValueError, TypeError, KeyError, AttributeError) as error:
        raise ValueError(f"{path}: not a tier durations fixture ({type(error).__name__}: {error}); re-extract it "
                         "with scripts/tier_durations.py") from None


def compare(estimate: TierEstimate, measured: MeasuredSession) -> list[Comparison]:
    """Per family (in the order the session ran them), then the session: the estimate beside the measurement less
    its extended rounds. The session row sets ``estimate.session_wall_s`` against ``meta.duration_s``."""
    counts: dict[str, int] = {}
    extensions: dict[str, float] = {}
    for test in measured.tests:
        counts[test.family] = counts.get(test.family, 0) + 1
        extensions[test.family] = extensions.get(test.family, 0.0) + test.extension_s
    rows = []
    for family, seconds in measured.family_s().items():
        row = estimate.rows.get(family)
        rows.append(Comparison(family, counts[family], row.total_s if row else 0.0, seconds, extensions[family]))
    rows.append(Comparison("session", len(measured.tests), estimate.session_wall_s,
                           measured.session_s - measured.extension_s, measured.extension_s))
    return rows


def outside(rows: Iterable[Comparison], factor: float, slack_s: float = 0.0) -> list[str]:
    """The rows whose estimate is more than ``factor`` times and more than ``slack_s`` seconds off the measurement,
    either way, one line each."""
    return [f"{row.family}: estimated {row.estimated_s:.1f} s, measured {row.measured_s:.1f} s (x{row.ratio:.2f})"
            for row in rows
            if not 1 / factor <= row.ratio <= factor and abs(row.estimated_s - row.measured_s) > slack_s]


def comparison_table(rows: Iterable[Comparison]) -> str:
    """The comparison as a Markdown table: family, tests, estimated s, measured s (less extensions), extended s,
    ratio."""
    lines = ["| family | tests | estimated s | measured s | extended rounds s | estimated / measured |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    lines += [f"| {row.family} | {row.tests} | {row.estimated_s:.1f} | {row.measured_s:.1f} | {row.extension_s:.1f} | "
              f"{row.ratio:.2f} |" for row in rows]
    return "\n".join(lines)

"""A benchmark session's library side: judge records against the baseline store and apply the baseline
lifecycle (a window's measurement is copied onto its record first: :mod:`hwregress.measure.record`), returning a
frozen :class:`hwregress.store.judged.Conclusion` and writing nothing onto the record. Independent of pytest (the
plugin drives it) and of torch."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from typing import Any

from hwregress.hardware.facts import device_kind
from hwregress.judge import evidence, lifecycle
from hwregress.judge.compare import NO_BASELINE, Measured, judge
from hwregress.judge.day_one import FleetJudge
from hwregress.judge.diagnosis import diagnose
from hwregress.judge.tolerances import Tolerances, memory_limits
from hwregress.store.baseline_file import BaselineError, BaselineFile
from hwregress.store.baselines import BaselineStore
from hwregress.store.judged import Conclusion, JudgedFigures
from hwregress.store.results import TestRecord
from hwregress.store.verdicts import Verdict


@dataclass
class Policy:
    """Session-wide decisions.

    Attributes:
        tolerances: see :class:`hwregress.judge.tolerances.Tolerances`.
        update_mode: None, ``all``, ``missing``, ``force`` or ``reset`` (``--update-baselines``).
        require_baselines: a test without a baseline fails.
        strict_env: an environment change against the baseline fails the test.
        accept_identity: judge against a baseline recorded on hardware of another identity.
    """

    tolerances: Tolerances = field(default_factory=Tolerances)
    update_mode: str | None = None
    require_baselines: bool = False
    strict_env: bool = False
    accept_identity: bool = False


class BenchSession:
    """Baseline look-ups (cached per hardware key) and verdicts for one pytest process."""

    def __init__(self, store: BaselineStore, policy: Policy, fleet: FleetJudge | None = None) -> None:
        self.store = store
        self.policy = policy
        self.fleet = fleet  # day-one verdicts of tests without an entry, from the fleet store (None: none)
        self._files: dict[str, BaselineFile | BaselineError | None] = {}
        self.roofs: dict[str, dict[str, float]] = {}  # device -> roofs measured in this process (evidence.ceiling_name)
        self.roof_keys: dict[str, dict[str, str]] = {}  # hardware key -> roof name -> the entry key it was measured as
        self._lock = threading.Lock()

    def baseline_entry(self, hardware_key: str, key: str) -> dict[str, Any] | None:
        """The stored entry, None when the hardware or the test has none. The file is read once per process;
        a file that cannot be trusted is remembered as its error.

        Raises:
            BaselineError: the hardware's file is corrupt or of an unknown version (``key`` None), or this
                test's entry failed validation (``key`` set); the message names file, key and fix.
        """
        with self._lock:
            if hardware_key not in self._files:
                try:
                    self._files[hardware_key] = self.store.load(hardware_key)
                except BaselineError as error:
                    self._files[hardware_key] = error
        loaded = self._files[hardware_key]
        if isinstance(loaded, BaselineError):
            raise loaded
        return None if loaded is None else loaded.entry(key)

    def conclude(self, record: TestRecord, key: str, extra_failures: list[str] | None = None) -> Conclusion:
        """Judge ``record`` against its baseline, diagnose a regression, and apply the update policy; returns what it
        concluded (the record takes it through :func:`hwregress.store.assembly.put_conclusion`; nothing is written
        onto ``record`` here).

        A figure no hardware can reach (:func:`hwregress.judge.evidence.physics_of`) makes the record ``invalid``
        before anything is judged or recorded. ``extra_failures`` are checks the caller made itself (device vs
        CPU accuracy, output parity); they count as a regression before the update policy runs, so an update
        never absorbs them. A baseline that cannot be written (read-only folder, full disk) fails the test
        with the file and the reason (verdict ``failed``). With ``--update-baselines=force`` an entry (or a whole
        file) that cannot be trusted is replaced: the test is judged as new and the unreadable file is moved aside,
        never deleted.

        Raises:
            BaselineError: the baselines file or this test's entry cannot be trusted and the update mode is
                not ``force`` (the test fails with it).
        """
        assert record.hardware_key is not None
        roofs = self.roofs.setdefault(record.device or "", {})
        impossible = evidence.physics_of(record, roofs)
        if impossible:
            return _invalid(record, impossible)
        if record.measures_roof and record.throughput:
            roof = evidence.ceiling_name(record)
            roofs[roof] = record.throughput
            self.roof_keys.setdefault(record.hardware_key, {})[roof] = key
        entry, replacing = self._entry_for(record, key)
        judgement = judge(_measured(record), entry, self.policy.tolerances, self.policy.strict_env,
                          self.policy.accept_identity).failing_first(extra_failures)
        concluding = _Concluding(judgement.verdict, list(judgement.failures), list(judgement.notes),
                                 judgement.figures)
        if entry is not None:
            concluding.baseline_recorded_at = entry.get("recorded_at")
            if concluding.verdict == Verdict.REGRESSION:
                concluding.diagnosis = tuple(diagnose(evidence.for_diagnosis(
                    record, entry, roofs, self._baseline_roofs(record), judgement.figures.identity_changes)))
        else:
            if concluding.verdict == Verdict.NEW and self.fleet is not None:
                self._day_one(record, concluding)
            if self.policy.require_baselines and self.policy.update_mode is None:
                concluding.failures.append(
                    f"{record.test_id}: no baseline for {key} in {self.store.path_for(record.hardware_key)} and "
                    "--require-baselines is set; record one with --update-baselines")
        if replacing is not None:
            concluding.notes.append(f"replacing what could not be trusted ({replacing}); an unreadable file is "
                                    "moved aside")
        self._update_baseline(record, key, entry, concluding, replace_unreadable=replacing is not None)
        return concluding.done()

    def _day_one(self, record: TestRecord, concluding: _Concluding) -> None:
        """Judge ``record`` (no entry of its own) against its hardware key's fleet: its throughput and its peak
        memory."""
        self._day_one_throughput(record, concluding)
        self._day_one_memory(record, concluding)
        if concluding.verdict != Verdict.NEW and NO_BASELINE in concluding.notes:  # judged after all: by the fleet
            concluding.notes.remove(NO_BASELINE)

    def _day_one_throughput(self, record: TestRecord, concluding: _Concluding) -> None:
        """``record``'s throughput against its fleet, at a threshold never below the device's tolerance."""
        assert self.fleet is not None
        on_cpu = device_kind(record.device or "cpu") == "cpu"
        tolerances = self.policy.tolerances  # never tighter than a test against its own baseline on this device
        found = self.fleet.judge(record, tolerances.cpu_throughput if on_cpu else tolerances.throughput)
        if found is None:
            return
        if isinstance(found, str):  # the store could not be read
            concluding.notes.append(found)
            return
        if found.verdict == Verdict.NEW:  # too few hosts, or no majority
            concluding.notes.append(found.message)
            return
        concluding.verdict = found.verdict
        concluding.figures = replace(concluding.figures, ratio=found.ratio, threshold=found.threshold,
                                     baseline_throughput=found.fleet_value)
        said = f"{record.test_id}: day one, no baseline of its own: {found.message}"
        (concluding.failures if found.verdict == Verdict.REGRESSION else concluding.notes).append(said)

    def _day_one_memory(self, record: TestRecord, concluding: _Concluding) -> None:
        """``record``'s peak memory under its fleet's ceiling, with its own baseline's tolerances
        (:func:`hwregress.judge.tolerances.memory_limits`); a peak above it is a regression."""
        assert self.fleet is not None
        tolerance, slack = memory_limits(device_kind(record.device or "cpu") == "cuda", self.policy.tolerances)
        ceiling = self.fleet.memory_ceiling(record, tolerance, slack)
        if ceiling is None or not record.peak_memory_bytes:
            return
        concluding.figures = replace(concluding.figures, baseline_peak_memory_bytes=round(ceiling.base_bytes),
                                     memory_ratio=record.peak_memory_bytes / ceiling.base_bytes)
        exceeded = ceiling.exceeded_by(record.peak_memory_bytes)
        if exceeded is not None:
            concluding.failures.append(f"{record.test_id}: day one, no baseline of its own: {exceeded}")
            concluding.verdict = Verdict.REGRESSION

    def _baseline_roofs(self, record: TestRecord) -> dict[str, float]:
        loaded = self._files.get(record.hardware_key or "")
        if not isinstance(loaded, BaselineFile):
            return {}
        return evidence.baseline_roofs(loaded.entries, self.roof_keys.get(record.hardware_key or "", {}))

    def _entry_for(self, record: TestRecord, key: str) -> tuple[dict[str, Any] | None, BaselineError | None]:
        """The record's baseline entry, and the error of one that ``--update-baselines=force`` replaces."""
        assert record.hardware_key is not None
        try:
            return self.baseline_entry(record.hardware_key, key), None
        except BaselineError as error:
            if self.policy.update_mode not in ("force", "reset"):
                raise
            return None, error

    def _update_baseline(self, record: TestRecord, key: str, entry: dict[str, Any] | None,
                         concluding: _Concluding, replace_unreadable: bool = False) -> None:
        assert record.hardware_key is not None
        action = lifecycle.update_action(self.policy.update_mode, concluding.verdict, entry is not None)
        concluding.baseline_action = action
        path = self.store.path_for(record.hardware_key)
        if action == "recorded":
            try:
                new_entry = {**lifecycle.make_entry(record, entry, fresh=self.policy.update_mode == "reset"),
                             **evidence.entry_evidence(record)}
                self.store.write_entries(record.hardware_key, record.device_name or "", {key: new_entry},
                                         replace_unreadable)
            except (OSError, ValueError, BaselineError) as error:
                concluding.baseline_action = "write-failed"
                concluding.verdict = Verdict.FAILED
                concluding.failures.append(f"{record.test_id}: baseline not recorded in {path}: {error} "
                                           "(check the folder's permissions and free space; the measurement is "
                                           "kept in the results)")
                return
            concluding.notes.append(f"baseline recorded in {path}")
        elif action == "kept-regression":
            concluding.notes.append("baseline kept: this test regresses; use --update-baselines=force to accept the "
                                    "new figures")
        elif action == "kept-unstable":
            concluding.notes.append("baseline kept: the window was unstable; use --update-baselines=force to record "
                                    "it anyway")


@dataclass
class _Concluding:
    """A conclusion while :meth:`BenchSession.conclude` builds it (the day-one verdicts and the baseline lifecycle add
    to the judgement); :meth:`done` freezes it."""

    verdict: Verdict
    failures: list[str]
    notes: list[str]
    figures: JudgedFigures
    baseline_action: str | None = None
    baseline_recorded_at: str | None = None
    diagnosis: tuple[str, ...] = ()

    def done(self) -> Conclusion:
        return Conclusion(self.verdict, tuple(self.failures), tuple(self.notes), self.figures, self.baseline_action,
                          self.baseline_recorded_at, self.diagnosis)


def _invalid(record: TestRecord, impossible: list[str]) -> Conclusion:
    """``record``'s conclusion when a figure is impossible: ``invalid``, a measurement defect, never judged, never
    recorded as a baseline."""
    failures = tuple(f"{record.test_id}: impossible figure, a measurement defect: {sentence}"
                     for sentence in impossible)
    return Conclusion(Verdict.INVALID, failures, baseline_action="none")


def _measured(record: TestRecord) -> Measured:
    return Measured(record.test_id, record.samples, record.unit, record.stable is not False,
                    record.environment, record.peak_memory_bytes, record.accuracy, record.speedup,
                    exact_memory=device_kind(record.device or "cpu") == "cuda",
                    identity=record.identity, reference_samples=record.reference_samples,
                    on_cpu=device_kind(record.device or "cpu") == "cpu", efficiency=record.efficiency,
                    latency_ms=record.latency_ms if record.latency_judged else None,
                    compile_s=record.compile.compile_s if record.compile else None,
                    compile_cache=record.compile.cache if record.compile else None, looks=record.looks,
                    declared=tuple(record.declared), visits=lifecycle.visit_count(record))

"""The baseline lifecycle: what ``--update-baselines[=all|missing|force]`` does with one test's result.

An update never silently absorbs a regression: a test that regresses against its entry keeps the old
entry unless the mode is ``force``.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any

from hwregress import __version__
from hwregress.devices import fingerprint_changes
from hwregress.results import TestRecord
from hwregress.stats import summarize
from hwregress.verdicts import NOT_MEASURED, Verdict

UPDATE_MODES = ("all", "missing", "force")


def update_action(mode: str | None, verdict: str, has_entry: bool) -> str:
    """What to do with the baseline entry of a finished test.

    Returns:
        ``"none"`` (no update requested, or nothing measured), ``"recorded"`` (write the entry),
        ``"kept-existing"`` (mode ``missing`` and an entry exists) or ``"kept-regression"`` (the test
        regressed and the mode is not ``force``) or ``"kept-unstable"`` (the window stayed noisy after
        extending its rounds and the mode is not ``force``: a noisy window would widen every later threshold).

    Raises:
        ValueError: ``mode`` is not None or one of :data:`UPDATE_MODES`.
    """
    if mode is None:
        return "none"
    if mode not in UPDATE_MODES:
        raise ValueError(f"--update-baselines={mode!r}: use one of {', '.join(UPDATE_MODES)}")
    if verdict in NOT_MEASURED:
        return "none"
    if mode == "missing" and has_entry:
        return "kept-existing"
    if verdict == Verdict.REGRESSION and mode != "force":
        return "kept-regression"
    if verdict == Verdict.UNSTABLE and mode != "force":
        return "kept-unstable"
    return "recorded"


HISTORY_LENGTH = 20


def make_entry(record: TestRecord, previous: dict[str, Any] | None = None) -> dict[str, Any]:
    """The baseline entry for ``record``: identity, raw samples and their summary, secondary figures,
    environment fingerprint, UTC time of recording and hwregress version, and ``history``: the medians
    of the last :data:`HISTORY_LENGTH` sessions that recorded it (``previous`` entry's plus this one),
    from which the comparison learns the drift between sessions."""
    entry: dict[str, Any] = {
        "family": record.family,
        "model": record.model,
        "mode": record.mode,
        "batch_size": record.batch_size,
        "dtype": record.dtype,
        "device_name": record.device_name,
        "unit": record.unit,
        "samples": list(record.samples),
        "steps_per_round": record.steps_per_round,
        "latency_ms": record.latency_ms,
        "peak_memory_bytes": record.peak_memory_bytes,
        "accuracy": record.accuracy,
        "speedup": record.speedup,
        "environment": dict(record.environment),
        "recorded_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "hwregress_version": __version__,
    }
    if record.samples:
        summary = summarize(record.samples)
        previous = previous or {}
        history = list(previous.get("history", []))
        stack_changed = bool(previous) and bool(fingerprint_changes(previous.get("environment", {}), entry["environment"]))
        if stack_changed:
            history = []  # another software stack: its drift says nothing about this one
        entry.update(median=summary.median, iqr=summary.iqr, n=summary.n,
                     history=[*history, summary.median][-HISTORY_LENGTH:])
    return entry

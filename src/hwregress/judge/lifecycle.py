"""The baseline lifecycle: what ``--update-baselines[=all|missing|force|reset]`` does with one test's result.

An update never silently absorbs a regression: a test that regresses against its entry (or whose window stayed
unstable) keeps the old entry unless the mode is ``force`` (add this session to the entry's pool) or ``reset``
(start the entry afresh from this session: accept a new level at once).
"""

from __future__ import annotations

import datetime as _dt
import math
from typing import Any

import numpy as np

from hwregress import __version__
from hwregress.hardware.facts import fingerprint_changes, identity_changes
from hwregress.store.results import TestRecord
from hwregress.store.verdicts import NOT_MEASURED, Verdict
from hwregress.summary import summarize

UPDATE_MODES = ("all", "missing", "force", "reset")


def update_action(mode: str | None, verdict: str, has_entry: bool) -> str:
    """What to do with the baseline entry of a finished test.

    Returns:
        ``"none"`` (no update requested, or nothing measured), ``"recorded"`` (write the entry),
        ``"kept-existing"`` (mode ``missing`` and an entry exists) or ``"kept-regression"`` (the test
        regressed and the mode is neither ``force`` nor ``reset``) or ``"kept-unstable"`` (the window stayed
        noisy after extending its rounds, same modes: a noisy window would widen every later threshold).

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
    if verdict == Verdict.REGRESSION and mode not in ("force", "reset"):
        return "kept-regression"
    if verdict == Verdict.UNSTABLE and mode not in ("force", "reset"):
        return "kept-unstable"
    return "recorded"


HISTORY_LENGTH = 20
POOLED_SESSIONS = 5
SAMPLES_PER_SESSION = 10


def session_quantiles(samples: list[float], count: int = SAMPLES_PER_SESSION) -> list[float]:
    """At most ``count`` samples standing for one session: the samples themselves, or ``count`` evenly spaced
    quantiles of them when the session extended its rounds. Every session then weighs the same in the pool: a
    noisy session that ran 200 rounds must not outvote three quiet ones of 10."""
    if len(samples) <= count:
        return list(samples)
    return [float(q) for q in np.quantile(np.asarray(samples, dtype=float), np.linspace(0.0, 1.0, count))]


def make_entry(record: TestRecord, previous: dict[str, Any] | None = None, fresh: bool = False) -> dict[str, Any]:
    """The baseline entry for ``record``: identity, samples and their summary, secondary figures, environment
    fingerprint, UTC time of recording and hwregress version.

    A session's median moves between sessions more than its rounds spread inside one
    (docs/measured.md, 'Noise between sessions'), so an entry pools what several sessions saw:
    ``session_samples`` keeps the per-round samples of the last :data:`POOLED_SESSIONS` sessions that
    recorded it, ``samples`` is their union (the reference a new session is judged against), and ``history``
    the medians of the last :data:`HISTORY_LENGTH` sessions, from which the comparison learns the drift
    between sessions. A changed software stack or hardware identity starts both afresh, as does a changed number of
    visits (``visits``: a launch-bound test judged on the fastest of several windows, :mod:`hwregress.measure.visits`,
    is another figure than one window) and ``fresh`` (``--update-baselines=reset``: accept a new level at once)."""
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
        "efficiency": record.efficiency,
        "environment": dict(record.environment),
        "recorded_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "hwregress_version": __version__,
    }
    if visit_count(record) > 1:
        entry["visits"] = visit_count(record)
    earlier = {} if fresh else _same_machine(record, previous or {})
    if record.samples:
        entry.update(_pooled(record, earlier))
    if record.peak_memory_bytes is not None:
        entry.update(_pooled_peak_memory(record.peak_memory_bytes, earlier))
    if record.efficiency is not None:
        entry.update(_pooled_efficiency(record.efficiency, earlier))
    if record.latency_ms is not None and record.latency_judged:
        entry.update(_pooled_latency(record.latency_ms, earlier))
    if record.compile is not None and record.compile.compile_s is not None:
        entry.update(_pooled_compile(record.compile.compile_s, record.compile.cache, earlier))
    declared = {figure.metric: figure.value for figure in record.declared
                if figure.metric and figure.value is not None and math.isfinite(figure.value) and figure.value > 0}
    entry.update(_pooled_declared(declared, earlier))
    return entry


def _pooled_declared(values: dict[str, float], previous: dict[str, Any]) -> dict[str, Any]:
    """The declared metrics' values (:func:`hwregress.store.metrics.register`; name -> value in the metric's unit),
    each pooled as a judged latency is: the entry keeps the last :data:`HISTORY_LENGTH` sessions' values per metric
    (``metric_history``) and judges against their median (``metrics``). A metric this session did not measure keeps
    its history; a value that is not above 0 is not pooled (a ratio to the baseline's needs one). Empty (no keys)
    where neither this session nor the entry holds any."""
    earlier = previous.get("metric_history") if isinstance(previous.get("metric_history"), dict) else {}
    histories = {name: list(history) for name, history in earlier.items() if isinstance(history, list) and history}
    for name, value in values.items():
        histories[name] = [*histories.get(name, []), value][-HISTORY_LENGTH:]
    if not histories:
        return {}
    return {"metrics": {name: float(np.median(history)) for name, history in histories.items()},
            "metric_history": histories}


def _pooled_compile(compile_s: float, cache: str | None, previous: dict[str, Any]) -> dict[str, Any]:
    """A compile time (s) with the cache state it was measured in (``cold``/``warm``): the entry keeps the last
    :data:`HISTORY_LENGTH` sessions' compile times of that state and compares against their median; a session of
    another state starts the history afresh (a warm and a cold compile are never pooled)."""
    same_state = previous.get("compile_cache") == cache
    history = [*(previous.get("compile_history", []) if same_state else []), compile_s][-HISTORY_LENGTH:]
    return {"compile_s": float(np.median(history)), "compile_cache": cache, "compile_history": history}


def _pooled_peak_memory(peak_bytes: int, previous: dict[str, Any]) -> dict[str, Any]:
    """A peak memory (bytes) against which the ceiling is judged: the largest of the last :data:`POOLED_SESSIONS`
    sessions' peaks (``peak_memory_history``, oldest first). A CPU peak is sampled RSS growth and moves between
    sessions of unchanged code (alexnet train bs8 on the 2-core VM: 768 or 921 MiB, one or the other, in the sessions of
    one day), so the ceiling of the latest session alone failed a quiet one; the CUDA allocator's peaks repeat
    exactly, and their largest is the same figure. An entry written before the history starts it with its own peak;
    a value that is not a non-negative number (a hand-edited file) is left out."""
    recorded = previous.get("peak_memory_history")
    earlier = [value for value in (recorded if isinstance(recorded, list) else []) if _a_peak(value)]
    if not earlier and isinstance(previous.get("peak_memory_bytes"), (int, float)):
        earlier = [previous["peak_memory_bytes"]]
    history = [int(value) for value in [*earlier, peak_bytes][-POOLED_SESSIONS:]]
    return {"peak_memory_bytes": max(history), "peak_memory_history": history}


def _a_peak(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def _pooled_efficiency(efficiency: float, previous: dict[str, Any]) -> dict[str, Any]:
    """A scaling or co-location efficiency is a ratio of two throughputs, and moves between sessions as they do:
    the entry keeps the last :data:`HISTORY_LENGTH` sessions' efficiencies and judges against their median."""
    history = [*previous.get("efficiency_history", []), efficiency][-HISTORY_LENGTH:]
    return {"efficiency": float(np.median(history)), "efficiency_history": history}


def _pooled_latency(latency_ms: float, previous: dict[str, Any]) -> dict[str, Any]:
    """A judged latency moves between sessions as a throughput does: the entry keeps the last :data:`HISTORY_LENGTH`
    sessions' latencies (ms) and judges against their median."""
    history = [*previous.get("latency_history", []), latency_ms][-HISTORY_LENGTH:]
    return {"latency_ms": float(np.median(history)), "latency_history": history}


def visit_count(record: TestRecord) -> int:
    """The visits ``record``'s judged figure is the fastest of (``details.visits.count``; 1: its own window)."""
    figures = record.details.get("visits")
    count = figures.get("count") if isinstance(figures, dict) else None
    return count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 1


def _same_machine(record: TestRecord, previous: dict[str, Any]) -> dict[str, Any]:
    """``previous`` when it was recorded with the same software stack, hardware identity and number of visits, else
    ``{}``."""
    if previous and previous.get("visits", 1) != visit_count(record):
        return {}  # the fastest of several windows is another figure than one window
    if fingerprint_changes(previous.get("environment", {}), dict(record.environment)):
        return {}  # another software stack: its sessions say nothing about this one
    if identity_changes(previous.get("identity") or {}, record.identity):
        return {}
    return previous


def _pooled(record: TestRecord, previous: dict[str, Any]) -> dict[str, Any]:
    earlier = previous.get("session_samples") or ([previous["samples"]] if previous.get("samples") else [])
    sessions = [*earlier, session_quantiles(record.samples)][-POOLED_SESSIONS:]
    pooled = [sample for session in sessions for sample in session]
    summary = summarize(pooled)
    history = [*previous.get("history", []), summarize(record.samples).median][-HISTORY_LENGTH:]
    return {"samples": pooled, "session_samples": sessions, "median": summary.median, "iqr": summary.iqr,
            "n": summary.n, "history": history}

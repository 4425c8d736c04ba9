"""The figures of an interleaved A/B test of two software stacks (:mod:`hwregress.ab`, docs/ab.md), as a typed
sub-record of :class:`hwregress.store.results.TestRecord` (``record.ab``); descriptions as in
:mod:`hwregress.store.figures`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hwregress.store.figures import Figures, doc


@dataclass
class ABPairFigures(Figures):
    """One pair of windows of an A/B test, in the order it ran."""

    index: int | None = doc("the pair's place in the test, from 0")
    order: str | None = doc("which stack's window ran first: AB or BA")
    a: float | None = doc("stack A's throughput in its window, in the record's unit (null: the window failed)")
    b: float | None = doc("stack B's throughput in its window, in the record's unit (null: the window failed)")
    a_error: str | None = doc("why stack A's window failed, else null")
    b_error: str | None = doc("why stack B's window failed, else null")
    dropped: str | None = doc("why the pair was left out of the verdict (a failed window, or the balance of AB and "
                              "BA pairs), else null")
    a_telemetry: dict[str, Any] | None = doc("stack A's window on a GPU: mean sm_clock_mhz and mem_clock_mhz (MHz), "
                                             "mean power_w (W), max temperature_c (deg C), throttle_reasons; null "
                                             "where NVML has none (a CPU)")
    b_telemetry: dict[str, Any] | None = doc("stack B's window likewise")
    process: int | None = doc("the process pair (from 0) whose two workers ran this pair's windows")


@dataclass
class ABFigures(Figures):
    """B against A in one interleaved A/B test: the pairs of windows, the paired verdict's ratio and interval, and the
    two stacks (:mod:`hwregress.ab.session`). The record's ``verdict``, ``ratio``, ``throughput`` (B's median) and
    ``reach`` (the paired MDS) are this test's."""

    ratio: float | None = doc("x, B's throughput over A's: exp of the Hodges-Lehmann estimate of the pairs' "
                              "log-ratios (0.9: B 10% slower); null: fewer than 2 pairs kept")
    ratio_low: float | None = doc("x, the one-sided (1 - alpha) lower bound of the ratio (null: too few pairs)")
    ratio_high: float | None = doc("x, the one-sided (1 - alpha) upper bound of the ratio (null: too few pairs)")
    p_slower: float | None = doc("one-sided Wilcoxon signed-rank p-value of 'B slower'")
    p_faster: float | None = doc("one-sided Wilcoxon signed-rank p-value of 'B faster'")
    alpha: float | None = doc("the significance level of the look that ended the test (the test's alpha / K)")
    threshold: float | None = doc("fraction, the change that counts: a pass bounds the ratio within 1 +- threshold")
    max_threshold: float | None = doc("fraction, the gross-drop cap (a drop beyond it on >= 4 pairs is a regression "
                                      "without the test); null: no gross-drop rule")
    gross: bool | None = doc("whether the gross-drop rule decided")
    pairs_kept: int | None = doc("pairs judged at the look that ended the test")
    looks_planned: list[int] = doc("the planned cumulative pair counts of the looks", factory=list)
    looks_taken: list[int] = doc("the pair counts of the looks taken; the last ended the test", factory=list)
    steps_per_window: int | None = doc("timed steps per window (each window also runs one untimed step first)")
    seed: int | None = doc("the seed of the balanced AB/BA order")
    pairs_per_process: int | None = doc("pairs of windows each fresh pair of worker processes ran: the unit of the "
                                        "verdict is a process pair's mean log-ratio")
    processes: int | None = doc("process pairs started (one per pairs_per_process pairs)")
    units: int | None = doc("units of the verdict judged at the look that ended the test")
    verdict_unit: str | None = doc("what one unit of the verdict is: a process pair (null in records before it was "
                                   "kept), or a pair of windows where both stacks' processes live for the whole test "
                                   "(serving: one server per stack)")
    a_throughput: float | None = doc("stack A's median throughput over the kept pairs, in the record's unit")
    b_throughput: float | None = doc("stack B's median throughput over the kept pairs, in the record's unit")
    pairs: list[ABPairFigures] = doc("every pair run, in time order", factory=list)
    stacks: dict[str, Any] = doc("each stack as given: {'A': {'python': path, 'env': {...}}, 'B': ...}", factory=dict)
    fingerprints: dict[str, Any] = doc("each stack's worker fingerprint: {'A': {...}, 'B': {...}} (torch, CUDA, "
                                       "cuDNN, Python, the interpreter, threads, the settings either stack sets; "
                                       "serving: the server interpreter's package versions)",
                                       factory=dict)
    difference: list[str] = doc("what differs between the two fingerprints, one line each (e.g. 'torch 2.13.0 -> "
                                "2.11.0', 'env OMP_NUM_THREADS: unset -> 1')", factory=list)
    memory: str | None = doc("how the two models shared the device: both (both loaded throughout) or reload (one "
                             "at a time, rebuilt before each window: they did not fit together)")
    reload_s: float | None = doc("s, the time spent rebuilding models between windows when memory is reload, "
                                 "untimed")

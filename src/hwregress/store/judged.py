"""What the judge found for one test against its baseline entry, as a frozen value, and the one function that puts it
on the test's record.

The judge (:func:`hwregress.judge.compare.judge`) returns these figures inside its ``Judgement``; it writes nothing
onto a record. :func:`write_judged` is where a record takes them: every judged field, so that a figure the judgement
did not produce reads None (a record judged a second time, as ``report compare`` may, keeps nothing of the first).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from hwregress.store.figures import CompileComparison, CompileFigures, ReachFigures
from hwregress.store.results import TestRecord


@dataclass(frozen=True)
class JudgedFigures:
    """The figures of one judgement; a field left None was not judged.

    Attributes:
        ratio: throughput / the baseline's median throughput.
        threshold: the throughput loss tolerated (fraction), after the noise and history bounds.
        p_value: the one-sided Mann-Whitney p-value of "slower than the baseline".
        alpha: the significance level the throughput was judged at (the last look's, or the plain alpha).
        wanted_threshold: the threshold the noise and history bounds asked for where the cap cut it (fraction).
        memory_ratio: peak memory / the baseline's peak memory.
        baseline_throughput: the baseline's median throughput, in the record's unit.
        baseline_peak_memory_bytes: the baseline's peak memory, bytes.
        baseline_accuracy: the baseline's accuracy (fraction).
        baseline_speedup: the baseline's speedup (x).
        baseline_efficiency: the baseline's efficiency (fraction).
        baseline_latency_ms: the baseline's judged latency, ms.
        reach, latency_reach, efficiency_reach, speedup_reach: what each judged figure's verdict could catch
            (:mod:`hwregress.judge.reach`).
        env_changes: the software fingerprint's differences from the baseline's (``"torch 2.4.0 -> 2.5.0"``).
        identity_changes: the hardware identity's differences from the baseline's.
        compile_vs_baseline: a compiled model's compile time against the baseline's (shown, never judged).
    """

    ratio: float | None = None
    threshold: float | None = None
    p_value: float | None = None
    alpha: float | None = None
    wanted_threshold: float | None = None
    memory_ratio: float | None = None
    baseline_throughput: float | None = None
    baseline_peak_memory_bytes: int | None = None
    baseline_accuracy: float | None = None
    baseline_speedup: float | None = None
    baseline_efficiency: float | None = None
    baseline_latency_ms: float | None = None
    reach: ReachFigures | None = None
    latency_reach: ReachFigures | None = None
    efficiency_reach: ReachFigures | None = None
    speedup_reach: ReachFigures | None = None
    env_changes: tuple[str, ...] = ()
    identity_changes: tuple[str, ...] = ()
    compile_vs_baseline: CompileComparison | None = None


# the record fields that take a JudgedFigures field of the same name as it is
RECORD_FIELDS = tuple(f.name for f in dataclasses.fields(JudgedFigures)
                      if f.name not in ("env_changes", "identity_changes", "compile_vs_baseline"))


def write_judged(record: TestRecord, figures: JudgedFigures) -> None:
    """Put ``figures`` on ``record``: each judged field (None where not judged), the environment and identity changes,
    and ``record.compile.vs_baseline`` (made where the record has no compile figures yet; cleared where not
    compared)."""
    for name in RECORD_FIELDS:
        setattr(record, name, getattr(figures, name))
    record.env_changes = list(figures.env_changes)
    record.identity_changes = list(figures.identity_changes)
    if figures.compile_vs_baseline is not None:
        record.compile = record.compile or CompileFigures()
        record.compile.vs_baseline = figures.compile_vs_baseline
    elif record.compile is not None:
        record.compile.vs_baseline = None

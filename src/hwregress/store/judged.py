"""What judging one test concluded, as frozen values, and the functions that put them on the test's record.

The judge (:func:`hwregress.judge.compare.judge`) returns its figures (:class:`JudgedFigures`) inside its
``Judgement``; the session (:meth:`hwregress.judge.session.BenchSession.conclude`) and the A/B family return a
:class:`Conclusion` (the verdict, the sentences, the figures and what became of the baseline entry); neither writes
onto a record: the assembler does (:func:`hwregress.store.assembly.put_judged`,
:func:`hwregress.store.assembly.put_conclusion`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from hwregress.store.figures import CompileComparison, DeclaredFigures, ReachFigures
from hwregress.store.verdicts import Verdict


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
        declared: the judged figures of the record's declared metrics (:class:`hwregress.store.figures.
            DeclaredFigures`: their baseline, threshold and reach), one per metric judged.
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
    declared: tuple[DeclaredFigures, ...] = ()


# the record fields that take a JudgedFigures field of the same name as it is
RECORD_FIELDS = tuple(f.name for f in dataclasses.fields(JudgedFigures)
                      if f.name not in ("env_changes", "identity_changes", "compile_vs_baseline", "declared"))


@dataclass(frozen=True)
class Conclusion:
    """What judging one test concluded, the baseline lifecycle applied; built once, never changed.

    Attributes:
        verdict: the judged verdict (:class:`hwregress.store.verdicts.Verdict`); pytest's outcome of the test may still
            turn it into ``failed`` or a skip's verdict (:func:`hwregress.plugin.record.finish`).
        failures: sentences that make the test fail (empty: it passes).
        notes: sentences shown beside the verdict.
        figures: the judged figures (:class:`JudgedFigures`).
        baseline_action: what the session did to the test's baseline entry (``none``, ``recorded``,
            ``kept-existing``, ``kept-regression``, ``kept-unstable``, ``write-failed``), None: no lifecycle ran.
        baseline_recorded_at: when the entry judged against was recorded (ISO 8601), None: no entry.
        diagnosis: a regression's likely causes, most likely first (:func:`hwregress.judge.diagnosis.diagnose`).
    """

    verdict: Verdict
    failures: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    figures: JudgedFigures = JudgedFigures()
    baseline_action: str | None = None
    baseline_recorded_at: str | None = None
    diagnosis: tuple[str, ...] = ()

    @property
    def message(self) -> str:
        """The record's message: the failures, then the notes, joined by `` | ``."""
        return " | ".join((*self.failures, *self.notes))

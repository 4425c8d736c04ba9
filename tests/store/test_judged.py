"""A judgement's figures on a record (hwregress.store.judged): one function writes them, every judged field each time,
and the judgement itself cannot be changed after the judge built it."""

from __future__ import annotations

import dataclasses

import pytest

from hwregress.judge.compare import Judgement, Measured, judge
from hwregress.judge.tolerances import Tolerances
from hwregress.store.assembly import put_judged
from hwregress.store.figures import CompileComparison, CompileFigures, ReachFigures
from hwregress.store.judged import RECORD_FIELDS, JudgedFigures
from hwregress.store.metrics import METRICS
from hwregress.store.results import TestRecord
from hwregress.store.verdicts import Verdict

SAMPLES = [100.0, 101.0, 99.0, 100.5, 99.5, 100.0]


def test_every_judged_figure_lands_on_the_record_field_of_its_name():
    reach = ReachFigures(figure="throughput", mds=0.1)
    figures = JudgedFigures(ratio=0.9, threshold=0.15, p_value=0.2, alpha=0.01, baseline_throughput=110.0,
                            memory_ratio=1.1, reach=reach, env_changes=("torch 2.4.0 -> 2.5.0",),
                            identity_changes=("gpu_name: a -> b",),
                            compile_vs_baseline=CompileComparison(compared=True, ratio=1.5))
    record = TestRecord("t")
    put_judged(record, figures)
    assert {name: getattr(record, name) for name in RECORD_FIELDS} == {
        name: getattr(figures, name) for name in RECORD_FIELDS}
    assert record.env_changes == ["torch 2.4.0 -> 2.5.0"] and record.identity_changes == ["gpu_name: a -> b"]
    assert record.compile == CompileFigures(vs_baseline=CompileComparison(compared=True, ratio=1.5))


def test_the_record_fields_are_the_records_own():
    assert set(RECORD_FIELDS) <= {f.name for f in dataclasses.fields(TestRecord)}


def test_a_second_judgement_leaves_nothing_of_the_first_on_the_record():
    record = TestRecord("t", compile=CompileFigures(compile_s=3.0))
    put_judged(record, JudgedFigures(ratio=0.5, baseline_latency_ms=9.0, env_changes=("x",),
                                       compile_vs_baseline=CompileComparison(compared=False)))
    put_judged(record, JudgedFigures())
    assert all(getattr(record, name) is None for name in RECORD_FIELDS)
    assert record.env_changes == [] and record.identity_changes == []
    assert record.compile == CompileFigures(compile_s=3.0)  # the compile figures stay, their comparison goes


def test_a_judgement_is_frozen_and_extra_failures_make_it_a_regression_first():
    measured = Measured("t", SAMPLES, "samples/s", True, {}, on_cpu=True)
    judgement = judge(measured, {"samples": SAMPLES}, Tolerances())
    assert judgement.verdict == Verdict.PASS and judgement.figures.ratio == pytest.approx(1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        judgement.verdict = Verdict.REGRESSION  # type: ignore[misc]
    assert judgement.failing_first(None) is judgement and judgement.failing_first([]) is judgement
    failed = judgement.failing_first(["t: accuracy on the device 0.5 < the CPU's 0.9"])
    assert failed.verdict == Verdict.REGRESSION and failed.failures[0].startswith("t: accuracy")
    assert failed.figures is judgement.figures and judgement.verdict == Verdict.PASS


def test_no_baseline_is_new_with_no_figures():
    judgement = judge(Measured("t", SAMPLES, "samples/s", True, {}), None, Tolerances())
    assert judgement == Judgement(Verdict.NEW, notes=(judgement.notes[0],), figures=JudgedFigures())
    assert "--update-baselines" in judgement.notes[0]


def test_every_judged_metrics_baseline_ratio_and_reach_field_is_a_judged_figure():
    # store/metrics.py declares the metrics; a metric added there whose judge fills a field JudgedFigures lacks would
    # be lost between the judge and the record
    wanted = {name for metric in METRICS for name in (metric.baseline, metric.ratio, metric.reach) if name}
    assert wanted <= set(RECORD_FIELDS), sorted(wanted - set(RECORD_FIELDS))

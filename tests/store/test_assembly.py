"""The record's assembler (hwregress.store.assembly) and the frozen measured stage it takes
(hwregress.store.measured): what a measurement holds lands on the record field of its name, what it does not hold
leaves the record's own value, mappings add, and the stage cannot change after it was built."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hwregress.store.assembly import put_conclusion, put_measured, put_outcome
from hwregress.store.figures import CompileFigures, LlmFigures
from hwregress.store.judged import Conclusion, JudgedFigures
from hwregress.store.measured import (
    MEASURED_FIELDS,
    MERGED_FIELDS,
    SEQUENCE_FIELDS,
    MeasuredFigures,
    energy_figures,
)
from hwregress.store.results import TestRecord
from hwregress.store.verdicts import Verdict

RECORD_FIELDS = {f.name for f in dataclasses.fields(TestRecord)}
FINITE = st.floats(min_value=1e-6, max_value=1e12, allow_nan=False)


def test_every_measured_field_is_a_record_field_of_the_same_name():
    assert set(MEASURED_FIELDS) <= RECORD_FIELDS
    # a declared metric's figure is the one both stages fill: the measurement its value, the judge its baseline,
    # threshold and reach (put_judged keeps the value)
    judged = {f.name for f in dataclasses.fields(JudgedFigures)} - {"declared"}
    assert not set(MEASURED_FIELDS) & (judged | {"verdict", "message", "outcome", "test_id", "family"})


def test_a_measurement_is_frozen_with_tuples_and_read_only_mappings():
    samples = [1.0, 2.0]
    measured = MeasuredFigures(samples=samples, details={"a": 1})
    samples.append(3.0)
    assert measured.samples == (1.0, 2.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        measured.throughput = 1.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        measured.details["b"] = 2  # type: ignore[index]
    assert measured.with_details(b=2).details == {"a": 1, "b": 2} and measured.details == {"a": 1}


@given(throughput=FINITE, latency=FINITE, samples=st.lists(FINITE, min_size=1, max_size=8),
       rounds=st.integers(1, 500), stable=st.booleans(), worker=st.sampled_from(["main", "gw0", "gw1"]))
def test_what_a_measurement_holds_lands_on_the_record_and_the_rest_stays(throughput, latency, samples, rounds, stable,
                                                                         worker):
    record = TestRecord("t", batch_size=8, unit="samples/s", details={"worker": worker},
                        environment={"torch": "2.13.0"}, identity={"cpu": "x"})
    measured = MeasuredFigures(throughput=throughput, latency_ms=latency, samples=samples, rounds=rounds,
                               stable=stable, details={"warmup_steps": 3}, environment={"spark": "4.0"},
                               llm=LlmFigures(itl_p50_ms=latency))
    assert put_measured(record, measured) is record
    assert (record.throughput, record.latency_ms, record.rounds, record.stable) == (throughput, latency, rounds,
                                                                                    stable)
    assert record.samples == samples and isinstance(record.samples, list)
    assert record.llm == LlmFigures(itl_p50_ms=latency)
    assert record.batch_size == 8 and record.unit == "samples/s" and record.peak_memory_bytes is None  # not held
    assert record.details == {"worker": worker, "warmup_steps": 3}  # added to, not replaced
    assert record.environment == {"torch": "2.13.0", "spark": "4.0"} and record.identity == {"cpu": "x"}
    assert all(isinstance(getattr(record, name), dict) for name in MERGED_FIELDS)


def test_a_later_measurement_overrides_only_what_it_holds():
    record = put_measured(TestRecord("t"), MeasuredFigures(throughput=10.0, samples=[10.0], unit="tokens/s",
                                                           telemetry={"energy_j": 5.0}))
    put_measured(record, MeasuredFigures(batch_size=64, efficiency=0.5))
    assert (record.throughput, record.samples, record.unit, record.batch_size, record.efficiency) == (
        10.0, [10.0], "tokens/s", 64, 0.5)
    assert record.telemetry == {"energy_j": 5.0} and type(record.telemetry) is dict
    assert [name for name in SEQUENCE_FIELDS if getattr(record, name) != []] == ["samples"]


def test_a_conclusion_lands_without_its_verdict_and_the_outcome_settles_it():
    record = put_measured(TestRecord("t", compile=CompileFigures(compile_s=2.0)), MeasuredFigures(throughput=9.0))
    conclusion = Conclusion(Verdict.REGRESSION, failures=("slower",), notes=("noisy",),
                            figures=JudgedFigures(ratio=0.9, threshold=0.05), baseline_action="kept-regression",
                            diagnosis=("contention",))
    put_conclusion(record, conclusion)
    assert record.verdict == Verdict.NEW  # not yet: pytest's outcome may still turn it
    assert (record.ratio, record.threshold, record.message, record.baseline_action, record.diagnosis) == (
        0.9, 0.05, "slower | noisy", "kept-regression", ["contention"])
    put_outcome(record, "failed", Verdict.REGRESSION, record.message, 1.5)
    assert (record.outcome, record.verdict, record.duration_s) == ("failed", Verdict.REGRESSION, 1.5)
    put_outcome(record, "failed", None, record.message + " | teardown failed: x", 0.1)  # a teardown's failure
    assert record.verdict == Verdict.REGRESSION and record.duration_s == 1.5 and record.message.endswith("failed: x")


def test_a_duration_the_family_measured_is_kept():
    record = put_measured(TestRecord("t"), MeasuredFigures(duration_s=12.5))
    put_outcome(record, "passed", Verdict.PASS, "", 13.0)
    assert record.duration_s == 12.5


def test_energy_figures_need_energy_and_samples():
    assert energy_figures(20.0, 10) == {"energy_j_per_sample": 2.0, "samples_per_joule": 0.5}
    assert energy_figures(None, 10) == energy_figures(0.0, 10) == energy_figures(20.0, 0) == {}


def test_throttled_is_read_from_the_telemetry_where_the_measurement_holds_some():
    throttling = put_measured(TestRecord("t"), MeasuredFigures(telemetry={"throttle_reasons": ["hw_thermal_slowdown"]}))
    assert throttling.throttled is True
    assert put_measured(TestRecord("t"), MeasuredFigures(telemetry={"readings": 4})).throttled is False
    assert put_measured(TestRecord("t", throttled=True), MeasuredFigures(samples=[1.0])).throttled is True  # kept

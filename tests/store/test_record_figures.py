"""The typed sub-records of a record (:mod:`hwregress.store.figures`): JSON round trip, the JSON Schema generated
from the types and equal to the shipped file, files of schema version 2 (figures in ``details``) migrated on read,
old journal lines likewise, nested type errors named by path, and the report rendered from each sub-record."""

from __future__ import annotations

import dataclasses
import json
import typing
from typing import Any, Union

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.schema_check import validate as validate_schema

from hwregress.report import render
from hwregress.store.figures import (
    AllreduceFigures,
    AllreducePoint,
    ColocatedFigures,
    ColocatedMember,
    CompileComparison,
    CompileFigures,
    Figures,
    LlmFigures,
    RankFigures,
    ScalingFigures,
    SparkFigures,
)
from hwregress.store.journal import record_from_json
from hwregress.store.results import SessionResults, TestRecord, load, record_problem
from hwregress.store.schemas.generate import REGENERATE, SCHEMA_PATH, schema_text
from hwregress.store.sub_records import SUB_RECORDS

UNION = type(int | None)
SCALAR = {float: st.floats(allow_nan=False, allow_infinity=False, width=64), int: st.integers(-(2**53), 2**53),
          str: st.text(max_size=8), bool: st.booleans()}


def _strategy(hint: Any) -> st.SearchStrategy:
    """Values of a type hint as the record's JSON holds them (sub-records as objects, any subset of their keys)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, UNION):
        return st.one_of(*(_strategy(a) for a in args))
    if hint is type(None):
        return st.none()
    if hint is Any:
        return st.none() | st.integers() | st.text(max_size=4)
    if hint in SCALAR:
        return SCALAR[hint]
    if origin is list:
        return st.lists(_strategy(args[0]), max_size=2)
    if origin is dict:
        return st.dictionaries(st.text(max_size=4), _strategy(args[1]), max_size=2)
    assert isinstance(hint, type) and issubclass(hint, Figures), hint
    hints = typing.get_type_hints(hint)
    return st.fixed_dictionaries({}, optional={f.name: st.deferred(lambda h=hints[f.name]: _strategy(h))
                                                for f in dataclasses.fields(hint)})


RECORD_JSON = st.fixed_dictionaries(
    {"test_id": st.text(min_size=1, max_size=8)},
    optional={name: st.none() | _strategy(kind) for name, kind in SUB_RECORDS.items()})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=RECORD_JSON)
def test_a_record_with_sub_records_survives_json_and_matches_the_schema(data, tmp_path_factory):
    record = TestRecord.from_json(data)
    for name, kind in SUB_RECORDS.items():
        assert getattr(record, name) is None or isinstance(getattr(record, name), kind)
    assert record_problem(record.to_json()) is None
    assert TestRecord.from_json(json.loads(json.dumps(record.to_json()))) == record
    session = SessionResults({"hostname": "h"}, [record]).to_json()
    validate_schema(session, "results")
    path = tmp_path_factory.mktemp("results") / "results.json"
    path.write_text(json.dumps(session))
    assert load(path).records == [record]


def test_the_shipped_schema_is_the_one_generated_from_the_types():
    assert SCHEMA_PATH.read_text(encoding="utf-8") == schema_text(), (
        f"{SCHEMA_PATH.name} differs from the types of TestRecord and hwregress.store.figures; regenerate it "
        f"with: {REGENERATE}")
    for kind in {RankFigures, AllreducePoint, ColocatedMember, CompileComparison, *SUB_RECORDS.values()}:
        for item in dataclasses.fields(kind):
            assert item.metadata.get("doc"), f"{kind.__name__}.{item.name} has no description (doc)"


def test_unknown_keys_of_a_sub_record_are_ignored_and_wrong_types_named_by_path():
    data = {"test_id": "t", "scaling": {"world_size": 2, "from_the_future": 1, "ranks": [{"rank": 0, "new": "x"}]}}
    assert record_problem(data) is None
    assert TestRecord.from_json(data).scaling == ScalingFigures(world_size=2, ranks=[RankFigures(rank=0)])
    bad = {"test_id": "t", "llm": {"ttft_ms": "slow"}}
    assert record_problem(bad) == "'llm.ttft_ms' must be float | None, found \"slow\""
    assert record_from_json(bad) is None


def test_update_refuses_a_field_the_sub_record_lacks():
    figures = SparkFigures()
    figures.update(pipeline="batch", rows=8)
    assert (figures.pipeline, figures.rows) == ("batch", 8)
    with pytest.raises(TypeError, match=r"SparkFigures has no field.*rowz.*figures\.py"):
        figures.update(rowz=8)


def test_a_writer_figure_the_sub_record_lacks_is_refused_not_dropped_nested_ones_too():
    produced = {"world_size": 2, "backend": "gloo", "ranks": [{"rank": 0, "median_step_ms": 12.5}]}
    assert ScalingFigures.of(produced).ranks[0].median_step_ms == 12.5
    with pytest.raises(TypeError, match=r"ScalingFigures has no field.*step_p99_ms"):
        ScalingFigures.of({**produced, "step_p99_ms": 14.0})
    with pytest.raises(TypeError, match=r"RankFigures has no field.*gpu_util"):
        ScalingFigures.of({**produced, "ranks": [{"rank": 0, "gpu_util": 0.9}]})
    # a file written by a newer version still reads: its extra figures are ignored there
    assert ScalingFigures.from_json({**produced, "step_p99_ms": 14.0}).world_size == 2


V2_DETAILS = {
    "identity": {"uuid": "GPU-1"}, "stable": True,
    "scaling": {"world_size": 2, "nodes": 1, "backend": "gloo", "efficiency": 0.9, "comm_share": 0.2,
                "ranks": [{"rank": 0, "median_step_ms": 3.0}, {"rank": 1, "median_step_ms": 3.1}]},
    "spark": {"master": "local[2]", "pipeline": "stream", "latency_ms": {"p50": 4.0, "p90": 6.0, "p99": 9.0},
              "latency_quantiles_ms": [1.0, 4.0, 9.0], "exactly_once": True},
    "llm": {"context": 128, "new_tokens": 16, "itl_p50_ms": 7.5, "kv_cache_dtype": "bfloat16"},
    "compile_s": 24.6, "compile_backend": "inductor", "frames_compiled": 1, "compile_cache": "cold",
    "compile_cache_counts": {"fxgraph_cache_miss": 3}, "compile_setup_s": 2.0,
    "compile_vs_baseline": {"compared": True, "cache": "cold", "baseline_compile_s": 20.0, "ratio": 1.23},
}


def test_a_version_2_file_loads_with_its_details_moved_into_the_sub_records(tmp_path):
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"schema_version": 2, "meta": {}, "records": [
        {"test_id": "t", "verdict": "pass", "details": V2_DETAILS},
        {"test_id": "u", "verdict": "failed", "details": {"compile_error": ["RuntimeError: boom"]}}]}))
    first, second = load(path).records
    assert first.scaling == ScalingFigures(world_size=2, nodes=1, backend="gloo", efficiency=0.9, comm_share=0.2,
                                           ranks=[RankFigures(rank=0, median_step_ms=3.0),
                                                  RankFigures(rank=1, median_step_ms=3.1)])
    assert first.spark is not None and first.spark.latency_ms["p90"] == 6.0 and first.spark.exactly_once is True
    assert first.llm == LlmFigures(context=128, new_tokens=16, itl_p50_ms=7.5, kv_cache_dtype="bfloat16")
    assert first.compile == CompileFigures(compile_s=24.6, setup_s=2.0, backend="inductor", frames_compiled=1,
                                           cache="cold", cache_counts={"fxgraph_cache_miss": 3},
                                           vs_baseline=CompileComparison(compared=True, cache="cold",
                                                                         baseline_compile_s=20.0, ratio=1.23))
    assert first.details == {}  # version 4 types the rest too
    assert first.identity == {"uuid": "GPU-1"} and first.stable is True
    assert second.compile == CompileFigures(error=["RuntimeError: boom"])
    assert "'scaling.world_size'" in str(_load_error(tmp_path, {"scaling": {"world_size": "two"}}))


def _load_error(tmp_path, details: dict[str, Any]) -> ValueError:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"schema_version": 2, "meta": {}, "records": [{"test_id": "t", "details": details}]}))
    with pytest.raises(ValueError) as caught:
        load(path)
    return caught.value


def test_an_old_journal_line_keeps_its_figures():
    record = record_from_json({"test_id": "t", "details": {"llm": {"ttft_ms": 12.0}, "compile_s": 1.5}})
    assert record is not None and record.llm == LlmFigures(ttft_ms=12.0)
    assert record.compile == CompileFigures(compile_s=1.5)
    assert record.details == {}


V3_DETAILS = {"identity": {"cpu_family": 25}, "device_facts": {"multiprocessors": 132}, "stable": False,
              "cpu_samples": [10.0, 11.0], "cpu_throughput": 10.5, "worker": "gw0"}


def test_a_version_3_record_reads_its_judged_inputs_into_the_typed_fields(tmp_path):
    # a results file and a journal line of version 3 kept the hardware and the judged inputs in details by string
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"schema_version": 3, "meta": {}, "records": [{"test_id": "t", "details": V3_DETAILS},
        {"test_id": "u", "details": {"efficiency_reference_samples": [5.0, 6.0]}}]}))
    journal_line = record_from_json({"test_id": "t", "details": dict(V3_DETAILS)})
    for first in (load(path).records[0], journal_line):
        assert first is not None
        assert (first.identity, first.device_facts) == ({"cpu_family": 25}, {"multiprocessors": 132})
        assert first.stable is False
        assert first.reference_samples == [10.0, 11.0]
        assert first.details == {"cpu_throughput": 10.5, "worker": "gw0"}  # what stays open-ended
    assert load(path).records[1].reference_samples == [5.0, 6.0]


def test_a_typed_field_already_set_wins_over_a_legacy_detail():
    record = record_from_json({"test_id": "t", "identity": {"cpu_family": 26}, "details": {"identity": {"old": 1}}})
    assert record is not None and record.identity == {"cpu_family": 26} and record.details == {}


def _record(test_id: str, family: str, model: str = "m", **fields: Any) -> TestRecord:
    return TestRecord(test_id, family=family, hardware_key="cpu", device="cpu", model=model, mode="train",
                      batch_size=4, dtype="fp32", throughput=100.0, samples=[99.0, 100.0, 101.0], rounds=3,
                      steps_per_round=2, **fields)


def test_the_report_shows_each_sub_record():
    records = [
        _record("s[w2]", "scaling", efficiency=0.875, scaling=ScalingFigures(
            world_size=2, nodes=1, backend="gloo", step_ms=3.25, comm_share=0.125, reference_throughput=57.0)),
        _record("a", "ceiling", model="allreduce", unit="GB/s", measures_roof=True, allreduce=AllreduceFigures(
            world_size=2, nodes=1, backend="gloo", curve=[
            AllreducePoint(bytes=1024, busbw_gbps=1.5, algbw_gbps=1.0),
            AllreducePoint(bytes=4096, busbw_gbps=3.0, algbw_gbps=2.0)])),
        _record("c", "colocated", colocated=ColocatedFigures(processes=2, mps_active=False, members=[
            ColocatedMember(index=0, model="tiny_mlp_member", solo_throughput=10.0, colocated_throughput=6.0,
                            interference=0.6)])),
        _record("k", "spark", spark=SparkFigures(master="local[7]", pipeline="batch", torch_throughput=123.5,
                                                 rows=640, partitions=2)),
        _record("l", "throughput", llm=LlmFigures(context=128, new_tokens=16, itl_p50_ms=7.25, ttft_ms=31.5,
                                                  tpot_ms=8.125, kv_cache_dtype="bfloat16")),
        _record("p", "throughput", compile=CompileFigures(compile_s=24.625, backend="inductor", frames_compiled=3,
                                                          cache="cold", vs_baseline=CompileComparison(
                                                              compared=True, baseline_compile_s=20.5, ratio=1.2))),
    ]
    html = render(SessionResults({"hostname": "h"}, records))
    for shown in ("gloo", "busbw", "tiny_mlp_member", "local[7]", "123.5", "KV cache bfloat16",
                  "31.5", "8.125", "Compiled with inductor", "24.62", "Baseline compile 20.5 s"):
        assert shown in html, shown


@pytest.mark.parametrize(("family", "view"), [("throughput", "models"), ("output-parity", "parity"),
                                              ("ceiling", "ceilings"), ("colocated", "colocation"),
                                              ("my-plugins-family", None)])
def test_a_record_without_a_view_reads_its_familys(family, view):
    assert TestRecord("t", family=family).view == view  # built in Python
    written = TestRecord("t", family=family).to_json()
    del written["view"]  # a record of schema version <= 6, or a journal line of an older hwregress
    assert TestRecord.from_json(written).view == view


def test_a_view_given_or_none_given_is_kept():
    assert TestRecord("t", family="scaling", view=None).view is None
    for view in (None, "spark", "a-view-of-my-own"):
        assert TestRecord.from_json({"test_id": "t", "family": "scaling", "view": view}).view == view

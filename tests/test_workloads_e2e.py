"""Text and LLM workloads and workloads of your own, end to end through the plugin in a pytester project."""

from __future__ import annotations

import json
import os
from pathlib import Path

import jsonschema
import pytest

from hwregress.store import schemas

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "custom_workload"


def test_causal_lm_runs_every_mode_in_tokens_per_second_with_serving_latencies(hw_project):
    args = ["--models", "tiny_lm", "--modes", "train,infer,prefill,decode", "--batch-sizes", "2", "--update-baselines"]
    hw_project.run(*args).assert_outcomes(passed=4)
    records = {r["mode"]: r for r in hw_project.results["records"]}
    assert set(records) == {"train", "infer", "prefill", "decode"}
    for record in records.values():
        assert record["unit"] == "tokens/s" and record["throughput"] > 0 and record["flops_per_sample"] > 0
        assert "-ctx16-bs2-" in record["test_id"]
    assert records["infer"]["details"]["samples_per_s"] * 16 == pytest.approx(records["infer"]["throughput"])
    decode = records["decode"]["llm"]
    assert decode["new_tokens"] == 16 and decode["ttft_ms"] > 0 and decode["tpot_ms"] > 0
    assert 0 < decode["itl_p50_ms"] <= decode["itl_p90_ms"] <= decode["itl_p99_ms"]
    assert records["decode"]["latency_ms"] == decode["itl_p50_ms"]  # judged: one decode step
    assert records["decode"]["throughput"] == pytest.approx(decode["decode_tokens_per_s"])  # judged: the decode steps
    assert decode["output_tokens_per_s"] > 0  # end to end, the prompt pass included: reported, not judged
    assert decode["kv_cache_dtype"] == "float32"
    jsonschema.validate(hw_project.results, schemas.schema("results"))
    assert records["prefill"]["llm"]["prefill_ms"] > 0
    (baseline,) = hw_project.baseline_files()
    text = baseline.read_text()
    assert "throughput/tiny_lm/decode-ctx16/bs2/fp32" in text and "throughput/tiny_lm/train-ctx16/bs2/fp32" in text


def test_a_workload_of_your_own_runs_by_name_from_workloads_module(hw_project):
    # the example's folder first, the rest kept: a checkout whose src/ is on PYTHONPATH (a worktree) still runs its own
    # code
    hw_project.monkeypatch.setenv("PYTHONPATH",
                                  os.pathsep.join(filter(None, [str(EXAMPLE), os.environ.get("PYTHONPATH")])))
    result = hw_project.run("--workloads", "custom_workload_example", "--models", "example_mlp", "--modes", "infer")
    result.assert_outcomes(passed=1)
    (record,) = hw_project.results["records"]
    assert record["model"] == "example_mlp" and record["unit"] == "samples/s" and record["throughput"] > 0


def test_a_workloads_module_that_cannot_be_imported_is_a_usage_error_naming_it(hw_project):
    result = hw_project.run("--workloads", "no_such_workload_module", inprocess=True)
    assert result.ret == 4
    assert "no_such_workload_module" in str(result.stderr) + str(result.stdout)
    assert "--workloads" in str(result.stderr) + str(result.stdout)


def test_a_compile_failure_is_a_failed_record_with_the_first_lines_and_the_session_goes_on(hw_project):
    result = hw_project.run("--compile", "eager,inductor", "--modes", "infer",
                            env={"HWREGRESS_SELFTEST_COMPILE_FAIL": "1"})
    result.assert_outcomes(passed=1, failed=1)
    records = {r["details"]["compiler"]: r for r in hw_project.results["records"]}
    failed = records["inductor"]
    assert failed["verdict"] == "failed" and failed["test_id"].endswith("[cpu-tiny-infer-inductor-bs4-fp32]")
    assert "compile with inductor failed: RuntimeError: injected compiler failure" in failed["message"]
    assert len(failed["compile"]["error"]) <= 5
    assert records["eager"]["verdict"] == "new"


def test_a_compiled_run_records_its_compile_time_apart_from_the_window(hw_project):
    hw_project.run("--compile", "inductor", "--modes", "infer", "--update-baselines").assert_outcomes(passed=1)
    (record,) = hw_project.results["records"]
    assert record["compile"]["compile_s"] > 0 and record["compile"]["frames_compiled"] >= 1
    assert record["throughput"] > 0
    assert record["compile"]["cache"] == "cold"  # a fresh inductor cache folder, whatever ran before
    assert record["compile"]["cache_counts"]["fxgraph_cache_hit"] == 0
    (baseline,) = hw_project.baseline_files()
    (entry,) = json.loads(baseline.read_text())["entries"].values()
    assert entry["compile_cache"] == "cold" and entry["compile_history"] == [record["compile"]["compile_s"]]

    hw_project.run("--compile", "inductor", "--modes", "infer").assert_outcomes(passed=1)
    (again,) = hw_project.results["records"]
    assert again["compile"]["cache"] == "cold"  # the first run's cache entries did not serve this one
    comparison = again["compile"]["vs_baseline"]
    assert comparison["compared"] is True and comparison["baseline_compile_s"] == record["compile"]["compile_s"]


def test_batch_sizes_max_finds_the_largest_power_of_two_below_an_injected_out_of_memory(hw_project):
    result = hw_project.run("--batch-sizes", "max", "--modes", "infer", "--update-baselines",
                            env={"HWREGRESS_SELFTEST_OOM_AT": "64"})
    result.assert_outcomes(passed=1)
    (record,) = hw_project.results["records"]
    assert record["test_id"].endswith("[cpu-tiny-infer-bsmax-fp32]")
    assert record["batch_size"] == 32 and record["throughput"] > 0
    assert record["details"]["max_batch"] == {"batch_size": 32, "first_oom": 64, "tried": [1, 2, 4, 8, 16, 32, 64],
                                              "limit": 64}
    (baseline,) = hw_project.baseline_files()
    entry = json.loads(baseline.read_text())["entries"]["throughput/tiny/infer/bsmax/fp32"]
    assert entry["batch_size"] == 32

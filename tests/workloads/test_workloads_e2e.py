"""Text and LLM workloads and workloads of your own, end to end through the plugin in a pytester project."""

from __future__ import annotations

import json
import os

import pytest
from support.html_checks import table_cells
from support.project import REPO
from support.schema_check import validate as validate_schema

EXAMPLE = REPO / "examples" / "custom_workload"


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
    validate_schema(hw_project.results, "results")
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


@pytest.mark.nightly
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


# workloads of one's own that go wrong: a forward that raises, logits that are NaN, allocations that fail (as
# torch.OutOfMemoryError, and as the plain RuntimeError an allocator or library raises)
BAD_MODELS = '''
import torch
from torch import nn
from hwregress.workloads import Workload, register


class Exploding(nn.Linear):
    def forward(self, x):
        raise RuntimeError("probe: forward exploded")


class NanLogits(nn.Linear):
    def forward(self, x):
        return super().forward(x.flatten(1)) * float("nan")


class OutOfMemoryTyped(nn.Linear):
    def forward(self, x):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (injected)")


class OutOfMemoryText(nn.Linear):
    def forward(self, x):
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB (injected as a RuntimeError)")


for name, module in (("exploding", Exploding), ("nan_logits", NanLogits), ("oom_typed", OutOfMemoryTyped),
                     ("oom_text", OutOfMemoryText)):
    register(Workload(name, build=lambda module=module: module(3 * 8 * 8, 10), input_shape=(3, 8, 8),
                      num_classes=10))
'''


def _run_bad_models(hw_project, models: str):
    """Throughput (infer) and output parity of ``models`` of :data:`BAD_MODELS`, registered by ``--workloads``."""
    import shutil

    (hw_project.path / "probe_bad_models.py").write_text(BAD_MODELS)
    shutil.copy(REPO / "bench_tests" / "test_parity.py", hw_project.path / "bench_tests")
    hw_project.monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(hw_project.path),
                                                                              os.environ.get("PYTHONPATH")])))
    result = hw_project.run("bench_tests/test_throughput.py", "bench_tests/test_parity.py", "-k",
                            "test_throughput or test_output_parity", "--workloads", "probe_bad_models", "--models",
                            models, "--modes", "infer")
    records = {(r["family"], r["model"]): r for r in hw_project.results["records"]}
    return result, records, (hw_project.path / "reports" / "report.html").read_text()


def test_an_exception_in_a_workload_keeps_its_type_text_and_place_in_record_terminal_and_report(hw_project):
    result, records, html = _run_bad_models(hw_project, "exploding")
    result.assert_outcomes(failed=2)
    output = result.stdout.str()
    for family in ("throughput", "output-parity"):
        record = records[(family, "exploding")]
        assert record["verdict"] == "failed"
        assert "RuntimeError: probe: forward exploded" in record["message"]
        assert "probe_bad_models.py:9: " in record["message"]  # where it was raised
        assert f"{record['test_id']}: " in output.split("= hwregress =")[-1]
    assert output.count("probe_bad_models.py:9: RuntimeError: probe: forward exploded") >= 2  # the hwregress lines
    assert html.count("RuntimeError: probe: forward exploded") >= 2


def test_non_finite_outputs_fail_output_parity_saying_so_with_the_count_of_each_side(hw_project):
    result, records, html = _run_bad_models(hw_project, "nan_logits")
    result.assert_outcomes(passed=1, failed=1)  # throughput measures a forward pass, whatever it computes
    record = records[("output-parity", "nan_logits")]
    assert record["verdict"] == "regression"
    sentence = ("outputs are not finite: 80 of 80 logits are NaN or inf on the device (cpu, fp32), 80 of 80 in the "
                "CPU fp32 reference")
    assert sentence in record["message"]
    assert "top-1 agreement" not in record["message"]
    assert record["accuracy"] == 0.0  # a non-finite row agrees with nothing
    assert sentence in result.stdout.str() and sentence in html


def test_an_allocation_failure_in_output_parity_is_oom_as_in_throughput(hw_project):
    result, records, html = _run_bad_models(hw_project, "oom_typed,oom_text")
    result.assert_outcomes(skipped=4)
    for model in ("oom_typed", "oom_text"):
        assert records[("throughput", model)]["verdict"] == "oom"
        parity_record = records[("output-parity", model)]
        assert parity_record["verdict"] == "oom"
        assert parity_record["message"] == "out of memory at batch 8 on cpu"
    assert "4 oom" in result.stdout.str().split("= hwregress =")[-1].splitlines()  # the session's verdict counts
    assert [row[0].strip() for row in table_cells(html, "id", "results")] == ["oom"] * 4  # the report's verdicts

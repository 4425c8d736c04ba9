"""The serving family end to end through the plugin, on a real ``transformers serve`` of a tiny Llama: a recorded
session (the trace, its digest, every window, the pooled percentiles, the declared metrics and the baseline entry),
then a session whose server is slower per token (support/serve_slowdown) judged a regression; and the family's cases
and modes."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from support.gpt2_cache import REPO as GPT2_REPO
from support.gpt2_cache import REVISION as GPT2_REVISION
from support.gpt2_cache import write_gpt2_cache
from support.project import REPO, SUPPORT_DIR, HwProject

from hwregress.plugin.families.serving import FAMILY, PERCENTILE_METRICS, ServingLoad, parse_mode
from hwregress.plugin.matrix import Selection
from hwregress.serving.server import unavailable_reason
from hwregress.serving.settings import ServingSettings

UNAVAILABLE = unavailable_reason("transformers")
SERVING = ["-m", "serving", "--devices", "cpu", "--workloads", "selftest_support", "--models", "tiny_llama",
           "--serving-rates", "8", "--serving-requests", "8", "--serving-windows", "3", "-p", "no:cacheprovider"]


@pytest.fixture
def serving_project(hw_project: HwProject) -> HwProject:
    shutil.copy(REPO / "bench_tests" / "test_serving.py", hw_project.path / "bench_tests")
    return hw_project


@pytest.mark.needs_extra
@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.skipif(UNAVAILABLE is not None, reason=f"needs transformers serve: {UNAVAILABLE}")
def test_a_recorded_serving_test_keeps_its_trace_and_windows_and_a_slower_server_is_a_regression(serving_project):
    first = serving_project.run(*SERVING, "--update-baselines", fast=False)
    first.assert_outcomes(passed=1)
    record = serving_project.results["records"][0]
    served = record["serving"]
    assert record["test_id"].endswith("[cpu-tiny_llama-rate8-fixed-bs8-fp32]") and record["unit"] == "tokens/s/user"
    assert served["engine"] == "transformers" and served["rate"] == 8.0 and served["requests"] == 8
    assert served["model_seed"] == 0 and served["model_source"] is None
    # 3 windows, extended one at a time up to 6 while their spread is over the recording's limit (a busy machine)
    windows = len(served["windows"])
    assert 3 <= windows <= 6 and windows == len(record["samples"]) and served["warmup_s"] > 0
    assert all(w["completed"] == 8 and w["failed"] == 0 for w in served["windows"])
    trace = json.loads(served["trace"])
    assert len(trace["requests"]) == 8 and len(served["trace_digest"]) == 64
    requests = 8 * windows
    assert served["ttft"]["count"] == requests and served["ttft"]["p99_bound"] is None  # 24-48 requests: no p99
    assert served["ttft"]["p50_bound"] is not None
    declared = {figure["metric"]: figure["value"] for figure in record["declared"]}
    stated = {name for name, (latency, p) in PERCENTILE_METRICS.items() if served[latency][f"p{p}_bound"] is not None}
    assert set(declared) == {*stated, "goodput"} and {"tpot_p50_ms", "e2el_p50_ms"} <= stated
    assert not {"ttft_p99_ms", "tpot_p99_ms"} & stated  # a p99 needs 459 requests
    assert requests >= 44 or not {"ttft_p90_ms", "tpot_p90_ms"} & stated  # a p90 44
    assert record["samples"] == pytest.approx([1000 / w["tpot"]["p50"] for w in served["windows"]])
    entries = json.loads(serving_project.baseline_files()[0].read_text())["entries"]
    assert set(entries["serving/tiny_llama/rate8-fixed/bs8/fp32"]["metrics"]) == set(declared)

    # every forward of the served Llama 0.1 s later: each output token of every request comes 0.1 s later
    slower = {"HWREGRESS_SELFTEST_SERVE_SLEEP_S": "0.1",
              "PYTHONPATH": os.pathsep.join([str(SUPPORT_DIR / "serve_slowdown"), os.environ.get("PYTHONPATH", "")])}
    second = serving_project.run(*SERVING, env=slower, fast=False)
    second.assert_outcomes(failed=1)
    judged = serving_project.results["records"][0]
    assert judged["verdict"] == "regression" and judged["ratio"] < 0.5, judged["message"]
    assert json.loads(judged["serving"]["trace"]) == trace  # the same load, replayed
    assert "TPOT p50" in judged["message"]
    # judged at planned looks: 3 windows, then 6 (twice --serving-windows); a halved speed decides at the first
    assert judged["looks"]["planned"] == [3, 6] and judged["looks"]["rounds"][0] == 3
    assert len(judged["serving"]["windows"]) == judged["looks"]["rounds"][-1]


@pytest.mark.needs_extra
@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.skipif(UNAVAILABLE is not None, reason=f"needs transformers serve: {UNAVAILABLE}")
def test_a_closed_loop_and_a_rate_sweep_record_their_figures_and_render_in_the_report(serving_project):
    loads = ["-m", "serving", "--devices", "cpu", "--workloads", "selftest_support", "--models", "tiny_llama",
             "--serving-concurrency", "2", "--serving-sweep", "4,16", "--serving-requests", "8",
             "--serving-windows", "3", "-p", "no:cacheprovider"]
    result = serving_project.run(*loads, "--update-baselines", fast=False)
    result.assert_outcomes(passed=2)
    closed, sweep = sorted(serving_project.results["records"], key=lambda r: r["mode"])
    assert closed["mode"] == "closed2-fixed" and closed["serving"]["concurrency"] == 2
    assert closed["serving"]["rate"] is None and len(closed["samples"]) >= 3
    assert len(closed["serving"]["ttft"]["quantiles"]) == 101
    assert sweep["mode"] == "sweep4_16-fixed" and sweep["samples"] == []
    points = sweep["serving"]["sweep"]
    # a point replays SWEEP_POINT_S (4 s on the CPU) of requests at its rate where more than the window's 8
    assert [point["rate"] for point in points] == [4.0, 16.0] and [p["completed"] for p in points] == [16, 64]
    declared = {figure["metric"]: figure["value"] for figure in sweep["declared"]}
    assert declared["capacity"] in (4.0, 16.0) and sweep["serving"]["peak_goodput"] == max(p["goodput"] for p in points)
    assert sweep["serving"]["capacity"] == declared["capacity"]
    page = (serving_project.path / "reports" / "report.html").read_text()
    assert 'id="serving"' in page and "Goodput over the offered rate" in page and "TTFT — tiny_llama" in page
    entries = json.loads(serving_project.baseline_files()[0].read_text())["entries"]
    assert set(entries["serving/tiny_llama/sweep4_16-fixed/bs8/fp32"]["metrics"]) == {"capacity"}


@pytest.mark.needs_extra
@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.skipif(UNAVAILABLE is not None, reason=f"needs transformers serve: {UNAVAILABLE}")
def test_gpt2_is_served_from_the_hugging_face_cache(serving_project, tmp_path):
    hub = tmp_path / "hub"
    write_gpt2_cache(hub)
    gpt2 = ["-m", "serving", "--devices", "cpu", "--models", "gpt2", "--serving-rates", "8", "--serving-requests", "8",
            "--serving-windows", "3", "-p", "no:cacheprovider"]
    served = serving_project.run(*gpt2, "--update-baselines", env={"HF_HUB_CACHE": str(hub)}, fast=False)
    served.assert_outcomes(passed=1)
    [record] = serving_project.results["records"]
    assert record["model"] == "gpt2" and record["serving"]["model_source"] == f"{GPT2_REPO}@{GPT2_REVISION}"
    assert record["serving"]["model_seed"] is None
    windows = record["serving"]["windows"]
    assert all(w["completed"] == 8 and w["failed"] == 0 for w in windows)
    # the trace's prompts were exactly its lengths, and every output its max_tokens: no end token stopped one
    assert record["serving"]["e2el"]["count"] == 8 * len(windows)


@pytest.mark.needs_extra
@pytest.mark.skipif(UNAVAILABLE is not None, reason=f"needs transformers serve: {UNAVAILABLE}")
def test_gpt2_without_its_weights_in_the_cache_is_unsupported_naming_the_download(serving_project, tmp_path):
    missing = serving_project.run("-m", "serving", "--devices", "cpu", "--models", "gpt2", "--serving-rates", "4",
                                  env={"HF_HUB_CACHE": str(tmp_path / "empty")}, inprocess=True)
    missing.assert_outcomes(skipped=1)
    [skipped] = serving_project.results["records"]
    assert skipped["verdict"] == "unsupported"
    assert "huggingface-cli download openai-community/gpt2" in skipped["message"]


def test_the_family_runs_when_asked_for_one_test_per_load_and_length_profile():
    settings = ServingSettings(rates=(1.0, 2.5), concurrency=(3,), sweep=(1.0, 2.0), lengths=("fixed", "long-tail"),
                               requests=12)
    asked = Selection(devices=["cpu"], opted_in=frozenset({"serving"}), serving=settings)
    cases = FAMILY.cases(asked)
    assert [(c["mode"], c["batch_size"]) for c in cases] == [
        ("rate1-fixed", 12), ("rate2.5-fixed", 12), ("closed3-fixed", 12), ("sweep1_2-fixed", 12),
        ("rate1-long-tail", 12), ("rate2.5-long-tail", 12), ("closed3-long-tail", 12), ("sweep1_2-long-tail", 12)]
    assert {c["workload"] for c in cases} == {"llama_small"} and {c["dtype"] for c in cases} == {"fp32"}
    assert FAMILY.cases(Selection(devices=["cpu"], serving=settings)) == []  # opt-in
    assert FAMILY.cases(Selection(devices=["cpu"], dtypes=["bf16"], opted_in=frozenset({"serving"}))) == []


def test_the_device_default_is_an_open_and_a_closed_loop_a_sweep_runs_when_asked_and_an_empty_load_asks_for_none():
    defaults = Selection(devices=["cpu"], opted_in=frozenset({"serving"}))
    assert [c["mode"] for c in FAMILY.cases(defaults)] == ["rate4-fixed", "closed4-fixed"]
    swept = Selection(devices=["cpu"], opted_in=frozenset({"serving"}), serving=ServingSettings(sweep=(8.0, 4.0)))
    assert [c["mode"] for c in FAMILY.cases(swept)] == ["rate4-fixed", "closed4-fixed", "sweep4_8-fixed"]
    only_rates = Selection(devices=["cpu"], opted_in=frozenset({"serving"}),
                           serving=ServingSettings(rates=(2.0,), concurrency=(), sweep=()))
    assert [c["mode"] for c in FAMILY.cases(only_rates)] == ["rate2-fixed"]


@pytest.mark.parametrize("load", [ServingLoad("fixed", rate=2.0), ServingLoad("long-tail", rate=0.25),
                                  ServingLoad("fixed", rate=1e-3), ServingLoad("fixed", clients=16),
                                  ServingLoad("long-tail", sweep_rates=(0.5, 1.0, 2.0)),
                                  ServingLoad("fixed", sweep_rates=(4.0, 8.0))])
def test_a_mode_reads_back_as_its_load(load):
    assert parse_mode(load.mode) == load
    assert load.sweep == (load.rate is None and load.clients is None)
    with pytest.raises(ValueError, match="'train' is not rate"):
        parse_mode("train")
    with pytest.raises(ValueError, match="a sweep's rates are numbers"):
        parse_mode("sweep2__4-fixed")


def test_options_that_are_not_rates_engines_or_profiles_are_refused_naming_the_flag(serving_project):
    for flag, value, fault in (("--serving-rates", "0", "request rate '0'"),
                               ("--serving-rates", "fast", "request rate 'fast'"),
                               ("--serving-engine", "tgi", "choose a serving engine from transformers, vllm"),
                               ("--serving-lengths", "short", "unknown length profile 'short'"),
                               ("--serving-windows", "2", "--serving-windows"),
                               ("--serving-concurrency", "0", "closed-loop clients '0'"),
                               ("--serving-concurrency", "2.5", "closed-loop clients '2.5'"),
                               ("--serving-sweep", "4", "a rate sweep needs at least 2 rates"),
                               ("--serving-sweep", "4,-1", "request rate '-1'")):
        result = serving_project.run("-m", "serving", f"{flag}={value}", inprocess=True)
        assert result.ret == pytest.ExitCode.USAGE_ERROR, flag
        assert fault in result.stderr.str(), result.stderr.str()

"""The report's Spark section: the batch table (Spark vs plain torch images/s, overhead ratio, top-1 agreement) and its
bar charts per device, the stream table (rates, latency percentiles, exactly-once count) and its latency CDF, the
flags on a disagreement or a lost image, and pages that stay whole with missing details or any latency quantiles."""

from __future__ import annotations

import re
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from support.html_checks import report_section, svg_charts, svg_legend, svg_tooltips, table_rows
from synthetic import as_loaded

from hwregress.report import render
from hwregress.report.spark_view import latency_cdf
from hwregress.store.results import SessionResults, TestRecord
from hwregress.store.verdicts import Verdict

META = {"hostname": "box", "started_at": "s", "finished_at": "f", "duration_s": 1.0, "args": ["-m", "cpu"],
        "hardware": [], "baseline_dir": "baselines"}
ENGINE = {"spark_version": "4.3.0", "master": "local[2]", "app_id": "local-1", "default_parallelism": 2, "task_cpus": 1,
          "executors": [{"id": "driver", "host": "192.0.2.2:43781", "cores": 2, "memory_bytes": 455501414,
                         "resources": {}}],
          "total_cores": 2, "layout": "1 executor x 2 cores, 1 CPU per task", "startup_s": 5.4}
QUANTILES = [300.0 + 5.0 * i for i in range(200)]  # ms, sorted: 300 .. 1295


def _test_id(device: str, pipeline: str) -> str:
    return f"bench_tests/test_spark.py::test_spark[{device}-mobilenet_v3_small-{pipeline}-bs16-fp32]"


def batch_record(throughput: float | None = 236.0, torch: float | None = 244.0, agreement: float | None = 1.0,
                 device: str = "cpu", device_name: str | None = "AMD EPYC",
                 hardware_key: str = "amd-epyc") -> TestRecord:
    overhead = throughput / torch if throughput and torch else None
    spark = {**ENGINE, "batch_size": 16, "pipeline": "batch", "rows": 512, "partitions": 2, "first_pass_s": 6.8,
             "passes": 5, "torch_throughput": torch, "torch_samples": [torch] * 5, "overhead_ratio": overhead,
             "agreement": agreement, "max_logit_difference": 0.0, "disagreements": [], "distinct_classes": 10}
    return TestRecord(_test_id(device, "batch"), family="spark", hardware_key=hardware_key, device=device,
                      device_name=device_name, model="mobilenet_v3_small", mode="batch", batch_size=16, dtype="fp32",
                      throughput=throughput, samples=[] if throughput is None else [throughput] * 5, accuracy=agreement,
                      efficiency=overhead, baseline_efficiency=0.95, verdict=Verdict.PASS, details={"spark": spark})


def stream_record(quantiles: Any = QUANTILES, exactly_once: bool = True, baseline_p50: float | None = 700.0,
                  device: str = "cpu") -> TestRecord:
    lost = 0 if exactly_once else 3
    spark = {**ENGINE, "batch_size": 16, "pipeline": "stream", "rate": 20.0, "images": 200, "warmup_images": 32,
             "produced": 232, "predicted": 232 - lost, "lost": lost, "duplicated": 0, "unexpected": 0,
             "exactly_once": exactly_once, "offered_rate": 20.08, "sustained_rate": 19.36,
             "latency_ms": {"p50": 742.4, "p90": 1040.2, "p99": 1183.3}, "latency_quantiles_ms": quantiles,
             "micro_batches": 16, "batch_rows": [14] * 16, "process_rates": [20.0] * 16, "process_rate": 20.4,
             "restarts": 1, "warmup_s": 3.5, "sink": "parquet", "checkpoint": True}
    return TestRecord(_test_id(device, "stream"), family="spark", hardware_key="amd-epyc", device=device,
                      device_name="AMD EPYC", model="mobilenet_v3_small", mode="stream", batch_size=16, dtype="fp32",
                      throughput=20.3, samples=[20.3] * 16, latency_ms=742.4, baseline_latency_ms=baseline_p50,
                      verdict=Verdict.PASS, details={"spark": spark})


def skipped_record(pipeline: str) -> TestRecord:
    return TestRecord(_test_id("cuda:0", pipeline), family="spark", device="cuda:0", model="resnet50", mode=pipeline,
                      batch_size=256, dtype="fp32", verdict=Verdict.UNSUPPORTED, details={"spark": None})


def _page(records: list[TestRecord]) -> str:
    """The page of ``records`` built with version-2 ``details``, read as a results file reads them."""
    return render(SessionResults(dict(META), [as_loaded(r) for r in records]))


def _section(html: str) -> str:
    return report_section(html, "spark")


# --- batch inference ------------------------------------------------------------------------------------------

def test_batch_table_shows_spark_and_torch_images_per_s_the_overhead_and_the_agreement():
    [row] = table_rows(_section(_page([batch_record()])), "spark-batch")
    assert row == ["pass", "test_spark[cpu-mobilenet_v3_small-batch-bs16-fp32]", "AMD EPYC (cpu)", "mobilenet_v3_small",
                   "16", "fp32", "236", "244", "0.967", "0.95", "100%", "2", "1 executor x 2 cores, 1 CPU per task",
                   "local[2]", "4.3.0"]


def test_batch_chart_per_device_draws_spark_beside_plain_torch():
    records = [batch_record(),
               batch_record(900.0, 1000.0, device="cuda:0", device_name="NVIDIA H100", hardware_key="h100")]
    section = _section(_page(records))
    assert [row[2] for row in table_rows(section, "spark-batch")] == ["AMD EPYC (cpu)", "NVIDIA H100 (cuda:0)"]
    cpu, gpu = (s for s in svg_charts(section) if "Spark vs plain torch" in s)
    assert "AMD EPYC (cpu), amd-epyc" in cpu and "NVIDIA H100 (cuda:0), h100" in gpu
    assert svg_tooltips(gpu) == ["Spark mobilenet_v3_small bs16 fp32: 900 images/s",
                              "torch mobilenet_v3_small bs16 fp32: 1k images/s"]


def test_an_agreement_below_one_is_flagged_and_never_reads_100_percent():
    section = _section(_page([batch_record(agreement=0.99998), batch_record(device="cuda:0", agreement=1.0)]))
    flagged, fine = re.findall(r"<tr[^>]*>\s*<td><span class=\"badge v-pass\">.*?</tr>", section, re.S)
    assert 'class="row-failed"' in flagged and '<span class="badge v-failed">99.99%</span>' in flagged
    assert "row-failed" not in fine and "v-failed" not in fine
    assert [row[10] for row in table_rows(section, "spark-batch")] == ["99.99%", "100%"]


# --- streaming ------------------------------------------------------------------------------------------------

def test_stream_table_shows_rates_latency_percentiles_and_the_exactly_once_count():
    [row] = table_rows(_section(_page([stream_record()])), "spark-stream")
    assert row[:6] == ["pass", "test_spark[cpu-mobilenet_v3_small-stream-bs16-fp32]", "AMD EPYC (cpu)",
                       "mobilenet_v3_small", "16", "fp32"]
    assert row[6:] == ["20.08 (20)", "19.36", "20.3", "742.4", "1040", "1183", "700", "232", "232", "0", "0", "yes",
                       "16", "1", "local[2]"]


def test_stream_latency_chart_is_the_cdf_of_the_quantiles_with_the_percentiles_marked():
    [chart] = [s for s in svg_charts(_section(_page([stream_record()]))) if "stream latency" in s]
    assert svg_legend(chart) == ["fraction of images", "p50 742 ms", "p90 1.04k ms", "p99 1.18k ms",
                                 "baseline p50 700 ms"]
    tips = svg_tooltips(chart)
    cdf = [t for t in tips if t.startswith("fraction of images")]
    assert (len(cdf) == len(QUANTILES) and cdf[0] == "fraction of images: 300, 0"
            and cdf[-1] == "fraction of images: 1.3k, 1")
    marks = {"p50 742 ms: 742, 0.5", "p90 1.04k ms: 1.04k, 0.9", "p99 1.18k ms: 1.18k, 0.99",
             "baseline p50 700 ms: 700, 0.5"}
    assert marks <= set(tips)
    assert "latency (ms)" in chart


def test_images_lost_are_flagged_red():
    section = _section(_page([stream_record(exactly_once=False, baseline_p50=None)]))
    [row] = table_rows(section, "spark-stream")
    # baseline p50, produced, predicted, lost, twice, exactly once
    assert row[12:18] == ["–", "232", "229", "3", "0", "no"]
    assert '<tr class="row-failed">' in section and '<span class="badge v-failed">no</span>' in section


# --- sections, missing details ----------------------------------------------------------------------------------

def test_no_section_without_spark_records_or_with_only_skipped_ones():
    plain = TestRecord("t[cpu-resnet18-bs8]", model="resnet18", mode="train", batch_size=8, device="cpu", dtype="fp32",
                       throughput=40.0, samples=[40.0] * 3)
    for records in ([plain], [plain, skipped_record("batch"), skipped_record("stream")]):
        html = _page(records)
        assert 'id="spark"' not in html and "Structured Streaming" not in html


def test_sub_sections_appear_only_with_their_records():
    batch_only = _section(_page([batch_record(), skipped_record("stream")]))
    assert "Batch inference" in batch_only and "Structured Streaming" not in batch_only
    stream_only = _section(_page([stream_record(), skipped_record("batch")]))
    assert "Structured Streaming" in stream_only and "Batch inference" not in stream_only
    assert len(table_rows(stream_only, "spark-stream")) == 1


def test_a_failed_test_with_only_the_engine_facts_renders_as_dashes():
    failed = [TestRecord(_test_id("cpu", mode), family="spark", device="cpu", model="resnet18", mode=mode, batch_size=8,
                         verdict=Verdict.FAILED, message="StreamFailed", details={"spark": dict(ENGINE)})
              for mode in ("batch", "stream")]
    section = _section(_page(failed))
    assert svg_charts(section) == []  # nothing to draw
    [batch] = table_rows(section, "spark-batch")
    assert batch[0] == "failed" and batch[6:11] == ["–"] * 5 and batch[12:] == ["1 executor x 2 cores, 1 CPU per task",
                                                                                "local[2]", "4.3.0"]
    [stream] = table_rows(section, "spark-stream")
    assert stream[0] == "failed" and set(stream[6:17]) == {"–"} and stream[17] == "–"
    assert "row-failed" not in section  # not known to disagree or lose images


# --- any latency quantiles ------------------------------------------------------------------------------------

QUANTILE = st.floats() | st.floats(0.0, 1e5) | st.integers(-(2**70), 2**70) | st.none()  # text: refused on load
QUANTILE_LISTS = (st.lists(QUANTILE, max_size=40) | st.lists(st.floats(0.0, 1e4), min_size=1, max_size=1)
                  | st.builds(lambda v, n: [v] * n, st.floats(0.0, 1e4), st.integers(2, 30)) | QUANTILE)


@settings(max_examples=40, deadline=None)
@given(QUANTILE_LISTS)
def test_any_latency_quantiles_render(quantiles):
    html = _page([stream_record(quantiles=quantiles)])
    assert html.lower().count("<script") == 1  # the page's own filter script: record text stayed escaped
    # the percentiles are drawn whatever the quantiles
    [chart] = [s for s in svg_charts(_section(html)) if "stream latency" in s]
    cdf = latency_cdf(quantiles)
    assert [x for x, _ in cdf] == sorted(x for x, _ in cdf) and all(0.0 <= y <= 1.0 for _, y in cdf)
    assert not cdf or cdf[-1][1] == 1.0
    drawn = [t for t in svg_tooltips(chart) if t.startswith("fraction of images")]
    assert len(drawn) == sum(abs(x) <= 1e30 for x, _ in cdf)  # the chart leaves out only figures beyond any axis

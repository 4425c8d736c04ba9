"""The report's serving section: the table of open- and closed-loop tests (speed per user against the baseline, the
latency percentiles with the baseline's judged ones and which the request count states, goodput, errors), each
test's TTFT and TPOT CDFs (stack A beside stack B for an A/B test), a rate sweep's table and its goodput- and
latency-over-rate charts with the SLO lines, and pages that stay whole with missing figures or any quantiles."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from support.html_checks import report_section, svg_charts, svg_legend, svg_tooltips, table_rows
from synthetic import as_loaded

from hwregress.report import render
from hwregress.report.serving_view import SERVING_VIEW
from hwregress.store.ab_figures import ABFigures
from hwregress.store.figures import DeclaredFigures, LookFigures
from hwregress.store.results import SessionResults, TestRecord
from hwregress.store.serving_figures import ServingFigures
from hwregress.store.verdicts import Verdict

META = {"hostname": "box", "started_at": "s", "finished_at": "f", "duration_s": 1.0, "args": ["-m", "serving"],
        "hardware": [], "baseline_dir": "baselines"}
TTFT_Q = [50.0 + 4.0 * i for i in range(101)]  # ms: 50 .. 450
TPOT_Q = [14.0 + 0.05 * i for i in range(101)]  # ms: 14 .. 19


def _latency(p50: float, p90: float, p99: float, quantiles: Any = None, count: int = 160,
             stated: tuple[int, ...] = (50, 90)) -> dict[str, Any]:
    return {"count": count, "mean": p50, "p50": p50, "p90": p90, "p99": p99,
            **{f"p{p}_bound": (value * 1.1 if p in stated else None) for p, value in ((50, p50), (90, p90), (99, p99))},
            "quantiles": [] if quantiles is None else quantiles}


def _window(goodput: float = 3.9, failed: int = 0) -> dict[str, Any]:
    return {"duration_s": 8.1, "completed": 32 - failed, "failed": failed, "request_throughput": 3.9,
            "output_throughput": 62.0, "goodput": goodput, "error_rate": failed / 32,
            "ttft": _latency(120.0, 200.0, 240.0, count=32, stated=(50,)),
            "tpot": _latency(16.0, 18.0, 19.0, count=32, stated=(50,))}


def _served(**extra: Any) -> dict[str, Any]:
    return {"engine": "transformers", "engine_version": "5.24.0", "rate": 4.0, "burstiness": 1.0, "lengths": "fixed",
            "prompt_tokens": 32, "output_tokens": 16, "requests": 32, "slo_ttft_ms": 1000.0, "slo_tpot_ms": 100.0,
            "windows": [_window() for _ in range(5)], "ttft": _latency(120.0, 200.0, 240.0, TTFT_Q),
            "tpot": _latency(16.0, 18.0, 19.0, TPOT_Q), "e2el": _latency(380.0, 450.0, 500.0), **extra}


def _declared(**values: tuple[float, float | None]) -> list[DeclaredFigures]:
    return [DeclaredFigures(metric=name, value=value, baseline=base,
                            unit="ms" if name.endswith("_ms") else "requests/s")
            for name, (value, base) in values.items()]


def load_record(mode: str = "rate4-fixed", served: dict[str, Any] | None = None, **fields: Any) -> TestRecord:
    fields = {"throughput": 62.5, "baseline_throughput": 61.0, "ratio": 1.025, "samples": [62.5] * 5,
              "verdict": Verdict.PASS, "declared": _declared(ttft_p90_ms=(200.0, 190.0), tpot_p50_ms=(16.0, 16.4),
                                                              goodput=(3.9, 3.95)), **fields}
    return TestRecord(f"bench_tests/test_serving.py::test_serving[cpu-llama_small-{mode}-bs32-fp32]", family="serving",
                      view=SERVING_VIEW, hardware_key="xeon", device="cpu", device_name="Intel Xeon",
                      model="llama_small", mode=mode, batch_size=32, dtype="fp32", unit="tokens/s/user",
                      serving=ServingFigures.of(_served() if served is None else served), **fields)


def _point(rate: float, goodput: float, ttft_p99: float) -> dict[str, Any]:
    return {**_window(goodput), "rate": rate, "ttft": _latency(ttft_p99 / 2, ttft_p99 * 0.8, ttft_p99, count=32),
            "tpot": _latency(16.0, 18.0 + rate, 20.0 + rate, count=32)}


def sweep_record() -> TestRecord:
    points = [_point(2.0, 1.95, 200.0), _point(4.0, 3.9, 260.0), _point(8.0, 6.1, 900.0), _point(16.0, 6.2, 4000.0)]
    served = _served(rate=None, burstiness=1.0, windows=[], sweep=points, capacity=8.0, peak_goodput=6.2, ttft=None,
                     tpot=None, e2el=None)
    return load_record("sweep2_4_8_16-fixed", served, throughput=None, baseline_throughput=None, ratio=None, samples=[],
                       declared=_declared(capacity=(8.0, 8.0)))


def _page(records: list[TestRecord]) -> str:
    return render(SessionResults(dict(META), [as_loaded(r) for r in records]))


def _section(html: str) -> str:
    return report_section(html, "serving")


def test_the_table_shows_speed_against_the_baseline_stated_percentiles_goodput_and_errors():
    record = load_record(looks=LookFigures(planned=[3, 6, 10], rounds=[3, 6], decision="pass"))
    [row] = table_rows(_section(_page([record])), "serving")
    assert row[:8] == ["pass", "test_serving[cpu-llama_small-rate4-fixed-bs32-fp32]", "Intel Xeon (cpu)",
                       "transformers 5.24.0", "4 requests/s, open loop (Poisson)", "fixed", "32",
                       "5 (3, 6 of 3, 6, 10)"]
    assert row[8:11] == ["62.5", "61", "1.02"]
    # TTFT p50, p90 (baseline 190), p99 (not stated: grey), TPOT p50 (baseline 16.4), p90, p99, E2EL p50
    assert row[11:18] == ["120", "200 (190)", "240", "16 (16.4)", "18", "19", "380"]
    assert row[18:] == ["3.9 (3.95)", "0.0%", "TTFT ≤ 1k ms, TPOT ≤ 100 ms"]
    section = _section(_page([record]))
    assert 'title="not stated: too few requests' in section


def test_a_closed_loop_names_its_clients_and_failed_requests_flag_the_row():
    served = _served(rate=None, concurrency=4, windows=[_window(failed=2), _window()])
    section = _section(_page([load_record("closed4-fixed", served, verdict=Verdict.FAILED)]))
    [row] = table_rows(section, "serving")
    assert row[4] == "4 clients, closed loop" and row[19] == "3.1%"  # 2 of 64 requests
    assert '<tr class="row-failed">' in section


def test_each_test_draws_ttft_and_tpot_cdfs_with_percentiles_baselines_and_the_slo():
    ttft, tpot = svg_charts(_section(_page([load_record()])))
    assert "TTFT — llama_small rate4-fixed, Intel Xeon (cpu)" in ttft
    assert svg_legend(ttft) == ["this session", "p50 120 ms", "p90 200 ms", "baseline p90 190 ms", "SLO 1k ms"]
    assert "beyond the axis" not in ttft
    # TPOT's SLO, 100 ms, is over 5x its largest value (19 ms): named in the title instead of squeezing the CDF
    assert svg_legend(tpot) == ["this session", "p50 16 ms", "p90 18 ms", "baseline p50 16.4 ms"]
    assert "(SLO 100 ms, beyond the axis)" in tpot
    cdf = [t for t in svg_tooltips(ttft) if t.startswith("this session")]
    assert len(cdf) == 101 and cdf[0] == "this session: 50, 0" and cdf[-1] == "this session: 450, 1"


def test_an_slo_far_beyond_the_distribution_is_named_in_the_title_not_drawn():
    served = _served(slo_ttft_ms=5000.0)  # 20x the largest TTFT: a line there would squeeze the CDF into one tick
    ttft, _ = svg_charts(_section(_page([load_record(served=served)])))
    assert "(SLO 5k ms, beyond the axis)" in ttft and not any(e.startswith("SLO") for e in svg_legend(ttft))


def test_an_ab_test_draws_stack_a_beside_stack_b():
    served = _served(reference_ttft=_latency(100.0, 150.0, 180.0, [40.0 + i for i in range(101)]),
                     reference_tpot=_latency(15.0, 16.0, 17.0, [13.0 + 0.04 * i for i in range(101)]))
    ab = ABFigures(ratio=0.98, ratio_low=0.95, ratio_high=1.01, pairs_kept=10, verdict_unit="server pair")
    section = _section(_page([load_record(served=served, ab=ab)]))
    assert table_rows(section, "serving")[0][0] == "pass A/B"
    ttft, _ = svg_charts(section)
    assert svg_legend(ttft)[:2] == ["stack A", "stack B"]


def test_a_sweep_shows_its_points_capacity_and_goodput_and_latency_over_rate_with_the_slo_lines():
    section = _section(_page([load_record(), sweep_record()]))
    assert len(table_rows(section, "serving")) == 1  # the sweep is not a load row
    points = table_rows(section, "serving-sweep")
    assert [row[:3] for row in points] == [["2", "3.9", "1.95"], ["4", "3.9", "3.9"], ["8", "3.9", "6.1"],
                                           ["16", "3.9", "6.2"]]
    assert "Capacity <b>8</b> requests/s <span class=\"muted\">(8)</span>" in section
    assert "peak goodput 6.2 requests/s." in section
    charts = [s for s in svg_charts(section) if "over the offered rate" in s]
    goodput, ttft, tpot = charts
    assert svg_legend(goodput) == ["goodput", "offered rate (every request within its SLOs)", "capacity 8 requests/s"]
    assert svg_legend(ttft) == ["TTFT p90", "TTFT p99", "SLO 1k ms"]
    assert svg_legend(tpot) == ["TPOT p90", "TPOT p99", "SLO 100 ms"]


def test_a_capacity_at_the_sweeps_highest_rate_reads_as_a_lower_bound():
    record = sweep_record()
    record.declared = _declared(capacity=(16.0, None))
    assert "Capacity <b>≥ 16</b> requests/s <span class=\"muted\">(goodput still rising" in _section(_page([record]))
    assert "Capacity <b>8</b>" in _section(_page([sweep_record()]))


def test_no_section_without_serving_records_and_a_failed_test_renders_as_dashes():
    plain = TestRecord("t[cpu-resnet18-bs8]", model="resnet18", mode="train", batch_size=8, device="cpu", dtype="fp32",
                       throughput=40.0, samples=[40.0] * 3)
    skipped = TestRecord("t[cpu-llama_small-rate4-fixed-bs32-fp32]", family="serving", view=SERVING_VIEW,
                         device="cpu", verdict=Verdict.UNSUPPORTED)
    assert 'id="serving"' not in _page([plain, skipped])
    failed = load_record(served={"engine": "transformers", "rate": 4.0}, throughput=None, baseline_throughput=None,
                         ratio=None, samples=[], declared=[], verdict=Verdict.FAILED)
    section = _section(_page([failed]))
    [row] = table_rows(section, "serving")
    assert row[0] == "failed" and set(row[8:20]) == {"–"} and svg_charts(section) == []


QUANTILE = st.floats() | st.floats(0.0, 1e5) | st.none()
QUANTILE_LISTS = st.lists(QUANTILE, max_size=40) | st.builds(lambda v, n: [v] * n, st.floats(0.0, 1e4),
                                                             st.integers(1, 30))


@settings(max_examples=30, deadline=None)
@given(QUANTILE_LISTS, QUANTILE_LISTS, st.lists(st.tuples(st.floats(0.01, 1e3), st.floats(0.0, 1e3)), max_size=6))
def test_any_quantiles_and_sweep_points_render(ttft, tpot, sweep):
    served = _served(ttft=_latency(120.0, 200.0, 240.0, ttft), tpot=_latency(16.0, 18.0, 19.0, tpot))
    swept = _served(windows=[], sweep=[_point(rate, good, 100.0) for rate, good in sweep])
    html = _page([load_record(served=served), load_record("sweep2_4_8_16-fixed", swept, samples=[], declared=[])])
    assert html.lower().count("<script") == 1  # the page's own filter script: record text stayed escaped
    _section(html)

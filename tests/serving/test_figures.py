"""A serving window's figures (hwregress.serving.requests, hwregress.serving.figures) against an independent
computation from the raw timestamps: plain Python, written from ``vllm bench serve``'s definitions, no NumPy."""

from __future__ import annotations

import itertools
import math
import re

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from hwregress.serving.figures import (
    CDF_LEVELS,
    PERCENTILES,
    Slo,
    capacity,
    latency_quantiles,
    pooled_json,
    summarize_latency,
    window_figures,
)
from hwregress.serving.requests import RequestLogError, RequestTiming


def _percentile(values: list[float], p: float) -> float:
    """The linear-interpolation percentile (NumPy's default method, vLLM's np.percentile), written out."""
    ordered = sorted(values)
    rank = p / 100 * (len(ordered) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@st.composite
def request_logs(draw) -> list[RequestTiming]:
    logs = []
    for index in range(draw(st.integers(1, 40))):
        sent = draw(st.floats(0.0, 100.0))
        gaps = draw(st.lists(st.floats(0.0, 5.0), min_size=0, max_size=12))
        times, now = [], sent
        for gap in gaps:
            now += gap
            times.append(now)
        failed = not times or (draw(st.booleans()) and draw(st.booleans()))  # about a quarter of the rest fail
        tokens = len(times) + draw(st.integers(0, 3))  # a chunk may carry several tokens
        logs.append(RequestTiming(index, sent, tuple(times), draw(st.integers(1, 500)), tokens,
                                  "HTTP 500" if failed else None))
    return logs


@settings(max_examples=150)
@given(request_logs(), st.floats(0.5, 500.0), st.floats(1.0, 5000.0), st.floats(1.0, 5000.0))
def test_the_figures_are_those_recomputed_from_the_raw_timestamps(logs, duration, ttft_bound, tpot_bound):
    figures = window_figures(logs, duration, Slo(ttft_ms=ttft_bound, tpot_ms=tpot_bound))
    done = [r for r in logs if r.error is None]
    ttft = [(r.chunk_times_s[0] - r.sent_s) * 1000 for r in done]
    e2el = [(r.chunk_times_s[-1] - r.sent_s) * 1000 for r in done]
    itl = [(b - a) * 1000 for r in done for a, b in itertools.pairwise(r.chunk_times_s)]
    tpot = [(e - t) / (r.output_tokens - 1) for r, t, e in zip(done, ttft, e2el, strict=True) if r.output_tokens > 1]
    per_token = [(e - t) / (r.output_tokens - 1) if r.output_tokens > 1 else 0.0  # vLLM: TPOT 0 for its goodput
                 for r, t, e in zip(done, ttft, e2el, strict=True)]
    assume(all(abs(t - ttft_bound) > 1e-6 and abs(x - tpot_bound) > 1e-6 for t, x in zip(ttft, per_token, strict=True)))
    good = sum(1 for t, x in zip(ttft, per_token, strict=True) if t <= ttft_bound and x <= tpot_bound)

    assert (figures.sent, figures.completed, figures.failed) == (len(logs), len(done), len(logs) - len(done))
    assert figures.error_rate == pytest.approx((len(logs) - len(done)) / len(logs))
    assert figures.request_throughput == pytest.approx(len(done) / duration)
    assert figures.output_throughput == pytest.approx(sum(r.output_tokens for r in done) / duration)
    assert figures.goodput == pytest.approx(good / duration)
    for summary, values in ((figures.ttft, ttft), (figures.e2el, e2el), (figures.itl, itl), (figures.tpot, tpot)):
        assert summary.count == len(values)
        if values:
            assert summary.mean == pytest.approx(sum(values) / len(values), rel=1e-9, abs=1e-9)
            for p in PERCENTILES:
                assert summary.percentiles[p] == pytest.approx(_percentile(values, p), rel=1e-9, abs=1e-9)
        else:
            assert summary.mean is None and summary.percentiles == {}


@settings(max_examples=100)
@given(request_logs())
def test_the_pooled_cdf_is_each_latencys_percentile_at_101_levels_recomputed_from_the_timestamps(logs):
    pooled = pooled_json(logs)
    done = [r for r in logs if r.error is None]
    ttft = [(r.chunk_times_s[0] - r.sent_s) * 1000 for r in done]
    e2el = [(r.chunk_times_s[-1] - r.sent_s) * 1000 for r in done]
    for name, values in (("ttft", ttft), ("e2el", e2el)):
        quantiles = pooled[name]["quantiles"]
        assert pooled[name]["count"] == len(values)
        if not values:
            assert quantiles == []
            continue
        assert len(quantiles) == CDF_LEVELS and quantiles == sorted(quantiles)
        assert quantiles[0] == pytest.approx(min(values)) and quantiles[-1] == pytest.approx(max(values))
        for level in (10, 50, 90, 99):
            assert quantiles[level] == pytest.approx(_percentile(values, level), rel=1e-9, abs=1e-9)
            if level in PERCENTILES:
                assert pooled[name][f"p{level}"] == pytest.approx(quantiles[level], rel=1e-9, abs=1e-9)


def test_quantiles_of_one_value_are_that_value_at_every_level():
    assert latency_quantiles([7.5]) == [7.5] * CDF_LEVELS and latency_quantiles([]) == []


def test_a_request_exactly_at_its_bound_meets_it_and_a_hair_over_does_not():
    at = RequestTiming(0, 0.0, (0.25, 0.5, 0.75), 8, 3)  # TTFT 250 ms, TPOT (750 - 250) / 2 = 250 ms
    over = RequestTiming(1, 0.0, (0.25, 0.5, 0.7505), 8, 3)
    assert Slo(ttft_ms=250.0, tpot_ms=250.0).met_by(at)
    assert not Slo(ttft_ms=250.0, tpot_ms=250.0).met_by(over)
    assert Slo(ttft_ms=250.0).met_by(over) and not Slo(e2el_ms=750.0).met_by(over)


def test_a_one_token_answer_has_no_tpot_and_meets_any_tpot_bound_as_in_vllm():
    single = RequestTiming(0, 1.0, (1.5,), 4, 1)
    assert single.tpot_s is None and single.itls_s == []
    figures = window_figures([single], 1.0, Slo(ttft_ms=600.0, tpot_ms=1.0))
    assert figures.tpot.count == 0 and figures.goodput == 1.0


def test_a_failed_request_counts_in_the_error_rate_and_as_missed_never_in_the_latencies():
    fine = RequestTiming(0, 0.0, (0.1, 0.2), 4, 2)
    timed_out = RequestTiming(1, 0.0, (), 4, 0, error="timed out after 30 s")
    broken = RequestTiming(2, 0.0, (0.05,), 4, 1, error="stream ended without [DONE]")
    figures = window_figures([fine, timed_out, broken], 2.0, Slo(ttft_ms=1e6, tpot_ms=1e6))
    assert (figures.completed, figures.failed, figures.error_rate) == (1, 2, pytest.approx(2 / 3))
    assert figures.goodput == 0.5 and figures.request_throughput == 0.5
    assert figures.ttft.count == 1 and figures.ttft.percentiles[99] == pytest.approx(100.0)


def test_a_p99_is_stated_from_459_requests_on_and_not_below():
    def summary(count: int):
        return summarize_latency([i / 1000 for i in range(1, count + 1)])

    assert summary(458).stated == (50, 90) and summary(458).bounds[99] is None
    assert summary(459).stated == (50, 90, 99) and summary(459).bounds[99] == pytest.approx(459.0)
    assert summary(43).stated == (50,) and summary(6).stated == ()


@pytest.mark.parametrize(("log", "fault"), [
    (lambda: RequestTiming(3, 1.0, (0.5,), 1, 1), "request 3: times (1.0, 0.5) go back"),
    (lambda: RequestTiming(3, 0.0, (math.nan,), 1, 1), "are not all finite"),
    (lambda: RequestTiming(3, 0.0, (), 1, 0), "completed without output"),
    (lambda: RequestTiming(3, 0.0, (0.1,), 1, -1), "token counts 1 in, -1 out"),
])
def test_timestamps_no_client_records_are_refused_naming_the_request(log, fault):
    with pytest.raises(RequestLogError, match=re.escape(fault)):
        log()


def test_a_window_without_requests_or_duration_and_a_bad_slo_are_refused():
    with pytest.raises(ValueError, match="without requests"):
        window_figures([], 1.0, Slo())
    with pytest.raises(ValueError, match=r"window duration 0\.0 s"):
        window_figures([RequestTiming(0, 0.0, (0.1,), 1, 1)], 0.0, Slo())
    with pytest.raises(ValueError, match="SLO tpot_ms -5"):
        Slo(tpot_ms=-5)


def test_capacity_is_where_goodput_stops_rising():
    rates = [1.0, 2.0, 4.0, 8.0, 16.0]
    assert capacity(rates, [1.0, 2.0, 3.9, 4.0, 2.5]) == 4.0  # within 5% of the top: a plateau's start
    assert capacity(rates, [1.0, 2.0, 3.0, 4.0, 2.5]) == 8.0
    assert capacity(rates, [1.0, 2.0, 3.0, 4.0, 2.5], tolerance=0.3) == 4.0
    with pytest.raises(ValueError, match="5 rates and 4 goodputs"):
        capacity(rates, [1.0, 2.0, 3.0, 4.0])

"""MLPerf's early-stopping rule (hwregress.judge.early_stopping): its published table, the estimate it gives, and a
seeded simulation of its coverage against the plain empirical percentile."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwregress.judge import early_stopping


@pytest.mark.parametrize(("percentile", "overs", "requests"), [
    (0.99, 0, 459), (0.99, 1, 662), (0.99, 2, 838), (0.90, 0, 44), (0.90, 1, 64), (0.90, 2, 81)])
def test_the_fewest_requests_are_mlperfs_published_table(percentile, overs, requests):
    assert early_stopping.min_requests(overs, percentile) == requests
    assert early_stopping.holds(requests, overs, percentile)
    assert not early_stopping.holds(requests - 1, overs, percentile)


@settings(max_examples=200)
@given(st.integers(0, 5000), st.sampled_from([0.5, 0.9, 0.95, 0.99, 0.999]))
def test_the_overs_stated_are_the_most_that_still_hold(requests, percentile):
    overs = early_stopping.stated_overs(requests, percentile)
    if overs is None:
        assert not early_stopping.holds(requests, 0, percentile)
        assert requests < early_stopping.min_requests(0, percentile)
    else:
        assert early_stopping.holds(requests, overs, percentile)
        assert overs == requests or not early_stopping.holds(requests, overs + 1, percentile)
        assert early_stopping.min_requests(overs, percentile) <= requests


def test_a_p99_of_too_few_requests_is_not_stated_and_of_enough_is_the_largest_with_none_over():
    values = [float(v) for v in range(1, 460)]  # 459 values
    assert early_stopping.percentile_bound(values[:-1], 0.99) is None
    assert early_stopping.percentile_bound(values, 0.99) == 459.0
    assert early_stopping.percentile_bound([*values, *range(460, 663)], 0.99) == 661.0  # 662: one over the bound


@settings(max_examples=100)
@given(st.lists(st.floats(0.0, 1e4, allow_nan=False), min_size=1, max_size=1500),
       st.sampled_from([0.5, 0.9, 0.99]))
def test_the_bound_is_a_value_of_the_run_at_or_above_its_empirical_percentile(values, percentile):
    bound = early_stopping.percentile_bound(values, percentile)
    if bound is not None:
        assert bound in values
        assert bound >= np.percentile(values, percentile * 100)


@pytest.mark.parametrize(("percentile", "confidence", "fault"), [
    (1.0, 0.99, "percentile 1.0"), (0.0, 0.99, "percentile 0.0"), (99, 0.99, "give 0.99 for a p99"),
    (0.99, 1.5, "confidence 1.5"), (math.nan, 0.99, "percentile nan")])
def test_a_percentile_or_confidence_that_is_not_a_fraction_is_refused_by_name(percentile, confidence, fault):
    with pytest.raises(ValueError, match=fault):
        early_stopping.min_requests(0, percentile, confidence)


def test_counts_that_cannot_be_are_refused():
    with pytest.raises(ValueError, match="3 requests over the bound of 2"):
        early_stopping.holds(2, 3, 0.99)
    with pytest.raises(ValueError, match="overs -1 is negative"):
        early_stopping.min_requests(-1, 0.99)


TRIALS = 2000


def test_the_bound_covers_the_true_p99_at_its_confidence_where_the_empirical_p99_does_not():
    # 2,000 seeded runs of 600 exponential latencies (true p99 = ln 100): the early-stopping bound must sit at or above
    # the true p99 in at least 99% of runs (Monte-Carlo standard error sqrt(0.99 x 0.01 / 2000) = 0.22%, so the 98.5%
    # floor is 2.3 errors below; this seed: 99.75%); the plain empirical p99 of the same runs does so in 38.8% of them,
    # which is why a p99 is not stated on its own
    rng = np.random.default_rng(20261130)
    true_p99 = math.log(100.0)
    covered = empirical = 0
    for _ in range(TRIALS):
        values = rng.exponential(1.0, size=600)
        covered += early_stopping.percentile_bound(values.tolist(), 0.99) >= true_p99
        empirical += np.percentile(values, 99) >= true_p99
    assert covered / TRIALS >= 0.985
    assert empirical / TRIALS < 0.6

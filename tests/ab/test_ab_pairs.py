"""The pairs of an A/B session (hwregress.ab.pairs): a pair with a failed window is dropped, complete pairs of the
surplus order go too, the latest first, so the kept pairs are balanced and never hold a failed side; each dropped
pair says why; the log-ratios are those of the kept pairs and a throughput that is not a finite number > 0 is named."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hwregress.ab.order import balanced_order
from hwregress.ab.pairs import Pair, kept_in_balance, log_ratios

THROUGHPUT = st.one_of(st.none(), st.floats(min_value=1.0, max_value=1e4))


@st.composite
def sessions(draw: st.DrawFn) -> list[Pair]:
    """A session's pairs in a balanced order (or any order: a worker may report pairs out of order), each side a
    throughput or a failure, given in shuffled index order."""
    count = draw(st.integers(min_value=0, max_value=40))
    orders = (balanced_order(count, draw(st.integers(min_value=0))) if draw(st.booleans())
              else draw(st.lists(st.sampled_from(["AB", "BA"]), min_size=count, max_size=count)))
    pairs = [Pair(index, order, draw(THROUGHPUT), draw(THROUGHPUT)) for index, order in enumerate(orders)]
    return draw(st.permutations(pairs))


@given(sessions())
def test_kept_pairs_are_balanced_complete_and_as_many_as_balance_allows(pairs):
    kept, dropped = kept_in_balance(pairs)
    assert all(pair.complete and pair.dropped is None for pair in kept)
    assert sum(pair.order == "AB" for pair in kept) == sum(pair.order == "BA" for pair in kept)
    complete = [pair for pair in pairs if pair.complete]
    assert len(kept) == 2 * min(sum(p.order == order for p in complete) for order in ("AB", "BA"))
    assert sorted(p.index for p in kept + dropped) == sorted(p.index for p in pairs)
    assert [p.index for p in kept] == sorted(p.index for p in kept)
    assert [p.index for p in dropped] == sorted(p.index for p in dropped)
    assert all(pair.dropped for pair in dropped)


@given(sessions())
def test_the_complete_pairs_dropped_for_balance_are_the_latest_of_their_order(pairs):
    kept, dropped = kept_in_balance(pairs)
    for gone in (pair for pair in dropped if pair.complete):
        assert all(pair.index < gone.index for pair in kept if pair.order == gone.order)


@given(sessions())
def test_log_ratios_are_those_of_the_kept_pairs_whichever_pairs_are_given(pairs):
    kept, _ = kept_in_balance(pairs)
    expected = [math.log(pair.b / pair.a) for pair in kept]
    assert log_ratios(pairs) == expected
    assert log_ratios(kept) == expected


def test_a_failed_window_drops_its_pair_with_its_error_and_one_pair_of_the_other_order():
    pairs = [Pair(0, "AB", 100.0, 90.0), Pair(1, "BA", 101.0, 91.0),
             Pair(2, "BA", 100.0, None, b_error="RuntimeError: CUDA error: an illegal memory access"),
             Pair(3, "AB", 99.0, 89.0)]
    kept, dropped = kept_in_balance(pairs)
    assert [pair.index for pair in kept] == [0, 1]
    assert [(pair.index, pair.dropped) for pair in dropped] == [
        (2, "pair 2 (BA): stack B's window failed: RuntimeError: CUDA error: an illegal memory access"),
        (3, "pair 3 (AB) dropped to keep the orders balanced: the complete pairs held 2 AB and 1 BA, and the latest "
            "1 AB pair(s) go")]
    assert log_ratios(pairs) == pytest.approx([math.log(0.9), math.log(91 / 101)])


def test_a_pair_failed_on_both_sides_names_both():
    kept, dropped = kept_in_balance([Pair(0, "AB", None, None, a_error="timeout", b_error=None)])
    assert kept == []
    assert dropped[0].dropped == "pair 0 (AB): stack A's window failed: timeout; stack B's window failed"


@pytest.mark.parametrize(("a", "b", "side", "shown"), [(0.0, 1.0, "A", "0.0"), (1.0, -2.0, "B", "-2.0"),
                                                        (math.nan, 1.0, "A", "nan"), (1.0, math.inf, "B", "inf")])
def test_a_throughput_that_is_not_a_finite_positive_number_is_named(a, b, side, shown):
    pairs = [Pair(0, "AB", 1.0, 1.0), Pair(7, "BA", a, b)]
    with pytest.raises(ValueError, match=rf"pair 7: stack {side}'s throughput {shown} is not a finite number > 0"):
        log_ratios(pairs)


def test_bad_pairs_are_refused():
    with pytest.raises(ValueError, match=r"pair 4: order 'AA' is neither 'AB' nor 'BA'"):
        Pair(4, "AA", 1.0, 1.0)
    with pytest.raises(ValueError, match=r"pair index 1 appears more than once"):
        kept_in_balance([Pair(1, "AB", 1.0, 1.0), Pair(1, "BA", 1.0, 1.0)])


def test_no_pairs_keep_nothing():
    assert kept_in_balance([]) == ([], [])
    assert log_ratios([]) == []

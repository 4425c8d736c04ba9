"""The balanced AB/BA order of an A/B session's pairs (hwregress.ab.order): every even prefix balanced, every prefix
within one, the same seed the same order, another seed another order, and a longer order extends a shorter one."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hwregress.ab.order import balanced_order

SEEDS = st.integers(min_value=0, max_value=2**63)


@given(pairs=st.integers(min_value=0, max_value=400), seed=SEEDS)
def test_every_prefix_is_balanced_within_one_and_every_even_prefix_exactly(pairs, seed):
    order = balanced_order(pairs, seed)
    assert len(order) == pairs and set(order) <= {"AB", "BA"}
    for end in range(pairs + 1):
        difference = order[:end].count("AB") - order[:end].count("BA")
        assert abs(difference) <= 1
        if end % 2 == 0:
            assert difference == 0, (end, order[:end])


@given(pairs=st.integers(min_value=0, max_value=200), more=st.integers(min_value=0, max_value=50), seed=SEEDS)
def test_the_same_seed_gives_the_same_order_and_a_longer_one_extends_it(pairs, more, seed):
    assert balanced_order(pairs, seed) == balanced_order(pairs, seed)
    assert balanced_order(pairs + more, seed)[:pairs] == balanced_order(pairs, seed)


@given(seed=SEEDS, other=SEEDS)
def test_different_seeds_give_different_orders_somewhere(seed, other):
    """64 blocks: two seeds agree on all of them with probability 2^-64 if the draws are independent."""
    if seed != other:
        assert balanced_order(128, seed) != balanced_order(128, other)


def test_the_order_depends_on_nothing_but_the_seed():
    """Drawing from the global ``random`` or numpy between two calls leaves the order as it was."""
    first = balanced_order(50, 7)
    random.seed(1)
    random.random()
    np.random.default_rng(1).random()
    assert balanced_order(50, 7) == first
    assert first[:2] in (["AB", "BA"], ["BA", "AB"])


def test_both_orders_come_first_in_a_block():
    """Which order opens a block is drawn: over 200 blocks both open some (a constant order would not cancel a
    drift that grows through the session any better than a plain alternation)."""
    firsts = balanced_order(400, 11)[0::2]
    assert 60 < firsts.count("AB") < 140


def test_a_negative_count_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"pairs -3: an A/B session runs 0 or more pairs"):
        balanced_order(-3, 0)
    assert balanced_order(0, 0) == []
    with pytest.raises(ValueError, match=r"seed -1: random.Random seeds with abs\(seed\), so -1 would give"):
        balanced_order(4, -1)
    assert len(balanced_order(1, 0)) == 1

"""The seeded request trace (hwregress.serving.trace): byte-identical from one seed, vLLM's arrival process, the
length profiles, its JSON read back, and bad settings or files refused by name."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwregress.serving.trace import (
    Arrivals,
    LengthProfile,
    TraceError,
    fixed_lengths,
    long_tail_lengths,
    make_trace,
    trace_from_json,
)

arrivals_strategy = st.one_of(
    st.builds(Arrivals, rate=st.floats(0.01, 1000.0), burstiness=st.floats(0.05, 20.0) | st.just(math.inf)),
    st.builds(Arrivals, concurrency=st.integers(1, 64)))
lengths_strategy = st.one_of(
    st.builds(fixed_lengths, st.integers(1, 4096), st.integers(1, 2048)),
    st.builds(long_tail_lengths, st.integers(1, 4096), st.integers(1, 2048), st.floats(0.0, 2.0), st.floats(1.0, 20.0)))


@settings(max_examples=100)
@given(st.integers(0, 2**32), st.integers(1, 300), arrivals_strategy, lengths_strategy)
def test_one_seed_gives_a_byte_identical_trace_that_reads_back_as_itself(seed, requests, arrivals, lengths):
    first, second = (make_trace(seed, requests, arrivals, lengths) for _ in range(2))
    assert first.to_json().encode() == second.to_json().encode() and first.digest == second.digest
    assert trace_from_json(first.to_json(), "a test") == first
    assert len(first.requests) == requests


@settings(max_examples=50)
@given(st.integers(0, 2**32), st.integers(2, 200), st.floats(0.1, 100.0), st.floats(0.1, 10.0))
def test_the_last_request_arrives_at_requests_over_rate_whatever_the_seed(seed, requests, rate, burstiness):
    trace = make_trace(seed, requests, Arrivals(rate=rate, burstiness=burstiness), fixed_lengths(8, 8))
    times = [r.arrival_s for r in trace.requests]
    assert times == sorted(times) and times[0] >= 0
    assert trace.span_s == pytest.approx(requests / rate, abs=1e-6)


def test_two_seeds_give_two_traces_and_changing_lengths_leaves_the_arrivals():
    poisson = Arrivals(rate=4.0)
    one, other = (make_trace(seed, 50, poisson, fixed_lengths(16, 16)) for seed in (1, 2))
    assert one.digest != other.digest
    tailed = make_trace(1, 50, poisson, long_tail_lengths(16, 16))
    assert [r.arrival_s for r in tailed.requests] == [r.arrival_s for r in one.requests]
    assert tailed.digest != one.digest


@pytest.mark.parametrize(("burstiness", "cv"), [(1.0, 1.0), (0.25, 2.0), (4.0, 0.5), (math.inf, 0.0)])
def test_the_gaps_have_mean_one_over_rate_and_the_burstiness_sets_their_spread(burstiness, cv):
    # gamma gaps with shape k have a coefficient of variation of 1/sqrt(k) (vLLM's burstiness); 20,000 gaps of one
    # seed: the mean and the CV within 5% (their sampling errors are under 1.5% at these counts)
    trace = make_trace(7, 20_000, Arrivals(rate=10.0, burstiness=burstiness), fixed_lengths(1, 1))
    gaps = np.diff([0.0, *(r.arrival_s for r in trace.requests)])
    assert gaps.mean() == pytest.approx(0.1, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.05, abs=1e-4)


def test_long_tailed_lengths_center_on_the_median_with_a_tail_and_a_cap():
    trace = make_trace(3, 20_000, Arrivals(concurrency=4), long_tail_lengths(100, 50, sigma=1.0, cap=8.0))
    prompts = np.array([r.prompt_tokens for r in trace.requests])
    outputs = np.array([r.output_tokens for r in trace.requests])
    assert np.median(prompts) == pytest.approx(100, rel=0.05) and np.median(outputs) == pytest.approx(50, rel=0.05)
    assert prompts.min() >= 1 and prompts.max() == 800 and outputs.max() == 400  # capped at 8x: e^(2.08 sigma) is p98
    assert np.percentile(prompts, 90) / np.median(prompts) == pytest.approx(math.exp(1.2816), rel=0.08)
    fixed = make_trace(3, 100, Arrivals(concurrency=4), fixed_lengths(100, 50))
    assert {(r.prompt_tokens, r.output_tokens) for r in fixed.requests} == {(100, 50)}


def test_a_closed_loop_has_no_arrival_times():
    trace = make_trace(0, 10, Arrivals(concurrency=3), fixed_lengths(4, 4))
    assert trace.arrivals.closed and trace.span_s is None
    assert {r.arrival_s for r in trace.requests} == {None}


def test_a_requests_prompt_ids_are_the_same_every_replay_and_within_the_vocabulary():
    request = make_trace(5, 3, Arrivals(rate=1.0), fixed_lengths(64, 4)).requests[1]
    ids = request.prompt_token_ids(vocab_size=1000, low=10)
    assert ids == request.prompt_token_ids(vocab_size=1000, low=10) and len(ids) == 64
    assert all(10 <= i < 1000 for i in ids)
    with pytest.raises(TraceError, match="token ids from 5 to 5"):
        request.prompt_token_ids(vocab_size=5, low=5)


@pytest.mark.parametrize(("build", "names"), [
    (lambda: Arrivals(), "rate=None, concurrency=None"),
    (lambda: Arrivals(rate=2.0, concurrency=2), "exactly one"),
    (lambda: Arrivals(rate=0.0), "request rate 0.0"),
    (lambda: Arrivals(rate=math.inf), "request rate inf"),
    (lambda: Arrivals(rate=1.0, burstiness=0.0), "burstiness 0.0"),
    (lambda: Arrivals(rate=1.0, burstiness=math.nan), "burstiness nan"),
    (lambda: Arrivals(concurrency=0), "concurrency 0"),
    (lambda: LengthProfile("mine", 0, 4), "length profile 'mine': prompt_tokens 0"),
    (lambda: LengthProfile("mine", 4, 2.5), "output_tokens 2.5"),
    (lambda: long_tail_lengths(4, 4, sigma=-1.0), "sigma -1.0"),
    (lambda: long_tail_lengths(4, 4, cap=0.5), "cap 0.5"),
    (lambda: make_trace(-1, 4, Arrivals(rate=1.0), fixed_lengths(4, 4)), "trace seed -1"),
    (lambda: make_trace(1, 0, Arrivals(rate=1.0), fixed_lengths(4, 4)), "trace of 0 requests"),
])
def test_settings_that_cannot_make_a_trace_are_refused_naming_the_value(build, names):
    with pytest.raises(TraceError, match=re.escape(names)):
        build()


def _stored(**changes) -> str:
    document = json.loads(make_trace(9, 4, Arrivals(rate=2.0), fixed_lengths(8, 8)).to_json())
    for path, value in changes.items():
        *keys, last = path.split("__")
        target = document
        for key in keys:
            target = target[int(key)] if key.isdigit() else target[key]
        target[int(last) if last.isdigit() else last] = value
    return json.dumps(document)


@pytest.mark.parametrize(("text", "fault"), [
    ("{not json", "not a request trace of schema 1"),
    (_stored(schema=2), "schema 2"),
    (_stored(requests=[]), "no requests"),
    (_stored(requests__0__1="8"), "prompt_tokens '8'"),
    (_stored(requests__1__0=None), "all null"),
    (_stored(requests__0__0=5.0), "go back in time"),
    (_stored(arrivals__rate=None), "rate=None, concurrency=None"),
    (_stored(lengths__extra=1), "unexpected keyword argument 'extra'"),
    (_stored(seed=True), "trace seed True"),
    (_stored(extra=1), "do not read back as written"),
])
def test_a_stored_trace_that_is_not_one_is_refused_naming_its_source(text, fault):
    with pytest.raises(TraceError, match=re.escape(fault)) as raised:
        trace_from_json(text, "records/x.json")
    assert str(raised.value).startswith("records/x.json: ")

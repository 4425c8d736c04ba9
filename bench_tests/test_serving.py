"""A served LLM under a seeded load (transformers serve by default, vllm serve with --serving-engine vllm): per
length profile an open loop per request rate and a closed loop per client count, each trace replayed once untimed and
then in windows judged at planned looks (each window's output speed per user, with the pooled latency percentiles the
requests state and goodput), and a rate sweep when asked for (its capacity). Opt-in: ``-m serving``.

The tests ship in the package (:mod:`hwregress.suite.test_serving`); this file re-exports them so that the
repository's ``pytest -m cpu`` collects them here, under readable ids."""

from hwregress.suite.test_serving import test_serving

__all__ = ["test_serving"]

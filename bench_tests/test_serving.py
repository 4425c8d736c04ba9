"""A served LLM under a seeded load (transformers serve by default, vllm serve with --serving-engine vllm): one
open-loop trace per request rate and length profile, replayed once untimed and then --serving-windows times; each
window's output speed per user judged, with the pooled p99 TTFT, TPOT p50/p99, E2EL p50 and goodput. Opt-in:
``-m serving``.

The tests ship in the package (:mod:`hwregress.suite.test_serving`); this file re-exports them so that the
repository's ``pytest -m cpu`` collects them here, under readable ids."""

from hwregress.suite.test_serving import test_serving

__all__ = ["test_serving"]

"""Training-step, inference, prefill and decode throughput of every selected model, device, batch size and
dtype, asserted against this hardware's baseline (throughput ratio and peak-memory ceiling).

The tests ship in the package (:mod:`hwregress.suite.test_throughput`); this file re-exports them so that the
repository's ``pytest -m cpu`` collects them here, under readable ids."""

from hwregress.suite.test_throughput import test_throughput

__all__ = ["test_throughput"]

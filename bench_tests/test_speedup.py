"""The seed studies' central question, answered in one run: GPU/CPU training throughput ratio,
asserted against the baseline speedup.

The tests ship in the package (:mod:`hwregress.suite.test_speedup`); this file re-exports them so that the
repository's ``pytest -m cpu`` collects them here, under readable ids."""

from hwregress.suite.test_speedup import test_gpu_speedup

__all__ = ["test_gpu_speedup"]

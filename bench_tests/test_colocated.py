"""Training processes sharing one device at once: each one's throughput beside the others against its solo
throughput in the same session (interference), their peak memory, and whether CUDA MPS was active.

The tests ship in the package (:mod:`hwregress.suite.test_colocated`); this file re-exports them so that the
repository's ``pytest -m cpu`` collects them here, under readable ids."""

from hwregress.suite.test_colocated import test_colocated

__all__ = ["test_colocated"]

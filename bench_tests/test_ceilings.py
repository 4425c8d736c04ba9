"""The device's roof: dense GEMM TFLOP/s per dtype, device memory copy GB/s and pinned host-to-device
GB/s, asserted against the baseline; they also feed the report's roofline.

The tests ship in the package (:mod:`hwregress.suite.test_ceilings`); this file re-exports them so that the
repository's ``pytest -m cpu`` collects them here, under readable ids."""

from hwregress.suite.test_ceilings import test_ceiling

__all__ = ["test_ceiling"]

"""Accuracy parity on real data (scikit-learn's handwritten digits) and output parity of every zoo model
against the CPU fp32 reference.

The tests ship in the package (:mod:`hwregress.suite.test_parity`); this file re-exports them so that the
repository's ``pytest -m cpu`` collects them here, under readable ids."""

from hwregress.suite.test_parity import test_digits_accuracy, test_output_parity

__all__ = ["test_digits_accuracy", "test_output_parity"]

"""Inference on Apache Spark (embedded local[cores] by default, local[1] for a GPU test, --spark-master for a
cluster): batch inference of real digit images over a cached DataFrame with ``predict_batch_udf`` against plain
torch in the same session, and a Structured Streaming pipeline from a watched folder with its latency and
exactly-once count. Opt-in: ``-m spark``.

The tests ship in the package (:mod:`hwregress.suite.test_spark`); this file re-exports them so that the
repository's ``pytest -m cpu`` collects them here, under readable ids."""

from hwregress.suite.test_spark import test_spark

__all__ = ["test_spark"]

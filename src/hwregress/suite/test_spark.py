"""Inference on Apache Spark (embedded local[cores] by default, local[1] for a GPU test, --spark-master for a
cluster): batch inference of real digit images over a cached DataFrame with ``predict_batch_udf`` against plain
torch in the same session, and a Structured Streaming pipeline from a watched folder with its latency and
exactly-once count. Opt-in: ``-m spark``."""

import pytest


@pytest.mark.spark
def test_spark(hwbench, device, workload, mode, batch_size, dtype):
    hwbench.measure("spark", device=device, workload=workload, mode=mode, batch_size=batch_size, dtype=dtype)

"""Training-step, inference, prefill and decode throughput of every selected model, device, batch size and
dtype, asserted against this hardware's baseline (throughput ratio and peak-memory ceiling)."""

import pytest


@pytest.mark.throughput
def test_throughput(hwbench, device, workload, mode, context, compiler, memory_format, batch_size, dtype):
    hwbench.throughput(device, workload, mode, batch_size, dtype, context, compiler, memory_format)

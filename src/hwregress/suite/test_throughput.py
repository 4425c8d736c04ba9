"""Training-step, inference, prefill and decode throughput of every selected model, device, batch size and
dtype, asserted against this hardware's baseline (throughput ratio and peak-memory ceiling)."""

import pytest


@pytest.mark.throughput
def test_throughput(hwbench, device, workload, mode, context, compiler, memory_format, batch_size, dtype):
    hwbench.measure("throughput", device=device, workload=workload, mode=mode, context=context, compiler=compiler,
                    memory_format=memory_format, batch_size=batch_size, dtype=dtype)

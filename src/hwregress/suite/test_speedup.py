"""The seed studies' central question, answered in one run: GPU/CPU training throughput ratio,
asserted against the baseline speedup."""

import pytest


@pytest.mark.speedup
def test_gpu_speedup(hwbench, device, workload, mode, batch_size, dtype):
    hwbench.measure("speedup", device=device, workload=workload, mode=mode, batch_size=batch_size, dtype=dtype)

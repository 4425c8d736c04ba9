"""The device's roof: dense GEMM TFLOP/s per dtype, device memory copy GB/s and pinned host-to-device
GB/s, asserted against the baseline; they also feed the report's roofline."""

import pytest


@pytest.mark.ceiling
def test_ceiling(hwbench, device, ceiling, dtype):
    hwbench.measure("ceiling", device=device, ceiling=ceiling, dtype=dtype)

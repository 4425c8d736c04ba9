"""Training processes sharing one device at once: each one's throughput beside the others against its solo
throughput in the same session (interference), their peak memory, and whether CUDA MPS was active."""

import pytest


@pytest.mark.colocated
def test_colocated(hwbench, device, members, mode, batch_size, dtype):
    hwbench.measure("colocated", device=device, members=members, mode=mode, batch_size=batch_size, dtype=dtype)

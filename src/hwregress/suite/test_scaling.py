"""Data-parallel training over world sizes (DistributedDataParallel; NCCL on GPUs, gloo on the CPU), launched with
torch.distributed's elastic launcher: global and per-device throughput, scaling efficiency against W=1 in the same
session, communication share, asserted against this hardware's baseline."""

import pytest


@pytest.mark.scaling
def test_scaling(hwbench, device, workload, mode, world_size, batch_size, dtype):
    hwbench.measure("scaling", device=device, workload=workload, mode=mode, world_size=world_size,
                    batch_size=batch_size, dtype=dtype)

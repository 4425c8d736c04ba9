"""GPU-only self-tests that can fail: every check of ``python -m hwregress check`` on each visible GPU (the event
timer against the host clock over a kernel of known length, the allocator's exact peak, the NVML handle's identity,
strict fp32 through backward, the quantization state, a cold compile, the published peaks and MFU, energy against
power x time, a contender diagnosed, test isolation). Skipped without CUDA; their CPU twins and the fakes that make
each fail are in test_check.py."""

from __future__ import annotations

import pytest
import torch

from hwregress.check.result import FAIL
from hwregress.check.runner import CHECKS

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]
GPUS = [f"cuda:{index}" for index in range(torch.cuda.device_count())] if torch.cuda.is_available() else ["cuda:0"]


@pytest.mark.parametrize("device", GPUS)
@pytest.mark.parametrize("name", list(CHECKS))
def test_the_check_holds_on_this_gpu(name, device):
    result = CHECKS[name](device)
    assert result.status != FAIL, (f"{result.compared}: {result.figures}; points to: {result.points_to}")

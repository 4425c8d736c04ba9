"""A served LLM under a seeded load (transformers serve by default, vllm serve with --serving-engine vllm): one
open-loop trace per request rate and length profile, replayed once untimed and then --serving-windows times; each
window's output speed per user judged, with the pooled p99 TTFT, TPOT p50/p99, E2EL p50 and goodput. Opt-in:
``-m serving``."""

import pytest


@pytest.mark.serving
def test_serving(hwbench, device, workload, mode, batch_size, dtype):
    hwbench.measure("serving", device=device, workload=workload, mode=mode, batch_size=batch_size, dtype=dtype)

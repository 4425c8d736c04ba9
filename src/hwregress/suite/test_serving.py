"""A served LLM under a seeded load (transformers serve by default, vllm serve with --serving-engine vllm): per
length profile an open loop per request rate and a closed loop per client count, each trace replayed once untimed and
then in windows judged at planned looks (each window's output speed per user, with the pooled TTFT, TPOT and E2EL
percentiles the requests state and goodput), and a rate sweep when asked for (its capacity). Opt-in:
``-m serving``."""

import pytest


@pytest.mark.serving
def test_serving(hwbench, device, workload, mode, batch_size, dtype):
    hwbench.measure("serving", device=device, workload=workload, mode=mode, batch_size=batch_size, dtype=dtype)

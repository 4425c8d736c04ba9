"""What a ``serving`` test costs, for the tier estimate (:mod:`hwregress.plugin.tier_estimate`): the server's start
once per process and model, then the untimed replay and the recording's windows (a judged test that stays undecided
runs up to twice as many: :mod:`hwregress.plugin.families.serving_windows`).

A window of an open loop lasts its trace, ``requests / rate`` seconds (the last arrival,
:mod:`hwregress.serving.trace`; at most :data:`SERVED_RPS` requests served a second), plus the last request's own
decode; a closed loop's, one request after another per client, ``ceil(requests / clients)`` requests of a prompt pass
and ``output`` decode steps each; a rate sweep, one open-loop window per rate (of ``SWEEP_POINT_S`` seconds' requests
where more) after an untimed one at the highest. A decode step of a loaded server takes :data:`TOKEN_S`.

Figures: the CPU's are measured on the 2-core development VM (``llama_small``, docs/serving.md, 'Cost and tiers'):
the server's start 5.0 s; TPOT p50 16.7 ms at 4 requests/s and 23.4 ms with 4 closed-loop clients, so 24 ms a step
under load. The GPU's are assumptions, not measurements (no serving test has run on a GPU yet): a minute to start
(CUDA, the weights, transformers serve's own warm-up) and 20 ms a decode step of a loaded small model.
"""

from __future__ import annotations

import math
from typing import Any

from hwregress.hardware.facts import device_kind
from hwregress.plugin.tier_costs import Cost, CostModel
from hwregress.serving.settings import SWEEP_EXAMPLE, ServingSettings

SERVER_START_S = {"cpu": 5.0, "cuda": 60.0, "mps": 10.0}
TOKEN_S = {"cpu": 0.024, "cuda": 0.020, "mps": 0.024}
# requests/s a loaded server completes at most: a sweep point above it lasts its requests at this rate. CPU: the VM's
# llama_small, 24.4 at 64 requests/s offered (32 requests); GPU: assumed
SERVED_RPS = {"cpu": 25.0, "cuda": 50.0, "mps": 25.0}


def open_window_s(requests: int, rate: float, output_tokens: int, kind: str) -> float:
    """An open loop's window: the trace's ``requests / rate`` s (at most :data:`SERVED_RPS` served a second) and the
    last request's decode."""
    return (requests / min(rate, SERVED_RPS.get(kind, SERVED_RPS["cpu"]))
            + output_tokens * TOKEN_S.get(kind, TOKEN_S["cpu"]))


def closed_window_s(requests: int, clients: int, output_tokens: int, kind: str) -> float:
    """A closed loop's window: ``ceil(requests / clients)`` requests per client, each a prompt pass and its decode."""
    return math.ceil(requests / clients) * (output_tokens + 1) * TOKEN_S.get(kind, TOKEN_S["cpu"])


def serving_cost(case: dict[str, Any], cost: CostModel, rate: float | None, clients: int | None,
                 sweep: tuple[float, ...] | None) -> Cost:
    """The seconds of the serving test ``case`` (a family case: ``device``, ``workload``, ``batch_size`` = requests a
    window) of an open loop at ``rate``, a closed loop of ``clients``, or a sweep over the ``sweep`` rates
    (requests/s; None: :data:`hwregress.serving.settings.SWEEP_EXAMPLE`'s), at the default windows and lengths."""
    device, requests, defaults = case["device"], case["batch_size"], ServingSettings()
    kind = device_kind(device)
    output = defaults.length_profile("fixed", device).output_tokens
    start = cost.once(("serving-server", device, case["workload"]), SERVER_START_S.get(kind, SERVER_START_S["cpu"]))
    fixed = start + cost.a.per_test_s
    if rate is not None or clients is not None:
        window = (open_window_s(requests, rate, output, kind) if rate is not None
                  else closed_window_s(requests, clients or 1, output, kind))
        return Cost(fixed + window, defaults.windows * window)
    rates = sweep or SWEEP_EXAMPLE
    return Cost(fixed + open_window_s(requests, max(rates), output, kind),
                sum(open_window_s(defaults.sweep_requests(r, device), r, output, kind) for r in rates))

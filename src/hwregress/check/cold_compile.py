"""A cold compile is cold: a model compiled twice in one process has zero cache hits both times.

The compile time hwregress records for ``--compile inductor`` is a cold compile (fresh cache folders, dynamo reset:
:func:`hwregress.measure.compilation.warm_up_compiled`), so a second compile of the same model in the same process
must not be served by the first one's FX graph or AOTAutograd caches: a hit would make the second test's compile time
a cache read and the baseline's compile figure meaningless.
"""

from __future__ import annotations

import torch
from torch import nn

from hwregress.check.result import CheckResult, judged, skipped
from hwregress.measure import compilation

NAME = "cold-compile"
COMPARED = "the FX graph and AOTAutograd cache counters of two compiles of one model in one process"
BACKEND = "inductor"


def check(device: str) -> CheckResult:
    """Run the cold-compile check on ``device`` (see the module doc); skipped where inductor cannot compile here."""
    reason = compilation.unsupported_reason(BACKEND, device)
    if reason is not None:
        return skipped(NAME, device, COMPARED, reason)
    compilation.prime_compiler(BACKEND, device)
    timings = [_compile_once(device) for _ in range(2)]
    hits = [sum(t.cache_counts.get(name, 0) for name in ("fxgraph_cache_hit", "autograd_cache_hit"))
            for t in timings]
    figures = {"compile_s": [round(t.compile_s, 2) for t in timings], "cache_state": [t.cache_state for t in timings],
               "cache_hits": hits, "cache_counts": [t.cache_counts for t in timings]}
    ok = all(t.cache_state == "cold" for t in timings) and hits == [0, 0]
    return judged(NAME, device, ok, COMPARED, figures,
                  "compile times are cache reads, not compiles: hwregress.measure.compile_cache.fresh_compile_caches "
                  "must give each compile empty caches (TORCHINDUCTOR_CACHE_DIR, in-memory caches cleared)")


def _compile_once(device: str) -> compilation.CompileTiming:
    torch.manual_seed(0)
    model = compilation.compile_model(nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 8)).to(device),
                                      BACKEND)
    inputs = torch.randn(16, 32, device=device)
    try:
        return compilation.warm_up_compiled(lambda: model(inputs), BACKEND, device, steps=1)
    finally:
        compilation.reset()

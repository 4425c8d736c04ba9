"""The compiler's caches: a fresh, empty inductor cache folder for a cold compile (:func:`fresh_compile_caches`) and
the FX graph and AOTAutograd cache counters that tell a cold compile from a warm one (:func:`cache_counts`). Split
from :mod:`hwregress.measure.compilation`, which times the compile."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

# where inductor keeps its on-disk caches (FX graphs, AOTAutograd entries, C++ and Triton kernels, autotuning
# results): torch/_inductor/runtime/cache_dir_utils.py, cache_dir() and triton_cache_dir()
INDUCTOR_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"
TRITON_CACHE_ENV = "TRITON_CACHE_DIR"
# (counter group, name) in torch._dynamo.utils.counters: torch/_inductor/codecache.py (FxGraphCache.load) and
# torch/_functorch/_aot_autograd/autograd_cache.py (AOTAutogradCache.load)
CACHE_COUNTERS = (("inductor", "fxgraph_cache_hit"), ("inductor", "fxgraph_cache_miss"),
                  ("aot_autograd", "autograd_cache_hit"), ("aot_autograd", "autograd_cache_miss"))
CACHE_HITS = ("fxgraph_cache_hit", "autograd_cache_hit")


@contextlib.contextmanager
def fresh_compile_caches() -> Iterator[Path]:
    """A fresh, empty inductor cache folder for the duration of the block (yielded): ``TORCHINDUCTOR_CACHE_DIR``
    set to it and ``TRITON_CACHE_DIR`` to its ``triton`` subfolder, inductor's in-memory caches cleared on entry
    and exit; both variables restored (or unset again) and the folder removed afterwards, also when the block
    raises. The same steps as ``torch._inductor.utils.fresh_cache`` (torch/_inductor/utils.py), which this
    follows rather than calls: older torch (2.4) names it ``fresh_inductor_cache``, and it keeps its folder on error.

    Compiled code already loaded stays usable after the folder is gone (modules are loaded into the process).
    Inductor reads the variables at each use (``cache_dir()``, torch/_inductor/runtime/cache_dir_utils.py) and
    hands them to its compile workers with each task (torch/_inductor/async_compile.py, ``extra_env``).
    """
    folder = tempfile.mkdtemp(prefix="hwregress-compile-")
    saved = {name: os.environ.get(name) for name in (INDUCTOR_CACHE_ENV, TRITON_CACHE_ENV)}
    os.environ[INDUCTOR_CACHE_ENV] = folder
    os.environ[TRITON_CACHE_ENV] = os.path.join(folder, "triton")
    try:
        _clear_inductor_memory_caches()
        yield Path(folder)
    finally:
        _clear_inductor_memory_caches()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        shutil.rmtree(folder, ignore_errors=True)


def _clear_inductor_memory_caches() -> None:
    """Clear inductor's in-process caches (loaded code, compiled-kernel tables) so that nothing compiled into
    another cache folder serves the next compile: ``torch._inductor.utils.clear_caches`` (torch 2.13), named
    ``clear_inductor_caches`` in older releases (2.4; newer ones keep it as an alias). No-op where inductor cannot
    be imported."""
    try:
        from torch._inductor import utils as inductor_utils
    except Exception:  # no inductor (or a broken one): nothing cached in memory either
        return
    clear = getattr(inductor_utils, "clear_caches", None) or getattr(inductor_utils, "clear_inductor_caches", None)
    if clear is not None:
        clear()


def cache_counts() -> dict[str, int]:
    """The FX graph and AOTAutograd cache counters (:data:`CACHE_COUNTERS`) so far, by name; {} when unreadable."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return {}
    try:
        return {name: int(counters[group][name]) for group, name in CACHE_COUNTERS}
    except (KeyError, TypeError, ValueError):
        return {}

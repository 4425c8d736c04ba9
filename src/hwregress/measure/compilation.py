"""The compilation axis: run a model eager or through ``torch.compile``, and time the compilation apart.

Backends (``BACKENDS``): ``eager`` (the model as built), ``inductor`` (``torch.compile(model)``),
``inductor-max-autotune`` (``torch.compile(model, mode="max-autotune")``) and ``cudagraphs``
(``torch.compile(model, backend="cudagraphs")``, CUDA only).

What *compile time* means here: ``torch.compile`` is lazy, so nothing is compiled until the first call.
``compile_s`` is the wall time, device-synchronized, of that first call, which includes dynamo's
bytecode tracing, the backend's compilation (for inductor: code generation, the C++ or Triton
compiler, autotuning under max-autotune) and one execution of the step; any later warmup call during
which dynamo compiled a frame again (a recompile) is added to it. It therefore overstates the pure
compilation cost by about one step time, which is negligible next to seconds of compiling.
This is our own definition. PyTorch's dynamo benchmark harness, which runs the TorchBench models
(pytorch/pytorch ``benchmarks/dynamo/common.py``, ``run_performance_test``), reports
``compilation_latency`` differently: the host wall time of 5 warmup iterations of the compiled model
minus that of 5 eager iterations, without a device synchronization.

``warm_up_compiled`` runs these untimed warmup calls; the timed window (``hwregress.measure.timing``, driven
from ``hwregress.measure.window``) starts only after it, so compilation never leaks into the throughput.
Under ``cudagraphs`` the graph is recorded on a later call than the first (cudagraph trees warm up,
then record, then replay), so that recording is not part of ``compile_s``; the timed window's own
warmup steps absorb it.

Cold and warm compiles. A compile that finds its work in a cache is a different measurement: seconds into an
empty cache, a tenth of a second on FX graph and AOTAutograd cache hits (docs/measured.md, 'Compilation'). So by
default
(``cache="cold"``) :func:`warm_up_compiled` forgets dynamo's compiled frames (``torch._dynamo.reset()``)
and compiles into a fresh, empty inductor cache folder (``TORCHINDUCTOR_CACHE_DIR``, with Triton's
``TRITON_CACHE_DIR`` inside it), restores both variables afterwards and removes the folder: what torch's
own benchmark harness does for ``--cold-start-latency`` (pytorch/pytorch ``benchmarks/dynamo/common.py``
with ``torch._inductor.utils.fresh_cache``). The cache hits and misses torch counted during the compile
(``torch._dynamo.utils.counters``) are kept with the timing, and a hit (a remote cache, say) makes the
compile ``warm`` whatever the folder. ``cache="warm"`` compiles with the caches as they are and is
always called ``warm``. A ``compile_s`` is only ever compared with one of the same cache state
(:func:`hwregress.judge.compile_time.compare_compile`).

A cold cache is not a cold process: the first compile in a process also pays the compiler's one-time set-up
in it (whatever torch initializes on its first compile: about ten times a later cold compile's,
docs/measured.md, 'Compilation'). That cost belongs to no model and would land on whichever
compiled test a session happens to run first, so :func:`prime_compiler` pays it once per backend and
device, untimed, before the first measured compile (its seconds are kept as ``setup_s``).

A failure of a compiled backend during warmup becomes :class:`CompileFailed` carrying the first lines
of the error, so the session can record a ``failed`` result and go on; out-of-memory errors are
re-raised unchanged so the suite's usual out-of-memory handling applies.
"""

from __future__ import annotations

import contextlib
import importlib
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from hwregress.hardware.devices import synchronize
from hwregress.hardware.facts import device_kind
from hwregress.measure.compile_cache import CACHE_HITS, cache_counts, fresh_compile_caches
from hwregress.measure.out_of_memory import is_out_of_memory

BACKENDS = ("eager", "inductor", "inductor-max-autotune", "cudagraphs")
CACHE_STATES = ("cold", "warm")
MAX_ERROR_LINES = 5
MAX_ERROR_LINE_CHARS = 500  # one generated-code line in a compiler error can run to many kilobytes
CXX_COMPILERS = ("g++", "c++", "clang++")
_MAX_UNWRAP_DEPTH = 8


class CompileFailed(Exception):
    """``torch.compile`` (or the first compiled calls) failed.

    ``str()`` is ``"compile with <backend> failed: <ExcType>: <first lines>"``, at most
    ``MAX_ERROR_LINES`` lines in all. Dynamo's wrappers (``BackendCompilerFailed``, ``InductorError``)
    are unwrapped: ``error_type`` and ``first_lines`` describe the exception they carry.

    Attributes:
        backend: one of ``BACKENDS``.
        error_type: class name of the underlying exception, e.g. ``"RuntimeError"``.
        first_lines: the first non-empty lines of its message (each at most ``MAX_ERROR_LINE_CHARS``).
    """

    def __init__(self, backend: str, error_type: str, first_lines: tuple[str, ...]) -> None:
        self.backend = backend
        self.error_type = error_type
        self.first_lines = first_lines
        head = f"compile with {backend} failed: {error_type}"
        if first_lines:
            head = f"{head}: {first_lines[0]}"
        super().__init__("\n".join((head, *first_lines[1:])))

    @classmethod
    def from_error(cls, backend: str, error: BaseException) -> CompileFailed:
        """Describe ``error`` (unwrapped from dynamo's wrappers) as a failure of ``backend``."""
        cause = underlying_error(error)
        return cls(backend, type(cause).__name__, first_error_lines(str(cause)))


def first_error_lines(message: str, limit: int = MAX_ERROR_LINES) -> tuple[str, ...]:
    """The first ``limit`` non-empty lines of ``message``, right-stripped, each cut to ``MAX_ERROR_LINE_CHARS``."""
    lines = (line.rstrip() for line in message.splitlines())
    kept = [_shorten(line) for line in lines if line.strip()]
    return tuple(kept[:limit])


def _shorten(line: str) -> str:
    return line if len(line) <= MAX_ERROR_LINE_CHARS else line[: MAX_ERROR_LINE_CHARS - 1] + "…"


def underlying_error(error: BaseException) -> BaseException:
    """The exception dynamo wrapped: follows ``inner_exception`` (``BackendCompilerFailed``,
    ``InductorError``) down to the first exception that wraps nothing; ``error`` itself otherwise."""
    for _ in range(_MAX_UNWRAP_DEPTH):
        inner = getattr(error, "inner_exception", None)
        if not isinstance(inner, BaseException):
            break
        error = inner
    return error


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"unknown compile backend {backend!r}; valid backends: {', '.join(BACKENDS)}")


def unsupported_reason(backend: str, device: str) -> str | None:
    """Why ``backend`` cannot run on ``device`` (a spec like ``"cuda:0"``) here, or None if it can.

    ``eager`` always can. The compiled backends need ``torch.compile`` (torch >= 2.0); ``cudagraphs``
    needs a visible CUDA device; inductor (either mode) needs ``triton`` importable on CUDA and a C++
    compiler on the PATH (one of ``CXX_COMPILERS``) on the CPU. Other device kinds are not screened:
    a failure there surfaces as :class:`CompileFailed` at the first call.

    Raises:
        ValueError: ``backend`` is not one of ``BACKENDS``.
    """
    _check_backend(backend)
    if backend == "eager":
        return None
    if not hasattr(torch, "compile"):
        return f"{backend}: torch {torch.__version__} has no torch.compile (needs torch >= 2.0)"
    kind = device_kind(device)
    if backend == "cudagraphs":
        if kind != "cuda" or not torch.cuda.is_available():
            return f"cudagraphs needs a CUDA device (asked for {device})"
        return None
    if kind == "cuda" and not _triton_importable():
        return f"{backend} on {device} needs triton, which is not importable here"
    if kind == "cpu" and not any(shutil.which(name) for name in CXX_COMPILERS):
        return f"{backend} on cpu needs a C++ compiler on the PATH (one of {', '.join(CXX_COMPILERS)})"
    return None


def _triton_importable() -> bool:
    try:
        importlib.import_module("triton")
    except Exception:  # a broken install raises more than ImportError
        return False
    return True


def compile_model(model: nn.Module, backend: str) -> nn.Module:
    """``model`` prepared for ``backend``: ``eager`` returns ``model`` itself; the others return
    ``torch.compile(model, ...)`` (an ``OptimizedModule`` sharing ``model``'s parameters). Nothing is
    compiled until the first call.

    Raises:
        ValueError: ``backend`` is not one of ``BACKENDS``.
        RuntimeError: a compiled backend was asked for but this torch has no ``torch.compile``.
    """
    _check_backend(backend)
    if backend == "eager":
        return model
    if not hasattr(torch, "compile"):
        raise RuntimeError(f"{backend}: torch {torch.__version__} has no torch.compile (needs torch >= 2.0)")
    if backend == "inductor":
        return torch.compile(model)
    if backend == "inductor-max-autotune":
        return torch.compile(model, mode="max-autotune")
    return torch.compile(model, backend="cudagraphs")


@dataclass
class CompileTiming:
    """What the warmup of one backend cost.

    Attributes:
        backend: one of ``BACKENDS``.
        compile_s: wall seconds, device-synchronized, of the first call plus any later warmup call in which
            dynamo compiled a frame (a recompile); equals ``first_step_s`` for eager.
        first_step_s: wall seconds of the first call alone (tracing + compiling + one step for a compiled model).
        recompiles: frames dynamo compiled during the warmup (``torch._dynamo.utils.counters["frames"]["ok"]``
            difference): 1 for a model compiled whole once, more with graph breaks or recompilations,
            0 for eager; None where the counters cannot be read.
        cache_state: ``"cold"`` (fresh caches, no cache hit counted) or ``"warm"`` (the caches as they were, or a
            hit counted); None for eager. See the module docstring.
        cache_counts: FX graph and AOTAutograd cache hits and misses during the warmup, by counter name
            (:data:`hwregress.measure.compile_cache.CACHE_COUNTERS`; 0 for what this torch does not count); empty for
            eager or unreadable counters.
        setup_s: wall seconds of the untimed :func:`prime_compiler` compile that preceded this one, when it paid
            the process's one-time compiler set-up; None when an earlier test had paid it.
    """

    backend: str
    compile_s: float
    first_step_s: float
    recompiles: int | None
    cache_state: str | None = None
    cache_counts: dict[str, int] = field(default_factory=dict)
    setup_s: float | None = None


def warm_up_compiled(step: Callable[[], None], backend: str, device: str, steps: int = 2,
                     clock: Callable[[], float] = time.perf_counter, cache: str = "cold") -> CompileTiming:
    """Run ``step`` ``steps`` times outside the timed window and time the compiling calls.

    Each call is bracketed by ``hwregress.hardware.devices.synchronize(device)`` and ``clock()`` (seconds), so
    asynchronous device work counts where it was launched. See the module docstring for what
    ``compile_s`` includes. Under a compiled backend with ``cache="cold"`` the calls run after
    :func:`reset` inside :func:`hwregress.measure.compile_cache.fresh_compile_caches`; ``"warm"`` runs them with the
    caches as they are.

    Raises:
        ValueError: unknown ``backend``, ``cache`` not one of ``CACHE_STATES``, or ``steps`` < 1.
        CompileFailed: a compiled backend's call raised anything but an out-of-memory error.
        Exception: under ``eager``, whatever ``step`` raised, unchanged; under any backend, an
            out-of-memory error (:func:`hwregress.measure.out_of_memory.is_out_of_memory`), unchanged or, if
            dynamo wrapped it, the wrapped error itself.
    """
    _check_backend(backend)
    if cache not in CACHE_STATES:
        raise ValueError(f"compile cache {cache!r}: use one of {', '.join(CACHE_STATES)}")
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    cold = cache == "cold" and backend != "eager"
    if cold:
        reset()  # no compiled frame of an earlier test may serve this one
    frames_before = _frames_compiled()
    counts_before = cache_counts()
    try:
        with fresh_compile_caches() if cold else contextlib.nullcontext():
            first_step_s, compile_s = _timed_warmup(step, device, clock, steps)
    except Exception as error:
        replacement = _warmup_failure(error, backend)
        if replacement is error:
            raise
        if isinstance(replacement, CompileFailed):
            raise replacement from error
        raise replacement from None  # the OOM dynamo wrapped; the wrapper adds only dynamo's debugging hint
    frames_after = _frames_compiled()
    recompiles = None if frames_before is None or frames_after is None else frames_after - frames_before
    if backend == "eager":
        return CompileTiming(backend, compile_s, first_step_s, recompiles)
    counts = {name: after - counts_before.get(name, 0) for name, after in cache_counts().items()}
    state = "cold" if cold and not any(counts.get(name, 0) for name in CACHE_HITS) else "warm"
    return CompileTiming(backend, compile_s, first_step_s, recompiles, state, counts)


# (backend, device) pairs whose one-time compiler set-up this process has paid: process state, like the compiler
# state it stands for (a pytest stash would not outlive what it describes, nor cover the library API)
_PRIMED: set[tuple[str, str]] = set()


def prime_compiler(backend: str, device: str, clock: Callable[[], float] = time.perf_counter) -> float | None:
    """Pay the process's one-time compiler set-up for ``backend`` on ``device`` (a spec like ``"cuda:0"``) outside
    any measurement: compile and run a tiny Linear+ReLU with ``backend`` in a fresh cache
    (:func:`hwregress.measure.compile_cache.fresh_compile_caches`), then forget it (:func:`reset`). Once per (backend,
    device) and process.

    Returns:
        The wall seconds it took, device-synchronized (``clock()``, seconds); None when nothing was done
        (``eager``, or already primed). A priming compile that fails returns its seconds too and is not
        retried: the model's own compile then reports the failure as :class:`CompileFailed`.

    Raises:
        ValueError: ``backend`` is not one of ``BACKENDS``.
    """
    _check_backend(backend)
    if backend == "eager" or (backend, device) in _PRIMED:
        return None
    _PRIMED.add((backend, device))
    start = clock()
    try:
        probe = compile_model(nn.Sequential(nn.Linear(8, 8), nn.ReLU()).to(device), backend)
        inputs = torch.randn(4, 8, device=device)
        with fresh_compile_caches():
            for _ in range(3 if backend == "cudagraphs" else 1):  # cudagraph trees record on a later call
                probe(inputs)
            synchronize(device)
    except Exception:  # the measured compile that follows raises the same failure and reports it
        pass
    finally:
        reset()
    return clock() - start


def _timed_warmup(step: Callable[[], None], device: str, clock: Callable[[], float], steps: int) -> tuple[float, float]:
    """(first_step_s, compile_s) of ``steps`` calls: see :class:`CompileTiming`."""
    first_step_s = _timed_call(step, device, clock)
    compile_s = first_step_s
    for _ in range(steps - 1):
        frames_at_start = _frames_compiled()
        elapsed = _timed_call(step, device, clock)
        frames_at_end = _frames_compiled()
        if frames_at_start is not None and frames_at_end is not None and frames_at_end > frames_at_start:
            compile_s += elapsed
    return first_step_s, compile_s


def _timed_call(step: Callable[[], None], device: str, clock: Callable[[], float]) -> float:
    synchronize(device)
    start = clock()
    step()
    synchronize(device)
    return clock() - start


def _warmup_failure(error: Exception, backend: str) -> BaseException:
    """The exception to raise for ``error``: itself for eager, the out-of-memory error for OOMs,
    else a :class:`CompileFailed`."""
    if backend == "eager":
        return error
    cause = underlying_error(error)
    if is_out_of_memory(cause):
        return cause
    if is_out_of_memory(error):
        return error
    return CompileFailed.from_error(backend, error)


def _frames_compiled() -> int | None:
    """Frames dynamo has compiled in this process so far, or None if its counters are unreadable."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return None
    try:
        return int(counters["frames"]["ok"])
    except (KeyError, TypeError, ValueError):
        return None


def reset() -> None:
    """Forget every compiled graph (``torch._dynamo.reset()``), so the next call of a compiled model
    compiles afresh and each benchmark's compile time is its own. No-op on torch without dynamo.
    Dynamo's counters are not cleared (``CompileTiming.recompiles`` is a difference)."""
    try:
        import torch._dynamo
    except ImportError:
        return
    torch._dynamo.reset()

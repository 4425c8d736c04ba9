"""Peak memory of one test: the CUDA caching allocator's peak, or the CPU process's peak RSS growth."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from types import TracebackType
from typing import Any

import psutil
import torch

from hwregress.hardware.facts import device_kind


class PeakMemoryMeter:
    """Context manager measuring peak memory in bytes while it is open.

    CUDA: ``torch.cuda.reset_peak_memory_stats`` on entry, then ``max_memory_allocated`` on exit minus
    ``memory_allocated`` at entry: the peak of the tensors allocated while the meter was open (the
    allocator's cache, the CUDA context and tensors an earlier test still holds are not counted), so the
    figure is exact and repeatable. CPU and MPS: the growth of the process's peak resident set size over its
    RSS at entry. On Linux the kernel keeps that peak itself (``VmHWM`` in ``/proc/self/status``, reset to the
    current RSS by writing ``5`` to ``/proc/self/clear_refs``: proc(5)), so nothing runs beside the timed
    window; elsewhere RSS is sampled every ``interval_s`` on a background thread (a sampling thread beside a
    millisecond step perturbs the very throughput being measured: docs/measured.md, 'Memory'). Freed memory is
    handed back to the OS first (:func:`release_host_memory`) so an earlier test's cached pages do not hide this test's
    footprint; the figure is approximate (allocator granularity; the sampling interval off Linux).

    The peak is the steady state's once :meth:`settle` is called after the warmup (as :meth:`steady` does when
    the timed window opens): what is still held then (weights, inputs, optimizer state, kernel-library caches)
    plus the highest transient of the steps after it. One-time transients of the first steps are left out:
    cuDNN's algorithm search under ``cudnn.benchmark`` allocates its candidates' workspaces on the first call
    per input shape, so a test that is the first of its process to see a shape would read gigabytes more than
    the same test after another one (docs/measured.md, 'Measured on an H100').

    Attribute ``peak_bytes`` holds the result after exit (None before).
    """

    def __init__(self, device: str, interval_s: float = 0.005) -> None:
        self.device = device
        self.interval_s = interval_s
        self.peak_bytes: int | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()  # settle() and the sampling thread both write the peak
        self._thread: threading.Thread | None = None
        self._process = psutil.Process()
        self._start_rss = 0
        self._peak_rss = 0
        self._start_allocated = 0

    def __enter__(self) -> PeakMemoryMeter:
        if device_kind(self.device) == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._start_allocated = int(torch.cuda.memory_allocated(self.device))
            return self
        release_host_memory()
        self._start_rss = self._peak_rss = self._process.memory_info().rss
        if not _reset_kernel_peak():
            self._thread = threading.Thread(target=self._sample_rss, name="hwregress-rss", daemon=True)
            self._thread.start()
        return self

    def settle(self) -> None:
        """Forget the peaks of what ran so far, keeping what is still held: from here the peak is the memory in
        use now plus the highest transient after. Call it after the warmup steps. It only resets the peak marks
        (nothing is collected or handed back to the OS here, which would fault pages back in during the first
        timed round)."""
        if device_kind(self.device) == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            return
        if self._thread is None and _reset_kernel_peak():
            return
        with self._lock:
            self._peak_rss = self._process.memory_info().rss

    @contextlib.contextmanager
    def steady(self, window: contextlib.AbstractContextManager[Any] | None = None) -> Iterator[None]:
        """The timed window of :func:`hwregress.measure.timing.measure`: :meth:`settle` as it opens, then ``window``
        (a telemetry sampler, say) around the timed rounds."""
        self.settle()
        with window if window is not None else contextlib.nullcontext():
            yield

    def _sample_rss(self) -> None:
        while not self._stop.wait(self.interval_s):
            rss = self._process.memory_info().rss
            with self._lock:
                self._peak_rss = max(self._peak_rss, rss)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if device_kind(self.device) == "cuda":
            self.peak_bytes = int(torch.cuda.max_memory_allocated(self.device)) - self._start_allocated
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        else:
            self._peak_rss = max(self._peak_rss, _kernel_peak_rss() or 0)
        self._peak_rss = max(self._peak_rss, self._process.memory_info().rss)
        self.peak_bytes = int(self._peak_rss - self._start_rss)


def _reset_kernel_peak() -> bool:
    """Reset the kernel's peak-RSS mark of this process to its current RSS; False where unsupported."""
    try:
        with open("/proc/self/clear_refs", "w") as control:
            control.write("5")
    except OSError:
        return False
    return _kernel_peak_rss() is not None


def _kernel_peak_rss() -> int | None:
    """``VmHWM`` of ``/proc/self/status`` in bytes, None where unreadable."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def freeze_imported_objects() -> None:
    """Collect what is garbage now, then move every object still alive (the imports: ~340,000 with torch, SciPy and
    torchvision) out of the garbage collector's sight (``gc.freeze``, CPython 3.7+; what pre-fork servers do), so
    that each ``gc.collect()`` before a window (:func:`release_host_memory`, :func:`release_device_memory`) and each
    automatic full collection inside one traverses only what the tests create: 0.29 s a collection to 0.1 ms on the
    2-core VM, three collections a test. Call once a process has imported what its windows need, before the first;
    frozen objects are never collected as cyclic garbage (module-level state, which lives as long as the process)."""
    import gc

    gc.collect()
    gc.freeze()


def release_host_memory() -> None:
    """Collect garbage and return the C allocator's free pages to the OS (glibc ``malloc_trim``), so
    that the next RSS reading counts memory in use, not memory an earlier test freed. No-op off glibc."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def release_device_memory(device: str) -> None:
    """Return cached blocks to the driver after a test (after an out-of-memory above all)."""
    import gc

    gc.collect()
    if device_kind(device) == "cuda":
        torch.cuda.empty_cache()

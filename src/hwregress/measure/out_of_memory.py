"""Out of memory, recognized and turned into one exception: an allocation failure of any device (torch's
``OutOfMemoryError``, ``MemoryError``, cuBLAS/cuDNN allocation failures that surface as plain RuntimeErrors) becomes
:class:`OutOfMemory` once the device's memory has been released, so a test can skip it as ``oom`` and the next test
starts clean."""

from __future__ import annotations

import gc
import re
from collections.abc import Callable
from typing import TypeVar

import torch

from hwregress.measure.memory import release_device_memory

T = TypeVar("T")


class OutOfMemory(Exception):
    """The batch did not fit; the message reads "out of memory at batch 512 on cuda:0"."""


# Messages of allocation failures inside cuBLAS and cuDNN: the caching allocator had no room for a
# handle or workspace, or cuDNN's algorithm search found no algorithm whose workspace fits (torch raises
# "Unable to find a valid cuDNN algorithm to run convolution" then). They are out-of-memory conditions
# that surface as plain RuntimeErrors.
LIBRARY_OOM_MARKERS = ("cublas_status_alloc_failed", "cudnn_status_alloc_failed",
                       "unable to find a valid cudnn algorithm")


def is_out_of_memory(error: BaseException) -> bool:
    """True for CUDA/MPS/CPU allocation failures: ``torch.OutOfMemoryError`` (and its older spellings),
    ``MemoryError``, RuntimeErrors that say "out of memory" or "can't allocate memory", and cuBLAS/cuDNN
    allocation failures (see ``LIBRARY_OOM_MARKERS``)."""
    oom_type = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", ())
    if isinstance(error, MemoryError) or (oom_type and isinstance(error, oom_type)):
        return True
    return isinstance(error, RuntimeError) and _says_out_of_memory(str(error))


def _says_out_of_memory(message: str) -> bool:
    text = message.lower()
    return "out of memory" in text or "can't allocate memory" in text or any(m in text for m in LIBRARY_OOM_MARKERS)


# The exception line a Python traceback ends with, at the start of a line: "torch.OutOfMemoryError: CUDA out of
# memory. ..." (traceback prints the class as module.qualname: torch.OutOfMemoryError from torch 2.5, before it
# torch.cuda.OutOfMemoryError). A JVM's "java.lang.OutOfMemoryError: Java heap space" is Spark's own heap, not the
# device: its name is not one of these.
_TRACEBACK_EXCEPTION = re.compile(r"^(?P<name>[A-Za-z_][\w.]*)(?::[ \t]*(?P<message>.*))?$", re.MULTILINE)
OOM_EXCEPTION_NAMES = frozenset({"torch.OutOfMemoryError", "torch.cuda.OutOfMemoryError", "MemoryError"})


def out_of_memory_in_traceback(text: str) -> str | None:
    """The out-of-memory exception line of a Python traceback carried as text, or None. A Spark Python worker's
    exception reaches the driver only so (``PythonException``, ``Py4JJavaError`` and ``StreamingQueryException``
    messages hold the worker's traceback): the same allocation failures as :func:`is_out_of_memory`, by name
    (``OOM_EXCEPTION_NAMES``) or as a ``RuntimeError`` whose message says so (MPS, cuBLAS/cuDNN)."""
    for match in _TRACEBACK_EXCEPTION.finditer(text):
        name, message = match["name"], match["message"] or ""
        if name in OOM_EXCEPTION_NAMES or (name == "RuntimeError" and _says_out_of_memory(message)):
            return match.group(0).strip()
    return None


def out_of_memory_released(measure: Callable[[], T], device: str, batch_size: int) -> T:
    """``measure()``; an allocation failure (:func:`is_out_of_memory`) becomes :class:`OutOfMemory` ("out of memory
    at batch 512 on cuda:0") after the device's memory is released.

    Raises:
        OutOfMemory: ``measure`` ran out of memory; device memory has been released.
    """
    failed_oom = False
    try:
        return measure()
    except Exception as error:
        if not is_out_of_memory(error):
            raise
        failed_oom = True  # leave the except block first: its traceback pins the tensors
    finally:
        gc.collect()
    if failed_oom:
        release_device_memory(device)
        raise OutOfMemory(f"out of memory at batch {batch_size} on {device}")
    raise AssertionError("unreachable")


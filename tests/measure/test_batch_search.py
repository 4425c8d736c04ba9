"""The ``--batch-sizes max`` search: doubling until out of memory, memory released between tries."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable

import pytest
import torch

from hwregress.measure.batch_search import MaxBatch, OutOfMemoryAtStart, find_max_batch
from hwregress.measure.out_of_memory import OutOfMemory

TORCH_OOM = getattr(torch, "OutOfMemoryError", RuntimeError)
MIB = 2**20


class Releases:
    """A fake ``release``: records the device of every call."""

    def __init__(self) -> None:
        self.devices: list[str] = []

    def __call__(self, device: str) -> None:
        self.devices.append(device)


def failing_from(threshold: int, make_error: Callable[[], Exception] = lambda: TORCH_OOM("CUDA out of memory"),
                 ) -> tuple[Callable[[int], None], list[int]]:
    """A try_batch raising ``make_error()`` at batch sizes >= ``threshold``, and the list of sizes it ran."""
    calls: list[int] = []

    def try_batch(batch_size: int) -> None:
        calls.append(batch_size)
        if batch_size >= threshold:
            raise make_error()

    return try_batch, calls


def test_doubles_until_out_of_memory_and_releases_after_every_try():
    try_batch, calls = failing_from(64)
    releases = Releases()
    result = find_max_batch(try_batch, "cuda:0", release=releases)
    assert result == MaxBatch(batch_size=32, first_oom=64, tried=(1, 2, 4, 8, 16, 32, 64), limit=4096)
    assert calls == [1, 2, 4, 8, 16, 32, 64]
    assert releases.devices == ["cuda:0"] * 7


def test_runtime_error_saying_out_of_memory_counts():
    try_batch, _ = failing_from(8, lambda: RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    result = find_max_batch(try_batch, "cuda:0", release=Releases())
    assert (result.batch_size, result.first_oom, result.tried) == (4, 8, (1, 2, 4, 8))


@pytest.mark.parametrize("error", [ValueError("bad shape"), RuntimeError("mat1 and mat2 shapes cannot be multiplied")])
def test_other_errors_propagate_unchanged(error):
    try_batch, calls = failing_from(4, lambda: error)
    releases = Releases()
    with pytest.raises(type(error)) as raised:
        find_max_batch(try_batch, "cpu", release=releases)
    assert raised.value is error
    assert calls == [1, 2, 4]
    assert len(releases.devices) == 2  # after the two tries that ran; the error is not swallowed by a release


def test_out_of_memory_at_start():
    try_batch, calls = failing_from(8)
    releases = Releases()
    with pytest.raises(OutOfMemoryAtStart, match=r"^out of memory at batch 8 on cuda:1: no batch size fits$") as raised:
        find_max_batch(try_batch, "cuda:1", start=8, release=releases)
    assert isinstance(raised.value, OutOfMemory)
    assert raised.value.__context__ is None  # raised outside the except block: no traceback pinning tensors
    assert calls == [8]
    assert releases.devices == ["cuda:1"]


def test_limit_reached_without_out_of_memory():
    try_batch, calls = failing_from(10**9)
    releases = Releases()
    result = find_max_batch(try_batch, "cpu", limit=16, start=2, release=releases)
    assert result == MaxBatch(batch_size=16, first_oom=None, tried=(2, 4, 8, 16), limit=16)
    assert calls == [2, 4, 8, 16]
    assert len(releases.devices) == 4


def test_start_equal_to_limit():
    try_batch, _ = failing_from(10**9)
    result = find_max_batch(try_batch, "cpu", limit=4, start=4, release=Releases())
    assert result == MaxBatch(batch_size=4, first_oom=None, tried=(4,), limit=4)


@pytest.mark.parametrize(("start", "limit", "named"), [
    (3, 64, "3"), (0, 64, "0"), (-2, 64, "-2"), (2.0, 64, "2.0"), (True, 64, "True"),
    (1, 100, "100"), (1, 0, "0"), (64, 32, "64"),
])
def test_invalid_start_or_limit(start, limit, named):
    try_batch, calls = failing_from(10**9)
    with pytest.raises(ValueError, match=named):
        find_max_batch(try_batch, "cpu", limit=limit, start=start, release=Releases())
    assert calls == []


def test_out_of_memory_traceback_does_not_pin_tensors_at_release():
    held: list[weakref.ref[torch.Tensor]] = []
    alive_at_release: list[bool] = []

    def try_batch(batch_size: int) -> None:
        activations = torch.empty(batch_size * 1024, dtype=torch.uint8)
        held.append(weakref.ref(activations))
        if batch_size >= 4:
            raise TORCH_OOM("CUDA out of memory")

    def release(device: str) -> None:
        alive_at_release.append(held[-1]() is not None)

    result = find_max_batch(try_batch, "cuda:0", release=release)
    assert result.first_oom == 4
    assert alive_at_release == [False, False, False]


class CappedHost:
    """Real CPU allocations under an artificial cap: ``empty`` raises MemoryError when the live bytes it
    handed out plus the request exceed ``cap_bytes``; a tensor's bytes count until it is garbage."""

    def __init__(self, cap_bytes: int) -> None:
        self.cap_bytes = cap_bytes
        self.live_bytes = 0

    def empty(self, nbytes: int) -> torch.Tensor:
        if self.live_bytes + nbytes > self.cap_bytes:
            raise MemoryError(f"cap of {self.cap_bytes} bytes: {self.live_bytes} live, {nbytes} requested")
        tensor = torch.empty(nbytes, dtype=torch.uint8)
        self.live_bytes += nbytes
        weakref.finalize(tensor, self._free, nbytes)
        return tensor

    def _free(self, nbytes: int) -> None:
        self.live_bytes -= nbytes


@pytest.mark.parametrize("release", [None, Releases()], ids=["default-release", "no-op-release"])
def test_real_cpu_allocations_under_a_cap(release):
    host = CappedHost(cap_bytes=40 * MIB)

    def try_batch(batch_size: int) -> None:
        activations = host.empty(batch_size * MIB)
        activations.fill_(1)
        gradients = host.empty(batch_size * MIB)
        gradients.copy_(activations)
        graph: dict[str, object] = {"saved": activations}
        graph["self"] = graph  # a reference cycle, as autograd graphs make: only gc frees it

    # automatic collection off: batch 16 (32 MiB) fits only if the search collects the 15 MiB that the
    # cycles of batches 1-8 hold; batch 32 needs 64 MiB
    gc.disable()
    try:
        result = find_max_batch(try_batch, "cpu", release=release)
    finally:
        gc.enable()
    assert result == MaxBatch(batch_size=16, first_oom=32, tried=(1, 2, 4, 8, 16, 32), limit=4096)
    assert host.live_bytes == 0

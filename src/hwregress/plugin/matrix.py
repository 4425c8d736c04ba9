"""The test matrix's axes: what the user selected (:class:`Selection`) and the defaults of each axis (models, modes,
batch sizes, memory formats) from the selected tier (:mod:`hwregress.plugin.tiers`) and the device kind, from which
every family builds its cases (:mod:`hwregress.plugin.families`), and the id each case gets (:func:`case_id`).

The tiers keep the CPU's default to a few minutes on 2 cores and the GPU's to ten minutes on one GPU; every axis can
be narrowed or replaced from the command line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hwregress import workloads
from hwregress.hardware.facts import device_kind
from hwregress.measure.compilation import BACKENDS
from hwregress.measure.precision.numerics import DTYPES, MEMORY_FORMATS, MODES
from hwregress.plugin import tiers
from hwregress.serving.settings import ServingSettings

# batch sizes per device kind and mode where neither the tier nor the workload names any: 1 for latency, larger for
# throughput
DEFAULT_BATCH_SIZES: dict[str, dict[str, tuple[int, ...]]] = {
    "cpu": {"infer": (1, 8), "train": (8,), "prefill": (1,), "decode": (1,)},
    "cuda": {"infer": (1, 32, 256), "train": (32, 128), "prefill": (1, 8), "decode": (1, 16)},
    "mps": {"infer": (1, 32), "train": (32,), "prefill": (1,), "decode": (1, 4)},
}
# the axes of the suite's cases, in the order of a test id; a case's other keys (a family's own axes) follow them
AXES = ("device", "workload", "members", "ceiling", "mode", "world_size", "context", "compiler", "memory_format",
        "batch_size", "dtype")
# process-group families run where torch.distributed has a backend for the device: gloo on CPUs, NCCL on CUDA
DISTRIBUTED_KINDS = ("cpu", "cuda")
# numerics the distributed families train in (int8 and fp8 are inference-only here)
TRAINING_DTYPES = ("fp32", "tf32", "bf16", "fp16")


@dataclass(frozen=True)
class Selection:
    """What the user selected; None means the per-device default.

    Attributes:
        devices: device specs, e.g. ``["cpu", "cuda:0"]``.
        models: workload names or None.
        batch_sizes: batch sizes for every mode (``"max"``: search the largest power of two that fits), or None.
        modes: subset of :data:`hwregress.measure.precision.numerics.MODES`, or None: each workload's tier modes (a mode
            a workload cannot run, such as ``decode`` for a CNN, is left out for it).
        dtypes: subset of :data:`hwregress.measure.precision.numerics.DTYPES`.
        compilers: subset of :data:`hwregress.measure.compilation.BACKENDS` (``eager``: no compilation).
        memory_formats: ``contiguous`` and/or ``channels_last`` (the latter for convolutional models only).
        world_sizes: ranks of the ``scaling`` family's jobs, or None:
            :func:`hwregress.scaleout.topology.default_world_sizes`.
        colocate: the ``colocated`` family's process groups (model names, one per process), or None: per device kind.
        nnodes: nodes every distributed job spans (``--nnodes``).
        opted_in: the names a ``-m`` expression mentions and the families a flag asks for (``--world-sizes``:
            ``scaling``, ``--colocate``: ``colocated``, ``--spark-master``: ``spark``); an opt-in family runs only
            when its name is here.
        tier: the tier whose models, modes and batch sizes fill what is None above (:mod:`hwregress.plugin.tiers`): a
            name, or a :class:`hwregress.plugin.tiers.Tier` built in code.
        serving: the ``serving`` family's engine, request rates, length profiles and windows (``--serving-*``).
    """

    devices: list[str]
    models: list[str] | None = None
    batch_sizes: list[int | str] | None = None
    modes: list[str] | None = None
    dtypes: list[str] = field(default_factory=lambda: ["fp32"])
    compilers: list[str] = field(default_factory=lambda: ["eager"])
    memory_formats: list[str] = field(default_factory=lambda: ["contiguous"])
    world_sizes: list[int] | None = None
    colocate: list[tuple[str, ...]] | None = None
    nnodes: int = 1
    opted_in: frozenset[str] = frozenset()
    tier: str | tiers.Tier = tiers.DEFAULT_TIER
    serving: ServingSettings = field(default_factory=ServingSettings)


def models_for(selection: Selection, device: str, family: str | None = None) -> list[str]:
    """The selected models, or the tier's on ``device`` (those of ``family`` where the tier names its own)."""
    if selection.models is not None:
        return selection.models
    return tiers.get(selection.tier).models(device, family)


def modes_for(selection: Selection, device: str, model: str) -> list[str]:
    """The modes ``model`` runs on ``device``: the selected ones it can run, or its tier rows' (every mode it can run
    where the tier does not hold the model or names no modes)."""
    runnable = workloads.get(model).modes
    if selection.modes is not None:
        return [mode for mode in selection.modes if mode in runnable]
    rows = tiers.get(selection.tier).rows(device, model)
    return [mode for mode in (rows or runnable) if mode in runnable]


MAX_BATCH = "max"  # --batch-sizes max: hwregress.measure.batch_search finds the batch when the test runs
MAX_BATCH_LIMIT = {"cpu": 64, "cuda": 4096, "mps": 1024}  # the largest batch a max search tries per device kind


def batch_sizes_for(selection: Selection, device: str, mode: str, model: str | None = None) -> list[int | str]:
    """The selected batch sizes, or the tier's for ``model`` in ``mode`` on ``device``, or the workload's defaults for
    the device kind and ``mode``, or the device kind's."""
    if selection.batch_sizes is not None:
        return selection.batch_sizes
    kind = device_kind(device)
    rows = tiers.get(selection.tier).rows(device, model) if model else None
    tiered = (rows or {}).get(mode)
    declared = workloads.get(model).default_batches.get(kind, {}).get(mode) if model else None
    return list(tiered or declared or DEFAULT_BATCH_SIZES.get(kind, DEFAULT_BATCH_SIZES["cpu"])[mode])


def leads_its_kind(selection: Selection, device: str) -> bool:
    """Whether ``device`` is the first selected device of its kind: a job over every GPU of the node runs once."""
    return next(d for d in selection.devices if device_kind(d) == device_kind(device)) == device


def node_gpus(selection: Selection) -> list[str]:
    """The selected CUDA devices that are visible here: the GPUs a job on this node may put its ranks on."""
    from hwregress.hardware.devices import visible_devices

    visible = set(visible_devices())
    return [d for d in selection.devices if device_kind(d) == "cuda" and d in visible]


def largest(batch_sizes: list[int | str]) -> list[int | str]:
    """The largest numeric batch size, as a one-item list (empty: none, ``max`` only)."""
    sizes = numeric(batch_sizes)
    return [max(sizes)] if sizes else []


def smallest(batch_sizes: list[int | str]) -> list[int | str]:
    """The smallest numeric batch size, as a one-item list (empty: none, ``max`` only)."""
    sizes = numeric(batch_sizes)
    return [min(sizes)] if sizes else []


def numeric(batch_sizes: list[int | str]) -> list[int]:
    """The batch sizes that are numbers (``max`` left out)."""
    return [b for b in batch_sizes if isinstance(b, int)]


def memory_formats_for(selection: Selection, model: str) -> list[str]:
    """The selected memory formats that apply to ``model`` (``channels_last`` to convolutional models only)."""
    convolutional = workloads.get(model).convolutional
    chosen = [f for f in selection.memory_formats if f == "contiguous" or convolutional]
    return chosen or ["contiguous"]


def variant_suffix(params: dict[str, Any]) -> str:
    """What a test id and a baseline key add for a non-default compiler or memory format (``-inductor``,
    ``-channels_last``); empty for the defaults, so ids and baselines of eager, contiguous runs keep their names."""
    parts = [params.get("compiler"), params.get("memory_format")]
    return "".join(f"-{p}" for p in parts if p not in (None, "eager", "contiguous"))


def case_id(params: dict[str, Any]) -> str:
    """A readable test id: ``cpu-resnet18-train-bs8-fp32``; a text workload's context follows its mode
    (``cpu-gpt2-decode-ctx128-bs1-fp32``), and the values of a family's own axes (keys beyond :data:`AXES`) the
    dtype."""
    parts = [params.get(k) for k in ("device", "workload", "members", "ceiling", "mode")]
    if params.get("world_size"):
        parts.append(f"w{params['world_size']}")
    if params.get("context"):
        parts.append(f"ctx{params['context']}")
    suffix = variant_suffix(params)
    if suffix:
        parts.append(suffix[1:])
    if "batch_size" in params:
        parts.append(f"bs{params['batch_size']}")
    parts.append(params.get("dtype"))
    parts += [value for key, value in params.items() if key not in AXES]
    return "-".join(str(p) for p in parts if p is not None)


def validate(selection: Selection) -> None:
    """Check every name and number of ``selection``.

    Raises:
        ValueError: an unknown tier, model, mode or dtype, or a batch size < 1; the message lists valid values.
    """
    tiers.get(selection.tier)  # raises ValueError with the tiers
    for model in selection.models or []:
        workloads.get(model)  # raises KeyError with the registered names
    for mode in selection.modes or []:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; use {', '.join(MODES)}")
    for dtype in selection.dtypes:
        if dtype not in DTYPES:
            raise ValueError(f"unknown dtype {dtype!r}; use {', '.join(DTYPES)}")
    for compiler in selection.compilers:
        if compiler not in BACKENDS:
            raise ValueError(f"unknown compiler {compiler!r}; use {', '.join(BACKENDS)}")
    for memory_format in selection.memory_formats:
        if memory_format not in MEMORY_FORMATS:
            raise ValueError(f"unknown memory format {memory_format!r}; use {', '.join(MEMORY_FORMATS)}")
    for size in selection.world_sizes or []:
        if not isinstance(size, int) or size < 1:
            raise ValueError(f"world sizes must be whole numbers >= 1, got {size}")
        if size % selection.nnodes:
            raise ValueError(f"world size {size} does not split evenly over {selection.nnodes} nodes; "
                             f"use multiples of {selection.nnodes}")
    for members in selection.colocate or []:
        if len(members) < 2:
            raise ValueError(f"a co-located group needs two or more processes, got {'+'.join(members)!r}; "
                             "write MODEL+MODEL[+MODEL...]")
        for model in members:
            try:
                workloads.get(model)
            except KeyError as error:
                raise ValueError(f"co-located group {'+'.join(members)!r}: {error.args[0]}") from None
    for batch in selection.batch_sizes or []:
        if batch != MAX_BATCH and (not isinstance(batch, int) or batch < 1):
            raise ValueError(f"batch sizes must be >= 1, got {batch}")

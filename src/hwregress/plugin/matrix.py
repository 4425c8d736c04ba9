"""The test matrix: which (device, model, mode, batch size, dtype) combinations a session runs.

Per-device defaults keep the CPU tier to a few minutes on 2 cores and run the whole zoo on GPUs; every
axis can be narrowed or replaced from the command line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hwregress import workloads
from hwregress.hardware.facts import device_kind
from hwregress.measure.compilation import BACKENDS
from hwregress.measure.precision.numerics import DTYPES, MEMORY_FORMATS, MODES, STEP_MODES
from hwregress.measure.precision.quantization import QUANTIZED_DTYPES

# batch sizes per device kind and mode where a workload declares none: 1 for latency, larger for throughput
DEFAULT_BATCH_SIZES: dict[str, dict[str, tuple[int, ...]]] = {
    "cpu": {"infer": (1, 8), "train": (8,), "prefill": (1,), "decode": (1,)},
    "cuda": {"infer": (1, 32, 256), "train": (32, 128), "prefill": (1, 8), "decode": (1, 16)},
    "mps": {"infer": (1, 32), "train": (32,), "prefill": (1,), "decode": (1, 4)},
}
CEILINGS = ("gemm", "copy", "h2d", "d2h", "p2p", "allreduce")
CUDA_ONLY_CEILINGS = ("h2d", "d2h", "p2p")
# GEMM roofs measured by default per device kind (plus any --dtypes): every tensor-core mode on GPUs
DEFAULT_CEILING_DTYPES = {"cpu": ("fp32",), "cuda": ("fp32", "tf32", "bf16", "fp16"), "mps": ("fp32", "fp16")}
FAMILIES = ("throughput", "parity", "output-parity", "speedup", "ceiling", "scaling", "colocated", "spark")
# data-parallel scaling and co-location: models small enough for 2 cores; on GPUs the classic DDP benchmark (the
# GPU tier must stay within 10 minutes: transformers scale with --models bert_base)
SCALING_MODELS = {"cpu": ("mobilenet_v3_small",), "cuda": ("resnet50",)}
# On the CPU these families run when asked for (a -m expression naming them, --world-sizes, --colocate): the
# default CPU tier must end within 2 minutes on 2 cores, and they take ~85 s there (5 jobs of spawned ranks)
OPT_IN_ON_CPU = ("scaling", "colocated")
# process-group families run where torch.distributed has a backend for the device: gloo on CPUs, NCCL on CUDA
DISTRIBUTED_KINDS = ("cpu", "cuda")
# numerics the distributed families train in (int8 and fp8 are inference-only here)
TRAINING_DTYPES = ("fp32", "tf32", "bf16", "fp16")
# Spark batch and streaming inference (hwregress.spark): opt-in on every device (the CPU tier must end within 2 minutes
# and the GPU tier within 10; the family takes 2 min 20 s on 2 CPU cores), one image model per device kind and a batch
# per model call; the two pipelines of the family
OPT_IN_EVERYWHERE = ("spark",)
SPARK_MODELS = {"cpu": ("mobilenet_v3_small",), "cuda": ("resnet50",)}
SPARK_BATCH = {"cpu": 16, "cuda": 256, "mps": 64}
SPARK_PIPELINES = ("batch", "stream")
INFERENCE_DTYPES_ON_SPARK = ("fp32", "tf32", "bf16", "fp16")
COLOCATED_MEMBERS = {"cpu": (("mobilenet_v3_small", "mobilenet_v3_small"),), "cuda": (("resnet50", "resnet50"),)}


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
        opted_in: families of :data:`OPT_IN_ON_CPU` and :data:`OPT_IN_EVERYWHERE` asked for, so they run.
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


def tier(device: str) -> dict[str, tuple[str, ...] | None]:
    """The default models of a device kind and the modes each runs by default (None: all it can run)."""
    return dict(workloads.CPU_TIER) if device_kind(device) == "cpu" else dict(workloads.GPU_TIER)


def models_for(selection: Selection, device: str) -> list[str]:
    """The selected models, or the device's default tier (CPU: a few small models; GPUs: the zoo)."""
    if selection.models is not None:
        return selection.models
    return list(tier(device))


def modes_for(selection: Selection, device: str, model: str) -> list[str]:
    """The modes ``model`` runs on ``device``: the selected ones it can run, or its tier's (all it can run)."""
    runnable = workloads.get(model).modes
    if selection.modes is not None:
        return [mode for mode in selection.modes if mode in runnable]
    chosen = tier(device).get(model) if selection.models is None else None
    return [mode for mode in (chosen or runnable) if mode in runnable]


MAX_BATCH = "max"  # --batch-sizes max: hwregress.measure.batch_search finds the batch when the test runs
MAX_BATCH_LIMIT = {"cpu": 64, "cuda": 4096, "mps": 1024}  # the largest batch a max search tries per device kind


def batch_sizes_for(selection: Selection, device: str, mode: str, model: str | None = None) -> list[int | str]:
    """The selected batch sizes, or the workload's defaults for the device kind and ``mode``, or the device's."""
    if selection.batch_sizes is not None:
        return selection.batch_sizes
    kind = device_kind(device)
    declared = workloads.get(model).default_batches.get(kind, {}).get(mode) if model else None
    return list(declared or DEFAULT_BATCH_SIZES.get(kind, DEFAULT_BATCH_SIZES["cpu"])[mode])


def cases(selection: Selection, family: str) -> list[dict[str, Any]]:
    """The parameter sets of one test family, as dicts over a subset of ``device, workload, mode,
    batch_size, dtype, ceiling``.

    Families: ``throughput`` (the full product), ``parity`` (device x dtype), ``output-parity``
    (device x model x dtype), ``speedup`` (CUDA devices x model, the smallest train batch, fp32),
    ``ceiling`` (device x roof x dtype; only ``gemm`` varies the dtype, over the device's defaults plus
    the selected dtypes; ``h2d`` only on CUDA).

    Raises:
        ValueError: unknown family.
    """
    if family not in FAMILIES:
        raise ValueError(f"unknown test family {family!r}; one of {FAMILIES}")
    out: list[dict[str, Any]] = []
    for device in selection.devices:
        if family == "throughput":
            out += [
                {"device": device, "workload": m, "mode": mode,
                 "context": workloads.get(m).context_for(device_kind(device)),
                 "compiler": c, "memory_format": f, "batch_size": b, "dtype": d}
                for m in models_for(selection, device)
                for mode in modes_for(selection, device, m)
                for c in (selection.compilers if mode in STEP_MODES else ["eager"])
                for f in memory_formats_for(selection, m)
                for b in batch_sizes_for(selection, device, mode, m)
                for d in selection.dtypes
            ]
        elif family == "parity":
            out += [{"device": device, "dtype": d} for d in selection.dtypes]
        elif family == "output-parity":
            out += [{"device": device, "workload": m, "dtype": d} for m in models_for(selection, device)
                    for d in selection.dtypes]
        elif family == "speedup" and device_kind(device) == "cuda":
            out += [{"device": device, "workload": m, "mode": "train",
                     "batch_size": min(_numeric(batch_sizes_for(selection, device, "train", m)) or [1]),
                     "dtype": "fp32"}
                    for m in models_for(selection, device) if workloads.get(m).input_kind == "images"]
        elif family == "ceiling":
            for name in CEILINGS:
                if name in CUDA_ONLY_CEILINGS and device_kind(device) != "cuda":
                    continue
                if name == "allreduce" and (device_kind(device) not in DISTRIBUTED_KINDS
                                            or not _leads_its_kind(selection, device)):
                    continue  # one job over every GPU of the node, not one per GPU
                for d in (_gemm_dtypes(selection, device) if name == "gemm" else ["fp32"]):
                    out.append({"device": device, "ceiling": name, "dtype": d})
        elif (family == "scaling" and _runs_distributed(selection, device, family)
              and _leads_its_kind(selection, device)):
            out += [{"device": device, "workload": m, "mode": "train", "world_size": w, "batch_size": b, "dtype": d}
                    for m in scaling_models(selection, device)
                    for w in world_sizes_for(selection, device)
                    for b in _largest(batch_sizes_for(selection, device, "train", m))
                    for d in selection.dtypes if d in TRAINING_DTYPES]
        elif family == "colocated" and _runs_distributed(selection, device, family):
            out += [{"device": device, "members": "+".join(members), "mode": "train", "batch_size": b, "dtype": d}
                    for members in colocated_members(selection, device)
                    for b in _smallest(batch_sizes_for(selection, device, "train", members[0]))
                    for d in selection.dtypes if d in TRAINING_DTYPES]
        elif family == "spark" and "spark" in selection.opted_in:
            out += [{"device": device, "workload": m, "mode": pipeline, "batch_size": b, "dtype": d}
                    for m in spark_models(selection, device)
                    for pipeline in SPARK_PIPELINES
                    for b in spark_batch_sizes(selection, device)
                    for d in selection.dtypes if d in INFERENCE_DTYPES_ON_SPARK]
    return out


def spark_models(selection: Selection, device: str) -> list[str]:
    """The ``spark`` family's models: the selected image models (one ``(C, H, W)`` image per sample), else
    :data:`SPARK_MODELS` of the device kind."""
    if selection.models is not None:
        return [m for m in selection.models
                if workloads.get(m).input_kind == "images" and len(workloads.get(m).input_shape) == 3]
    return list(SPARK_MODELS.get(device_kind(device), SPARK_MODELS["cpu"]))


def spark_batch_sizes(selection: Selection, device: str) -> list[int]:
    """The ``spark`` family's rows per model call: the selected numeric batch sizes, else :data:`SPARK_BATCH`."""
    if selection.batch_sizes is not None:
        return _numeric(selection.batch_sizes)
    return [SPARK_BATCH.get(device_kind(device), SPARK_BATCH["cpu"])]


def _runs_distributed(selection: Selection, device: str, family: str) -> bool:
    """Whether ``family`` (``scaling``, ``colocated``) runs on ``device``: a kind with a process-group backend for
    scaling, and on the CPU only when asked for (:data:`OPT_IN_ON_CPU`)."""
    kind = device_kind(device)
    if family == "scaling" and kind not in DISTRIBUTED_KINDS:
        return False
    return kind != "cpu" or family not in OPT_IN_ON_CPU or family in selection.opted_in

def _leads_its_kind(selection: Selection, device: str) -> bool:
    """Whether ``device`` is the first selected device of its kind: a job over every GPU of the node runs once."""
    return next(d for d in selection.devices if device_kind(d) == device_kind(device)) == device


def scaling_models(selection: Selection, device: str) -> list[str]:
    """The ``scaling`` family's models: the selected ones that train, else :data:`SCALING_MODELS` of the device kind."""
    if selection.models is not None:
        return [m for m in selection.models if "train" in workloads.get(m).modes]
    return list(SCALING_MODELS.get(device_kind(device), SCALING_MODELS["cpu"]))


def world_sizes_for(selection: Selection, device: str) -> list[int]:
    """The selected world sizes, or powers of two up to the node's GPUs (CPU: 1 and 2) times the nodes."""
    if selection.world_sizes is not None:
        return selection.world_sizes
    from hwregress.scaleout.topology import default_world_sizes

    return default_world_sizes(device_kind(device), len(node_gpus(selection)), selection.nnodes)


def node_gpus(selection: Selection) -> list[str]:
    """The selected CUDA devices that are visible here: the GPUs a job on this node may put its ranks on."""
    from hwregress.hardware.devices import visible_devices

    visible = set(visible_devices())
    return [d for d in selection.devices if device_kind(d) == "cuda" and d in visible]


def colocated_members(selection: Selection, device: str) -> list[tuple[str, ...]]:
    """The ``colocated`` family's process groups: ``--colocate``, else two processes of the first selected model
    that trains, else :data:`COLOCATED_MEMBERS` of the device kind."""
    if selection.colocate is not None:
        return selection.colocate
    if selection.models is not None:
        trainable = [m for m in selection.models if "train" in workloads.get(m).modes]
        return [(trainable[0], trainable[0])] if trainable else []
    return list(COLOCATED_MEMBERS.get(device_kind(device), COLOCATED_MEMBERS["cpu"]))


def _largest(batch_sizes: list[int | str]) -> list[int | str]:
    numeric = _numeric(batch_sizes)
    return [max(numeric)] if numeric else []


def _smallest(batch_sizes: list[int | str]) -> list[int | str]:
    numeric = _numeric(batch_sizes)
    return [min(numeric)] if numeric else []


def _gemm_dtypes(selection: Selection, device: str) -> list[str]:
    """The GEMM roof's dtypes: the device's defaults and the selected floating dtypes. The roof multiplies float
    tensors (hwregress.measure.ceilings), so an int8 or fp8 roof would be an fp32 GEMM set against the int8 or fp8
    peak: quantized dtypes have no roof."""
    defaults = DEFAULT_CEILING_DTYPES.get(device_kind(device), ("fp32",))
    return list(dict.fromkeys([*defaults, *(d for d in selection.dtypes if d not in QUANTIZED_DTYPES)]))


def _numeric(batch_sizes: list[int | str]) -> list[int]:
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
    (``cpu-gpt2-decode-ctx128-bs1-fp32``)."""
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
    return "-".join(str(p) for p in parts if p is not None)


def validate(selection: Selection) -> None:
    """Check every name and number of ``selection``.

    Raises:
        ValueError: an unknown model, mode or dtype, or a batch size < 1; the message lists valid values.
    """
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

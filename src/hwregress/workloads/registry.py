"""The workload registry: model name -> model factory, its inputs, loss, units and defaults.

Models are torchvision architectures built with ``weights=None`` and transformers architectures built from
their configs (random initialization, nothing is downloaded: :mod:`hwregress.workloads.transformers`). Projects
add their own with :func:`register` (see :mod:`hwregress.workloads.plugins` for entry points and ``--workloads``).

A workload declares its input kind: ``images`` (one sample is a ``input_shape`` tensor) or ``tokens`` (one
sample is ``seq_len`` token ids below ``vocab_size``, with an all-ones attention mask). Text throughput is
counted in tokens/s (``batch_size * seq_len`` per step); samples/s is kept beside it.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
from torch import nn

from hwregress.hardware.facts import device_kind

# The models of the seed studies (the tiers that run them: hwregress.plugin.tiers).
ZOO = (
    "alexnet",
    "resnet18",
    "resnet50",
    "resnet152",
    "vgg16",
    "vgg19",
    "densenet121",
    "mobilenet_v3_small",
    "vit_b_16",
    "convnext_tiny",
)


# the extra of hwregress that installs each optional package a workload family needs (pip install 'hwregress[llm]')
EXTRAS = {"transformers": "llm", "torchao": "quant"}
INPUT_KINDS = ("images", "tokens")
TASKS = ("classification", "causal-lm")


def causal_lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy: ``logits[N, S, V]`` at positions ``0..S-2`` against ``labels[N, S]`` at
    ``1..S-1`` (the shift every causal LM trains with)."""
    return nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1))


@dataclass(frozen=True)
class Workload:
    """A benchmarkable model.

    Attributes:
        name: registry name, e.g. ``"resnet50"``.
        build: returns a fresh ``nn.Module`` on the CPU in fp32 (random weights).
        input_shape: one sample's shape for ``images``, e.g. ``(3, 224, 224)``.
        num_classes: size of the classifier output; labels are drawn from ``range(num_classes)``
            (for ``causal-lm`` the labels are the input tokens and this is the vocabulary size).
        loss: ``loss(logits, labels) -> scalar``: cross-entropy over ``[N, num_classes]`` by default,
            :func:`causal_lm_loss` for causal LMs.
        input_kind: ``images`` or ``tokens``.
        seq_len: tokens per sample (``tokens`` only); the context length of ``prefill``/``decode``.
        vocab_size: token ids are drawn from ``range(vocab_size)`` (``tokens`` only).
        task: ``classification`` (logits ``[N, num_classes]``) or ``causal-lm`` (logits ``[N, S, vocab]``).
        source: where the architecture comes from, for the README and the report (``torchvision``, ...).
        default_batches: batch sizes per device kind and mode (``{"cpu": {"infer": (1,)}}``), TorchBench-style;
            a device kind or mode missing here uses :data:`hwregress.plugin.matrix.DEFAULT_BATCH_SIZES`.
        parity_tolerance: relative L2 error allowed against the CPU fp32 reference, per dtype; a dtype missing
            here uses :data:`hwregress.measure.parity.TOLERANCE`.
        convolutional: whether ``channels_last`` applies (convolutional image models).
        default_contexts: tokens per sample per device kind (``{"cpu": 128}``), where ``seq_len`` would be too
            slow; the context is on the test id (``ctx128``).
        requires: the optional Python packages ``build`` imports (``("transformers",)``); a test of a workload
            whose package is missing is skipped as ``unsupported`` (:meth:`unavailable_reason`).
    """

    name: str
    build: Callable[[], nn.Module]
    input_shape: tuple[int, ...] = (3, 224, 224)
    num_classes: int = 1000
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = nn.functional.cross_entropy
    input_kind: str = "images"
    seq_len: int | None = None
    vocab_size: int | None = None
    task: str = "classification"
    source: str = "custom"
    default_batches: Mapping[str, Mapping[str, tuple[int, ...]]] = field(default_factory=dict)
    parity_tolerance: Mapping[str, float] = field(default_factory=dict)
    convolutional: bool = False
    default_contexts: Mapping[str, int] = field(default_factory=dict)
    requires: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.input_kind not in INPUT_KINDS:
            raise ValueError(f"workload {self.name!r}: input_kind {self.input_kind!r} is not one of {INPUT_KINDS}")
        if self.task not in TASKS:
            raise ValueError(f"workload {self.name!r}: task {self.task!r} is not one of {TASKS}")
        if self.input_kind == "tokens" and not (self.seq_len and self.vocab_size):
            raise ValueError(f"workload {self.name!r}: a tokens workload needs seq_len and vocab_size > 0")

    @property
    def unit(self) -> str:
        """The throughput unit: ``tokens/s`` for text, ``samples/s`` otherwise."""
        return "tokens/s" if self.input_kind == "tokens" else "samples/s"

    def work_per_sample(self, context: int | None = None) -> int:
        """Units of :attr:`unit` in one sample: ``context`` (else ``seq_len``) tokens for text, 1 image otherwise."""
        return int(context or self.seq_len or 1) if self.input_kind == "tokens" else 1

    @property
    def modes(self) -> tuple[str, ...]:
        """The modes this workload runs: train and infer; causal LMs also prefill and decode."""
        return ("train", "infer", "prefill", "decode") if self.task == "causal-lm" else ("train", "infer")

    def unavailable_reason(self) -> str | None:
        """Why this workload cannot be built here, None when it can: the packages of :attr:`requires` that are
        not installed, with the command that installs them, e.g. ``"bert_base needs the Python package
        transformers: pip install 'hwregress[llm]'"``. Nothing is imported to find out."""
        missing = [package for package in self.requires if importlib.util.find_spec(package) is None]
        if not missing:
            return None
        extras = sorted({EXTRAS[package] for package in missing if package in EXTRAS})
        install = f"'hwregress[{','.join(extras)}]'" if extras else " ".join(missing)
        packages = "package" if len(missing) == 1 else "packages"
        return f"{self.name} needs the Python {packages} {', '.join(missing)}: pip install {install}"

    def context_for(self, device_kind: str) -> int | None:
        """Tokens per sample on a device kind: ``default_contexts`` there, else ``seq_len``; None for images."""
        if self.input_kind != "tokens":
            return None
        return int(self.default_contexts.get(device_kind, self.seq_len or 1))


_REGISTRY: dict[str, Workload] = {}
_TORCHVISION_SCHEMAS: torch.library.Library | None = None


@functools.lru_cache(maxsize=1)
def import_torchvision():
    """Import torchvision, working around a wheel whose compiled ops cannot load.

    A CUDA build of torchvision beside a CPU build of torch (the only torchvision wheels on PyPI for
    some torch versions) fails at import with ``operator torchvision::nms does not exist``: its
    Python side registers fake kernels for ``nms``/``qnms`` that need the op schemas the compiled
    library would have defined. The classification models never call those ops, so defining the two
    schemas is enough. Applied only when the compiled ops cannot be loaded.
    """
    try:
        import torchvision

        return torchvision
    except RuntimeError as error:
        if "torchvision::nms does not exist" not in str(error):
            raise
    global _TORCHVISION_SCHEMAS
    _TORCHVISION_SCHEMAS = torch.library.Library("torchvision", "DEF")  # kept: a dropped Library unregisters its ops
    _TORCHVISION_SCHEMAS.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _TORCHVISION_SCHEMAS.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[name]
    import torchvision

    return torchvision


CONVOLUTIONAL = frozenset(ZOO) - {"vit_b_16"}


def _torchvision_factory(name: str) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        return getattr(import_torchvision().models, name)(weights=None)

    return build


def register(workload: Workload, *, replace: bool = False) -> None:
    """Add ``workload`` to the registry.

    Raises:
        ValueError: the name is taken and ``replace`` is False.
    """
    if workload.name in _REGISTRY and not replace:
        raise ValueError(f"workload {workload.name!r} is already registered; pass replace=True to override it")
    _REGISTRY[workload.name] = workload


def names() -> list[str]:
    """Registered workload names in registration order."""
    return list(_REGISTRY)


def get(name: str) -> Workload:
    """The workload called ``name``.

    Raises:
        KeyError: unknown name; the message lists the registered names.
    """
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r}; registered models: {', '.join(names())}") from None


Inputs = torch.Tensor | dict[str, torch.Tensor]


def build_on(workload: Workload, device: str) -> nn.Module:
    """``workload.build()`` with ``device`` as torch's default device (``torch.device`` as a context manager, torch
    >= 2.0: ``torch/utils/_device.py``'s ``DeviceContext`` gives factory calls without a device this one), so its
    parameters are created and randomly initialized there, then ``.to(device)`` (a no-op unless the factory put
    tensors on an explicit device).

    On a GPU this skips the CPU's random init and the host-to-device copy, tens of seconds per test for a 1B model
    (docs/measured.md, 'Model builds'). Weights stay random (each test's build draws its own); on the CPU it is
    ``workload.build()`` as before.
    """
    if device_kind(device) == "cpu":
        return workload.build().to(device)
    with torch.device(device):
        return workload.build().to(device)


def make_batch(workload: Workload, batch_size: int, device: str, seed: int = 0,
               seq_len: int | None = None) -> tuple[Inputs, torch.Tensor]:
    """A reproducible random batch, generated on the CPU with ``seed`` and moved to ``device``; ``seq_len``
    overrides the workload's tokens per sample (text only).

    Returns:
        images: inputs ``[batch_size, *input_shape]`` (fp32, N(0,1)) and integer labels ``[batch_size]``;
        tokens: ``{"input_ids": [batch_size, seq_len], "attention_mask": ones}`` (int64) and labels
        ``[batch_size]`` (classification) or the input ids themselves (causal LM: next-token targets).
    """
    generator = torch.Generator().manual_seed(seed)
    if workload.input_kind == "tokens":
        tokens = int(seq_len or workload.seq_len or 1)
        ids = torch.randint(0, int(workload.vocab_size or 2), (batch_size, tokens), generator=generator)
        labels = (ids if workload.task == "causal-lm"
                  else torch.randint(0, workload.num_classes, (batch_size,), generator=generator))
        return {"input_ids": ids.to(device), "attention_mask": torch.ones_like(ids).to(device)}, labels.to(device)
    inputs = torch.randn((batch_size, *workload.input_shape), generator=generator)
    labels = torch.randint(0, workload.num_classes, (batch_size,), generator=generator)
    return inputs.to(device), labels.to(device)


def forward(model: nn.Module, inputs: Inputs, use_cache: bool | None = None) -> torch.Tensor:
    """The model's logits for ``inputs``: ``model(**inputs)`` for a mapping (token ids and mask), else
    ``model(inputs)``; a transformers output gives its ``.logits``, a tuple its first element. ``use_cache`` is
    passed on when not None (:func:`step_use_cache`)."""
    options = {} if use_cache is None else {"use_cache": use_cache}
    output = model(**inputs, **options) if isinstance(inputs, dict) else model(inputs, **options)
    logits = getattr(output, "logits", None)
    if logits is not None:
        return logits
    return output[0] if isinstance(output, (tuple, list)) else output


def step_use_cache(workload: Workload) -> bool | None:
    """``use_cache`` for a train or plain infer step of ``workload``: False for a causal LM, whose forward would
    otherwise build a KV cache no later step reads (transformers' default ``config.use_cache=True``: K and V of every
    layer kept, in memory and copies a training or scoring pass does not make); None (not passed) for other models,
    whose forward may not take it. Prefill and decode build their cache on purpose
    (:mod:`hwregress.measure.llm.decode`)."""
    return False if workload.task == "causal-lm" else None


def batch_size_of(inputs: Inputs) -> int:
    """The leading dimension of ``inputs`` (of its ``input_ids`` for token inputs)."""
    return int((inputs["input_ids"] if isinstance(inputs, dict) else inputs).shape[0])


for _name in ZOO:
    register(Workload(_name, _torchvision_factory(_name), source="torchvision", convolutional=_name in CONVOLUTIONAL))

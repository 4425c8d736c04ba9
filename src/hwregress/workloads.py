"""The workload registry: model name -> model factory, input shape and loss.

Models are torchvision architectures built with ``weights=None`` (random initialization, nothing is
downloaded). Projects add their own with :func:`register`.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

# The models of the seed studies; CPU_TIER is the subset small enough for a few minutes on 2 cores.
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
CPU_TIER = ("resnet18", "mobilenet_v3_small", "alexnet")


@dataclass(frozen=True)
class Workload:
    """A benchmarkable model.

    Attributes:
        name: registry name, e.g. ``"resnet50"``.
        build: returns a fresh ``nn.Module`` on the CPU in fp32 (random weights).
        input_shape: one sample's shape, e.g. ``(3, 224, 224)``.
        num_classes: size of the classifier output; labels are drawn from ``range(num_classes)``.
        loss: ``loss(logits[N, num_classes], labels[N]) -> scalar``; cross-entropy by default.
    """

    name: str
    build: Callable[[], nn.Module]
    input_shape: tuple[int, ...] = (3, 224, 224)
    num_classes: int = 1000
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = nn.functional.cross_entropy


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


def make_batch(workload: Workload, batch_size: int, device: str, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A reproducible random batch: inputs ``[batch_size, *input_shape]`` (fp32, N(0,1)) and integer
    labels ``[batch_size]``, generated on the CPU with ``seed`` and moved to ``device``."""
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn((batch_size, *workload.input_shape), generator=generator)
    labels = torch.randint(0, workload.num_classes, (batch_size,), generator=generator)
    return inputs.to(device), labels.to(device)


for _name in ZOO:
    register(Workload(_name, _torchvision_factory(_name)))

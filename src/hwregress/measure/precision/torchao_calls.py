"""Every call into torchao, kept in its box: torchao imported lazily with an install hint, its configs built and
``quantize_`` called with ``set_inductor_config=False`` where their signatures take it, and
:func:`inductor_state_kept` around them.

torchao's configs (v0.10+) and ``quantize_`` (v0.5-v0.9) default to ``set_inductor_config=True``, which sets
``torch._inductor.config`` fields process-wide (and in v0.8-v0.17 ``torch.set_float32_matmul_precision("high")``,
i.e. TF32 matmuls): hwregress passes False where the signature takes it and restores both around every torchao
call (:func:`inductor_state_kept`), so no later test of the session runs under settings a quantized test left.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import warnings
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import torch
from torch import nn

TORCHAO_INSTALL = "pip install torchao"


def import_torchao() -> tuple[ModuleType | None, str | None]:
    """(``torchao.quantization``, None) when torchao imports, else (None, why not with the install command)."""
    try:
        return importlib.import_module("torchao.quantization"), None
    except ImportError as error:
        return None, f"torchao is not installed ({error}); install it with `{TORCHAO_INSTALL}`"
    except Exception as error:  # a torchao built for another torch fails at import in many ways
        return None, (f"torchao is installed but fails to import ({type(error).__name__}: {error}); "
                      f"reinstall a build matching torch {torch.__version__} with `{TORCHAO_INSTALL}`")


@contextlib.contextmanager
def inductor_state_kept() -> Iterator[None]:
    """Restore ``torch._inductor.config`` and ``torch.get_float32_matmul_precision()`` on exit to what they were
    on entry, whatever the block changed.

    torchao's ``recommended_inductor_config_setter`` (torchao/quantization/utils.py:569; called by ``quantize_``
    in v0.5-v0.9 and by each config's handler when its ``set_inductor_config`` is True, quant_api.py:757, :1312)
    sets coordinate-descent tuning, ``force_fuse_int_mm_with_mul``, ``fx_graph_cache`` and
    ``triton.unique_kernel_names`` for the whole process, and in v0.8-v0.17 also
    ``torch.set_float32_matmul_precision("high")`` (TF32 matmuls). Only changed fields are set back, so fields
    nobody touched keep their default status.
    """
    import torch._inductor.config as inductor_config

    saved = inductor_config.get_config_copy()
    matmul_precision = torch.get_float32_matmul_precision()
    try:
        yield
    finally:
        current = inductor_config.get_config_copy()
        for key, value in saved.items():
            if current.get(key) is not value and current.get(key) != value:
                setattr(inductor_config, key, value)
        if torch.get_float32_matmul_precision() != matmul_precision:
            torch.set_float32_matmul_precision(matmul_precision)


def takes(function: Callable[..., Any], parameter: str) -> bool:
    """Whether ``function``'s signature has ``parameter`` (False where it has no signature to read)."""
    try:
        return parameter in inspect.signature(function).parameters
    except (TypeError, ValueError):  # no signature to read (a builtin): do not guess
        return False


def torchao_config(quantization: ModuleType, config_name: str, legacy_name: str) -> object:
    """An instance of torchao's ``config_name`` (0.9+ spelling), else of its function ``legacy_name``, with
    ``set_inductor_config=False`` where it takes that argument (the configs' field since v0.10)."""
    factory = getattr(quantization, config_name, None) or getattr(quantization, legacy_name)
    return factory(set_inductor_config=False) if takes(factory, "set_inductor_config") else factory()


def quantize_(quantization: ModuleType, model: nn.Module, config: object, **options: Any) -> None:
    """torchao's ``quantize_`` with ``set_inductor_config=False`` where its signature has it (v0.5-v0.9;
    v0.9 warns that the argument will go, a warning silenced here)."""
    quantize = quantization.quantize_
    if takes(quantize, "set_inductor_config"):
        options["set_inductor_config"] = False
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"The `set_inductor_config` argument")
        quantize(model, config, **options)

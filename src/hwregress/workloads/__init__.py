"""Workloads: the registry of models a test can run (name -> model factory, inputs, loss; the torchvision zoo
registered with it) in ``registry``, the transformers architectures in ``transformers`` and the third-party
workload plugins in ``plugins``. May import torch, torchvision, transformers (lazily) and ``hardware/``.

This module is the face: importing it registers the built-in families, and ``Workload``, ``register``, ``get``,
``names`` and the batch helpers are imported from here, e.g. by a plugin::

    from hwregress.workloads import Workload, register
"""

from hwregress.workloads import transformers  # noqa: F401  (registers bert_base, gpt2, ...; transformers loads lazily)
from hwregress.workloads.registry import (
    CONVOLUTIONAL,
    INPUT_KINDS,
    TASKS,
    ZOO,
    Inputs,
    Workload,
    batch_size_of,
    build_on,
    causal_lm_loss,
    forward,
    get,
    import_torchvision,
    make_batch,
    names,
    register,
    step_use_cache,
)

__all__ = ["CONVOLUTIONAL", "INPUT_KINDS", "TASKS", "ZOO", "Inputs", "Workload",
           "batch_size_of", "build_on", "causal_lm_loss", "forward", "get", "import_torchvision", "make_batch", "names",
           "register", "step_use_cache"]

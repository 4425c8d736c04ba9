"""Measuring: the timed window of a model (warmup, device-synchronized rounds), the measurement it returns,
memory meters and the out-of-memory helpers, precision (numeric modes and quantization), the LLM windows
(prefill, decode), compilation, profiling, the device ceilings, the batch-size search, accuracy parity and the
CPU host reference. It may import torch, ``hardware/``, ``workloads/``, ``store/`` for the vocabulary of a record
and :mod:`hwregress.summary`; never ``judge/``, pytest, ``plugin/``, ``cli/`` or ``report/``. This ``__init__``
imports nothing."""

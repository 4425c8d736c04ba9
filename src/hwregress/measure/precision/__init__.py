"""Precision: the numeric modes (fp32, tf32, bf16, fp16: tables, flags, autocast) in ``numerics`` and the
quantized ones (int8, fp8 Linear layers) in ``quantization``, which builds on ``numerics`` and calls torchao only
through ``torchao_calls``; ``support`` answers
whether a dtype runs on a device from both. May import torch and ``hardware/``. Imports nothing here."""

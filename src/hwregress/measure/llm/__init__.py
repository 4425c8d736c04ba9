"""The serving-side windows of a causal language model: ``decode`` times the prompt pass (prefill) and greedy
decoding with a KV cache step by step; ``window`` runs either as a measured window (telemetry, memory, FLOPs).
May import torch, ``hardware/``, ``workloads/`` and the rest of ``measure/``. Imports nothing here."""

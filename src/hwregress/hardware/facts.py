"""The vocabulary of what hwregress records about a machine, and which of it changed: the slug of a hardware key,
the device kind of a device spec, the hardware-identity fields and the software-fingerprint fields that count for
performance, and the comparisons that list which of them differ between a recording and now.

Torch-free and import-free on purpose: the probes of ``hardware/`` (:mod:`hwregress.hardware.identity`,
:mod:`hwregress.hardware.devices`) fill these fields, and ``judge/`` compares them without loading torch."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any


def slugify(text: str) -> str:
    """Lower-case ``text`` and join its alphanumeric runs with ``-`` ("NVIDIA H100 80GB HBM3" ->
    "nvidia-h100-80gb-hbm3")."""
    return "-".join(re.findall(r"[a-z0-9]+", text.lower())) or "unknown"


def device_kind(spec: str) -> str:
    """``"cuda:1"`` -> ``"cuda"``."""
    return spec.split(":", 1)[0]


# ISA features that select different kernels in oneDNN / FBGEMM / ATen (x86) or in KleidiAI / ACL (Arm).
ISA_FEATURES = ("avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx512_fp16",
                "amx_tile", "amx_bf16", "amx_int8", "asimd", "sve", "sve2")

CPU_PERFORMANCE_FIELDS = ("cpu_vendor", "cpu_brand", "cpu_family", "cpu_model", "cpu_stepping",
                          "cpu_physical_cores", "cpu_logical_cores", "torch_threads", "cpu_l2_cache_bytes",
                          "cpu_l3_cache_bytes", "cpu_max_mhz", *(f"cpu_{f}" for f in ISA_FEATURES))
GPU_PERFORMANCE_FIELDS = ("gpu_name", "gpu_memory_bytes", "gpu_sm_count", "gpu_compute_capability",
                          "gpu_power_limit_default_w", "gpu_power_limit_enforced_w", "gpu_max_sm_clock_mhz",
                          "gpu_max_mem_clock_mhz", "gpu_mig_mode", "gpu_pcie_max_gen", "gpu_pcie_max_width",
                          "gpu_ecc_mode")
# Fields whose change makes old timings incomparable; memory size and other facts are kept, not compared.
PERFORMANCE_FIELDS = CPU_PERFORMANCE_FIELDS + GPU_PERFORMANCE_FIELDS
# Which unit of a hardware key a GPU record was measured on, and its host: a difference from the baseline's is told
# in the diagnosis, never a reason to refuse the comparison (the units of one GPU model share a baselines file).
# Two H100s read gpt2's launch-bound bs1 tests 17-42% apart (docs/measured.md, 'A second H100, and A/B on a GPU').
UNIT_FIELDS = ("gpu_uuid", "host_cpu_brand", "host_logical_cores")


def identity_changes(stored: Mapping[str, Any], current: Mapping[str, Any],
                     fields: tuple[str, ...] = PERFORMANCE_FIELDS) -> list[str]:
    """``"cpu_family: 25 -> 26"`` for each of ``fields`` that both identities know and that differs.

    A field unknown (absent or None) on either side is not a change: an old baseline without an
    identity, or a read that failed, must not fail a test.
    """
    changes = []
    for field in fields:
        before, after = stored.get(field), current.get(field)
        if before is not None and after is not None and before != after:
            changes.append(f"{field}: {before} -> {after}")
    return changes


# Fingerprint fields whose change makes old timings incomparable (driver, CUDA, torch, cuDNN autotuning).
PERFORMANCE_RELEVANT = ("torch", "cuda", "cudnn", "cudnn_benchmark", "driver")


def fingerprint_changes(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Human lines for each performance-relevant field that differs, e.g. ``"torch 2.4.0 -> 2.5.1"``.

    A field absent from ``recorded`` (a baseline written before hwregress recorded it) is unknown, not
    changed; a field recorded as None (e.g. no CUDA then) is compared.
    """
    return [
        f"{key} {recorded.get(key)} -> {current.get(key)}"
        for key in PERFORMANCE_RELEVANT
        if key in recorded and recorded.get(key) != current.get(key)
    ]


# nvmlDeviceGetPowerUsage averages over 1 s on Ampere and newer (GA100 is instantaneous, but NVML's
# architecture does not tell GA100 from other Ampere chips: assuming the average there only loosens checks).
# Here, not in hardware.telemetry, so that judge/ reads it without loading the sampler.
POWER_AVERAGING_S = 1.0
MIG_UUID_PREFIX = "MIG-"

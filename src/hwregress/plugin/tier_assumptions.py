"""What the tier estimate (:mod:`hwregress.plugin.tier_estimate`) assumes: per-model facts measured on the development
VM (:data:`MODEL_FACTS`) and a machine's figures (:class:`Assumptions`, one preset per machine measured:
:data:`PRESETS`), each with its source.

The figures come from three kinds of source, named per field: published datasheets (peaks, bandwidth), the
development VM (a 2-core AMD EPYC, torch 2.13 CPU: build times, operator counts, the profiler's and the FLOP counter's
cost per operator), and the sessions measured on one H200 on 2026-11-26 (``tests/data/tier_durations/h200-*.json``:
pytest's wall time of each test's call; ``fixed`` below is a test's wall time less its timed window). The H200's
compute peaks equal the H100 SXM's, so the H200 figures stand for both.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from hwregress.hardware import roofline


@dataclass(frozen=True)
class ModelFacts:
    """What one workload costs regardless of the machine.

    Attributes:
        parameters: count (tied embeddings once).
        forward_gflops: forward FLOPs (2 x MACs) of one sample at ``context`` tokens (text) or 224x224 (images), GFLOP.
        forward_ops: aten operators one forward pass dispatches (batch 1), the launch-bound floor of a step.
        meta_build_s: building the module on the meta device, seconds: its Python construction cost, what a
            build on the GPU pays (the random init there takes milliseconds).
        cpu_build_s: building it on the CPU with random init, seconds (what a CPU reference pays).
        context: tokens per sample on CUDA (text), None for images.
        convolutional: its step runs cuDNN convolutions, so ``cudnn.benchmark`` searches their algorithms on the
            first call of each shape (:attr:`Assumptions.cudnn_search_steps`).
    """

    parameters: int
    forward_gflops: float
    forward_ops: int
    meta_build_s: float
    cpu_build_s: float
    context: int | None = None
    convolutional: bool = False


# Measured on the 2-core development VM (amd-epyc-f26m2-2t, torch 2.13, transformers 5.23) by
# ``scripts/gpu_tier_estimate.py --measure``: parameters and FLOPs on the meta device (transformers: FLOPs from
# hwregress.workloads.transformers' table, counted there on the meta device), aten operators of a batch-1 forward
# on the meta device (transformers: on the CPU), build times with ``time.perf_counter`` under ``nice -n 19``.
MODEL_FACTS: dict[str, ModelFacts] = {
    "alexnet": ModelFacts(61_100_840, 1.428, 23, 0.03, 0.49, convolutional=True),
    "resnet18": ModelFacts(11_689_512, 3.628, 90, 0.023, 0.21, convolutional=True),
    "resnet50": ModelFacts(25_557_032, 8.178, 229, 0.079, 0.44, convolutional=True),
    "resnet152": ModelFacts(60_192_808, 23.027, 671, 0.186, 1.19, convolutional=True),
    "vgg16": ModelFacts(138_357_544, 30.941, 41, 0.03, 2.71, convolutional=True),
    "vgg19": ModelFacts(143_667_240, 39.264, 47, 0.022, 2.95, convolutional=True),
    "densenet121": ModelFacts(7_978_856, 5.668, 553, 0.161, 0.18, convolutional=True),
    "mobilenet_v3_small": ModelFacts(2_542_856, 0.113, 192, 0.132, 0.07, convolutional=True),
    "vit_b_16": ModelFacts(86_567_656, 35.128, 706, 0.046, 1.34),
    "convnext_tiny": ModelFacts(28_589_128, 8.911, 294, 0.052, 2.38, convolutional=True),
    "bert_base": ModelFacts(109_483_778, 22.3, 487, 0.13, 2.27, 128),
    "roberta_base": ModelFacts(124_647_170, 22.3, 494, 0.132, 2.86, 128),
    "deit_small": ModelFacts(22_051_432, 9.2, 479, 0.121, 0.46),
    "gpt2": ModelFacts(124_439_808, 136.0, 487, 0.128, 4.24, 512),
    "llama_1b": ModelFacts(1_235_814_400, 1300.0, 1211, 0.083, 42.73, 512),
}

_H100 = roofline.peak_lookup("NVIDIA H100 80GB HBM3").peak
_H200 = roofline.peak_lookup("NVIDIA H200").peak


@dataclass(frozen=True)
class Assumptions:
    """One machine's figures, each a number a reader can check or change (defaults: an H100 SXM on a 16-core host).

    Attributes:
        name: the machine, as the estimate's table names it.
        gpus: GPUs of the node (two-GPU roofs are ``unsupported`` below 2).
        peak_tflops: published dense peaks per dtype, TFLOP/s (NVIDIA datasheets, :mod:`hwregress.hardware.roofline`).
        memory_tb_s: published DRAM bandwidth, TB/s (H100 SXM 3.35, H200 4.8).
        mfu: fraction of the peak an eager model step reaches: the H200 sessions measured 0.30-0.61 (resnet50 train
            bs32 0.30, bs128 0.36, infer bs256 0.46; gpt2 train 0.56, infer bs16 0.61), the first H100's 0.29-0.59
            (0.29, 0.34, 0.44; 0.53, 0.59), docs/measured.md's tables.
        bandwidth_fraction: fraction of ``memory_tb_s`` a decode step's weight reads reach.
        launch_us: host time to dispatch and launch one aten operator on CUDA, microseconds: 15.7 on the H200
            (resnet50 infer bs1, launch-bound: 3.6 ms a step for 229 operators).
        host_cpu_tflops: what the host sustains on fp32 model steps, TFLOP/s: 0.40 on the H200's 16-core Xeon (the
            speedup's CPU side, resnet50 train bs32: 16.3 samples/s x 3 x 8.18 GFLOP; the H100's host 18.5).
        host_op_us: the host's time per aten operator of an eager CPU step, microseconds: 23 on the VM
            (mobilenet_v3_small infer bs1, 226 samples/s for 192 operators, docs/measured.md).
        host_memory_gb_s: the host's copy bandwidth, GB/s (the VM's copy roof: 40.3, docs/measured.md).
        host_copy_gb_s: host-to-device copy of pageable weights, GB/s.
        first_call_s: a step's first call of a new shape besides cuDNN's search (cuBLAS workspace, kernel loads):
            bounded by gpt2 prefill bs1 on the H200, 0.32-0.35 s of fixed costs with its 0.13-s build in them.
        cudnn_search_steps: ``cudnn.benchmark``'s algorithm search on a convolutional model's first call of a shape
            (every candidate algorithm of every new convolution timed), in compute steps (the step's FLOPs at
            ``mfu``), once per shape and process: 73, from resnet50 train bs32 on the H200, 3.12 s in session 1
            (h200-s1-family.json: the speedup test before it had searched the same shapes) against 5.21-5.75 s
            first in its process in sessions 2-4 (h200-s2-update.json .. h200-s4-aa.json), 2.1 s = 73 x 29 ms. The
            H100 run (docs/measured.md, 'Measured on an H100') measured the search's memory (7.3 GiB against 2.8),
            not its time. Checked beyond that test on the same model only: train bs128 (estimated 11.6 s, measured
            11.9-12.6) and infer bs256 (8.6 s, 7.5-7.9); other architectures are an extrapolation.
        flop_counter_us: extra host time per operator under ``FlopCounterMode`` or forward hooks, microseconds: 100
            on the VM (resnet18 infer bs8: one counted pass 0.117 s against a 0.108-s step, 90 operators).
        profiler_s: starting and stopping ``torch.profiler`` (CUPTI) and summarizing, per window: bounded by resnet50
            infer bs1 on the H200, 0.64-0.86 s of fixed costs in all.
        profile_op_us: extra host time per forward operator of a profiled step, per mode, microseconds: the VM's
            profiled windows (CPU activity) took 3 steps plus 85 (infer: resnet18, gpt2) and 470 (train) per operator.
        per_test_s: the test's own bookkeeping (record, telemetry thread, judging): the H200's copy and tf32 GEMM
            roofs, 0.01-0.04 s besides their windows.
        ceiling_setup_s: allocating and filling a roof's operands: the H200's GEMM roofs, 0.03-0.14 s.
        pinned_gib_s: allocating pinned host memory, seconds per GiB, once per process: the H200's h2d roof 0.54-0.72
            s besides its window, the d2h roof after it 0.07.
        device_init_s: the first test of a device kind in a process (CUDA context, library handles), seconds: the
            H200's first test (the fp32 GEMM roof) 5.1 s besides its window on a fresh machine (session 1), 1.5-1.9 on
            a warm one (sessions 2-4), the later GEMM roofs 0.1-0.15 (their own share); the VM's first test (the
            CPU GEMM roof) 1.43 s.
        library_import_s: a model library's first use in a process (its modeling modules), seconds: transformers
            1.1-1.7 s on the VM (the first meta build of bert_base or gpt2 in a process, 0.01-0.05 s after).
        session_s: what a session's wall time (``results.json``'s ``meta.duration_s``) holds besides its tests
            (collection, configuration, the report): 0.35-0.37 s on the H200 (sessions 2-4), 0.24 on the VM.
        startup_s: interpreter start and imports before the session's clock starts: the VM's CPU tier 4.6 s
            (``time``'s 119.2 s against pytest's 114.7). Counted in the budget, not in ``meta.duration_s``.
        process_launch_s: one spawned rank of a scale-out job: interpreter, torch imports, CUDA context (README:
            5-10 s per launch measured on the CPU; the H200's W=1 scaling tests 8.1-10.3 s over the same window in
            the session's process).
        worker_launch_s: one visit worker's start (:mod:`hwregress.plugin.visits`: interpreter, torch and hwregress
            imports, its ``hello`` and its device's start): the A/B workers of the same module on the second H100, 20
            processes with their windows in 67 s, about 3 s each
            (docs/measured.md, 'A second H100, and A/B on a GPU').
        digits_cpu_s: the digits CNN's 300 CPU training steps (the CPU accuracy reference): 1.3 s on the H200's host
            (session 1's 1.65 s besides its tests, less 0.35), 1.56 on the VM (its CPU tier's digits test).
        decode_tokens: tokens a decode round generates; None: :data:`hwregress.measure.llm.window.NEW_TOKENS`.
        builds_on_device: models of a GPU window, and output parity's seeded reference weights, are drawn on the
            GPU (``meta_build_s``); False: built on the CPU (``cpu_build_s``) and copied, as before.
        shared_parity_reference: output parity's CPU reference (build and forward) is computed once per model and
            session; False: once per test.
    """

    name: str = "one H100 SXM"
    gpus: int = 1
    peak_tflops: Mapping[str, float] = field(default_factory=lambda: dict(_H100.tflops) if _H100 else {"fp32": 67.0})
    memory_tb_s: float = _H100.memory_tb_s if _H100 else 3.35
    mfu: float = 0.4
    bandwidth_fraction: float = 0.7
    launch_us: float = 15.0
    host_cpu_tflops: float = 0.40
    host_op_us: float = 23.0
    host_memory_gb_s: float = 40.0
    host_copy_gb_s: float = 10.0
    first_call_s: float = 0.2
    cudnn_search_steps: float = 73.0
    flop_counter_us: float = 100.0
    profiler_s: float = 0.3
    profile_op_us: Mapping[str, float] = field(default_factory=lambda: {"infer": 85.0, "train": 470.0})
    per_test_s: float = 0.05
    ceiling_setup_s: float = 0.1
    pinned_gib_s: float = 0.6
    device_init_s: Mapping[str, float] = field(default_factory=lambda: {"cuda": 4.9, "cpu": 1.3})
    library_import_s: Mapping[str, float] = field(default_factory=lambda: {"transformers": 1.5})
    session_s: float = 0.35
    startup_s: float = 4.6
    process_launch_s: float = 8.0
    worker_launch_s: float = 3.0
    digits_cpu_s: float = 1.3
    decode_tokens: int | None = None
    builds_on_device: bool = True
    shared_parity_reference: bool = True


H100_SXM = Assumptions()
H200_SXM = dataclasses.replace(H100_SXM, name="one H200 SXM", memory_tb_s=_H200.memory_tb_s if _H200 else 4.8)
# the development VM: 2 cores, no GPU; its model steps at the host rate of resnet18 train bs8 (25.6 samples/s x 3 x
# 3.63 GFLOP = 0.29 TFLOP/s, docs/measured.md), its digits reference as its CPU tier measured it
DEV_VM = dataclasses.replace(H100_SXM, name="the 2-core development VM", gpus=0, host_cpu_tflops=0.29,
                             digits_cpu_s=1.56, session_s=0.24)
# a second kind of 2-core development VM, an Intel Xeon at 2.5 GHz (family 6, model 85), about half as fast: its
# three tiers recorded on 2026-11-28 (tests/data/tier_durations/vm-intel-cpu-*.json): model steps 0.10-0.20 TFLOP/s
# (0.13 the median of the full tier's windows), mobilenet_v3_small infer bs1 at 74.9 samples/s for 192 operators
# (70 us an operator), a 21.8 GB/s copy roof, the digits test 3.1 s, 6.5-7.3 s between the command's start and the
# session's clock
INTEL_VM = dataclasses.replace(DEV_VM, name="the 2-core Intel development VM", host_cpu_tflops=0.13, host_op_us=70.0,
                               host_memory_gb_s=21.8, digits_cpu_s=3.1, startup_s=7.0)
# hardware key (results.json's records) -> the machine's assumptions
PRESETS: dict[str, Assumptions] = {"nvidia-h100-80gb-hbm3": H100_SXM, "nvidia-h200": H200_SXM,
                                   "amd-epyc-f26m2-2t": DEV_VM, "intel-r-xeon-r-processor-2-50ghz-f6m85-2t": INTEL_VM}


def for_hardware(key: str) -> Assumptions:
    """The preset of hardware key ``key`` (:data:`PRESETS`).

    Raises:
        KeyError: no preset for ``key``; the message lists those there are and how to add one.
    """
    try:
        return PRESETS[key]
    except KeyError:
        raise KeyError(f"no tier-estimate assumptions for hardware key {key!r} (there are: {', '.join(PRESETS)}); "
                       "add a preset to hwregress.plugin.tier_assumptions.PRESETS with its sources") from None


# the closest measured machine of a device kind without a preset of its own
NEAREST: dict[str, Assumptions] = {"cuda": H100_SXM, "cpu": DEV_VM}


def for_device(key: str, kind: str) -> tuple[Assumptions, bool]:
    """The assumptions for hardware key ``key`` of device kind ``kind`` (``cuda``, ``cpu``, ``mps``): its preset
    (:data:`PRESETS`), else the closest measured machine of the kind (:data:`NEAREST`; an MPS device: the H100's); and
    whether they are the machine's own preset."""
    if key in PRESETS:
        return PRESETS[key], True
    return NEAREST.get(kind, H100_SXM), False

"""How long the default GPU tier takes on one H100, estimated from each test's fixed costs (no GPU measured it).

Every default test pays costs that do not shrink with a faster GPU: building the model, its first call (cuDNN's
algorithm search), the warmup steps, a timed window of at least ``rounds x min_round_s``, the profiled window, the
FLOP count and the bytes pass, and, for parity and speedup, work on the host CPU (the CPU fp32 reference). This
module adds them up per test from the matrix of the session (:mod:`hwregress.plugin.matrix`), the timing plan
(:class:`hwregress.measure.timing.TimingPlan`) and per-model facts measured on the development VM (:data:`MODEL_FACTS`),
with the GPU's step times from FLOPs and published peaks. It is an estimate, not a measurement: every assumption
is a field of :class:`Assumptions` and a reader can change one and re-run ``scripts/gpu_tier_estimate.py``.

Step time on the GPU (seconds): ``max(FLOPs / (mfu x peak), aten ops x launch_us)``, the larger of the compute
time at a stated fraction of the published dense peak (H100 SXM fp32 67 TFLOP/s, bf16 989: NVIDIA H100 Tensor
Core GPU datasheet, 2023, via :mod:`hwregress.hardware.roofline`) and the host's time to dispatch and launch every
operator of an eager step; a decode step reads every weight once (``4 x parameters`` bytes at a stated fraction of
3.35 TB/s) or is launch-bound, whichever is longer. A training step is 3x the forward's FLOPs and operators.
CPU work (the speedup's CPU reference, output parity's CPU forward) runs at :attr:`Assumptions.host_cpu_tflops`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hwregress.hardware import roofline
from hwregress.measure.llm.window import DECODE_WARMUP_GENERATIONS, NEW_TOKENS
from hwregress.measure.memory_guard import GUARDED_BATCH, PROBE_BATCHES
from hwregress.measure.parity import DIGITS_STEPS, PARITY_TOKENS
from hwregress.measure.timing import TimingPlan
from hwregress.plugin.families import registry
from hwregress.plugin.matrix import Selection

BUDGET_S = 600.0  # the default GPU tier must end within 10 minutes on one GPU
H100 = roofline.peak_lookup("NVIDIA H100 80GB HBM3").peak
PARITY_SAMPLES = 8  # hwregress.measure.parity.parity_inputs: 8 images or 8 sequences
SPEEDUP_CPU_PLAN = {"warmup_steps": 1, "rounds": 5}  # hwregress.plugin.families.speedup._cpu_reference
SCALE_OUT_FAMILIES = ("scaling", "colocated")


@dataclass(frozen=True)
class ModelFacts:
    """What one workload costs regardless of the GPU.

    Attributes:
        parameters: count (tied embeddings once).
        forward_gflops: forward FLOPs (2 x MACs) of one sample at the CUDA context, GFLOP.
        forward_ops: aten operators one forward pass dispatches (batch 1), the launch-bound floor of a step.
        meta_build_s: building the module on the meta device, seconds: its Python construction cost, what a
            build on the GPU pays (the random init there takes milliseconds).
        cpu_build_s: building it on the CPU with random init, seconds (what a CPU reference pays).
        context: tokens per sample on CUDA (text), None for images.
    """

    parameters: int
    forward_gflops: float
    forward_ops: int
    meta_build_s: float
    cpu_build_s: float
    context: int | None = None


# Measured on the 2-core development VM (amd-epyc-f26m2-2t, torch 2.13, transformers 5.23) by
# ``scripts/gpu_tier_estimate.py --measure``: parameters and FLOPs on the meta device (transformers: FLOPs from
# hwregress.workloads.transformers' table, counted there on the meta device), aten operators of a batch-1 forward
# on the meta device (transformers: on the CPU), build times with ``time.perf_counter`` under ``nice -n 19``.
MODEL_FACTS: dict[str, ModelFacts] = {
    "alexnet": ModelFacts(61_100_840, 1.428, 23, 0.03, 0.49),
    "resnet18": ModelFacts(11_689_512, 3.628, 90, 0.023, 0.21),
    "resnet50": ModelFacts(25_557_032, 8.178, 229, 0.079, 0.44),
    "resnet152": ModelFacts(60_192_808, 23.027, 671, 0.186, 1.19),
    "vgg16": ModelFacts(138_357_544, 30.941, 41, 0.03, 2.71),
    "vgg19": ModelFacts(143_667_240, 39.264, 47, 0.022, 2.95),
    "densenet121": ModelFacts(7_978_856, 5.668, 553, 0.161, 0.18),
    "mobilenet_v3_small": ModelFacts(2_542_856, 0.113, 192, 0.132, 0.07),
    "vit_b_16": ModelFacts(86_567_656, 35.128, 706, 0.046, 1.34),
    "convnext_tiny": ModelFacts(28_589_128, 8.911, 294, 0.052, 2.38),
    "bert_base": ModelFacts(109_483_778, 22.3, 487, 0.13, 2.27, 128),
    "roberta_base": ModelFacts(124_647_170, 22.3, 494, 0.132, 2.86, 128),
    "deit_small": ModelFacts(22_051_432, 9.2, 479, 0.121, 0.46),
    "gpt2": ModelFacts(124_439_808, 136.0, 487, 0.128, 4.24, 512),
    "llama_1b": ModelFacts(1_235_814_400, 1300.0, 1211, 0.083, 42.73, 512),
}


@dataclass(frozen=True)
class Assumptions:
    """The estimate's assumptions, each a number a reader can check or change.

    Attributes:
        peak_tflops: published dense peaks per dtype, TFLOP/s (H100 SXM).
        memory_tb_s: published DRAM bandwidth, TB/s (H100 SXM HBM3).
        mfu: fraction of the peak an eager model step reaches (fp32 without TF32 is CUDA-core bound).
        bandwidth_fraction: fraction of ``memory_tb_s`` a decode step's weight reads reach.
        launch_us: host time to dispatch and launch one aten operator in eager mode, microseconds.
        flop_counter_us: extra host time per operator under ``FlopCounterMode`` or forward hooks, microseconds.
        host_cpu_tflops: what the GPU host's CPU sustains on fp32 model steps, TFLOP/s: 0.29 measured on the
            2-core VM (resnet18 train bs8: 26.4 samples/s x 10.9 GFLOP, baselines/amd-epyc-f26m2-2t.json)
            x 8 for the lent machine's 16 cores x 0.5 for imperfect scaling.
        host_copy_gb_s: host-to-device copy of pageable weights, GB/s.
        first_call_s: a model's first call on a new shape (cuDNN benchmark search, cuBLAS workspace, kernel loads).
        profiler_s: starting and stopping ``torch.profiler`` (CUPTI) and summarizing its events, per window.
        ceiling_setup_s: allocating and filling a roof's operands (1 GiB buffers, pinned host memory, 8192^2 GEMMs).
        per_test_s: the test's own bookkeeping (record, telemetry thread, gc and ``empty_cache``, baseline write).
        session_s: pytest start-up, imports, collection, the CUDA context and the report.
        process_launch_s: one spawned rank of a scale-out job: interpreter, torch imports, CUDA context (README:
            5-10 s per launch measured on the CPU).
        digits_cpu_s: the digits CNN's 300 CPU training steps (the CPU accuracy reference), seconds.
        decode_tokens: tokens a CUDA decode round generates (:data:`hwregress.measure.llm.window.NEW_TOKENS`).
        builds_on_device: models of a GPU window, and output parity's seeded reference weights, are drawn on the
            GPU (``meta_build_s``); False: built on the CPU (``cpu_build_s``) and copied, as before.
        shared_parity_reference: output parity's CPU reference (build and forward) is computed once per model and
            session; False: once per test.
    """

    peak_tflops: Mapping[str, float] = field(default_factory=lambda: dict(H100.tflops) if H100 else {"fp32": 67.0})
    memory_tb_s: float = H100.memory_tb_s if H100 else 3.35
    mfu: float = 0.4
    bandwidth_fraction: float = 0.7
    launch_us: float = 15.0
    flop_counter_us: float = 100.0
    host_cpu_tflops: float = 0.29 * 8 * 0.5
    host_copy_gb_s: float = 10.0
    first_call_s: float = 0.5
    profiler_s: float = 0.5
    ceiling_setup_s: float = 1.0
    per_test_s: float = 0.3
    session_s: float = 25.0
    process_launch_s: float = 8.0
    digits_cpu_s: float = 10.0
    decode_tokens: int = NEW_TOKENS["cuda"]
    builds_on_device: bool = True
    shared_parity_reference: bool = True


@dataclass
class FamilyEstimate:
    """One family's row: tests, fixed seconds (everything but the timed windows), timed seconds."""

    family: str
    tests: int = 0
    fixed_s: float = 0.0
    timed_s: float = 0.0

    @property
    def total_s(self) -> float:
        return self.fixed_s + self.timed_s


@dataclass
class TierEstimate:
    """The estimate of a tier: rows per family and the session's own start-up."""

    rows: dict[str, FamilyEstimate]
    session_s: float

    @property
    def tests(self) -> int:
        return sum(row.tests for row in self.rows.values())

    @property
    def total_s(self) -> float:
        return self.session_s + sum(row.total_s for row in self.rows.values())


def default_gpu_cases(device: str = "cuda:0") -> dict[str, list[dict[str, Any]]]:
    """The default tier's cases on one GPU, per built-in family: what ``pytest -m gpu`` collects on a one-GPU node
    (``--dtypes fp32``, no opt-in family)."""
    selection = Selection([device])
    return {family.name: family.cases(selection) for family in registry.BUILT_IN}


def estimate(cases: Mapping[str, Iterable[dict[str, Any]]], assumptions: Assumptions | None = None,
             plan: TimingPlan | None = None, profile_steps: int = 3) -> TierEstimate:
    """The seconds of ``cases`` (family -> parameter sets, as :func:`hwregress.plugin.families.registry.cases` gives
    them) on one H100, per family.

    Raises:
        KeyError: a case's workload has no :data:`MODEL_FACTS` entry (measure it with the script's ``--measure``).
    """
    model = _CostModel(assumptions or Assumptions(), plan or TimingPlan(), profile_steps)
    rows = {}
    for family, family_cases in cases.items():
        row = FamilyEstimate(family)
        for case in family_cases:
            fixed, timed = model.case(family, case)
            row.tests += 1
            row.fixed_s += fixed
            row.timed_s += timed
        if row.tests:
            rows[family] = row
    return TierEstimate(rows, model.assumptions.session_s)


class _CostModel:
    """Seconds per case; costs paid once per session (a CPU reference) are charged to the first case needing them."""

    def __init__(self, assumptions: Assumptions, plan: TimingPlan, profile_steps: int) -> None:
        self.assumptions = assumptions
        self.plan = plan
        self.profile_steps = profile_steps
        self.paid: set[tuple[Any, ...]] = set()

    def case(self, family: str, case: dict[str, Any]) -> tuple[float, float]:
        if family == "throughput":
            if case["mode"] in ("prefill", "decode"):
                return self._serving(case)
            return self._throughput(case["workload"], case["mode"], case["batch_size"], profiled=True)
        if family == "speedup":
            fixed, timed = self._throughput(case["workload"], "train", case["batch_size"], profiled=False)
            return fixed + self._cpu_speedup_reference(case["workload"], case["batch_size"]), timed
        if family == "output-parity":
            return self._output_parity(case["workload"], case["dtype"]), 0.0
        if family == "parity":
            return self._digits(), 0.0
        if family == "ceiling":
            return self._ceiling(case)
        if family == "scaling":
            fixed, timed = self._throughput("resnet50" if not case.get("workload") else case["workload"], "train",
                                            case["batch_size"], profiled=True)
            return fixed + self.assumptions.process_launch_s * case["world_size"], timed
        if family == "colocated":
            members = case["members"].split("+")
            solo_fixed, solo_timed = self._throughput(members[0], "train", case["batch_size"], profiled=True)
            # the group shares the GPU: its rounds take as long as the members' steps together
            together_timed = solo_timed * len(members)
            launches = (1 + len(members)) * self.assumptions.process_launch_s
            return launches + 2 * solo_fixed, solo_timed + together_timed
        raise ValueError(f"no cost model for test family {family!r}")

    # -- GPU step times -------------------------------------------------------------------------------
    def _facts(self, name: str) -> ModelFacts:
        try:
            return MODEL_FACTS[name]
        except KeyError:
            raise KeyError(f"no facts for workload {name!r} in hwregress.plugin.tier_estimate.MODEL_FACTS; measure "
                           "them with scripts/gpu_tier_estimate.py --measure and add a row") from None

    def _step_s(self, name: str, mode: str, batch: int, dtype: str = "fp32") -> float:
        facts = self._facts(name)
        passes = 3 if mode == "train" else 1
        compute = passes * facts.forward_gflops * 1e9 * batch / (self.assumptions.mfu * self._peak(dtype) * 1e12)
        return max(compute, passes * facts.forward_ops * self.assumptions.launch_us * 1e-6)

    def _peak(self, dtype: str) -> float:
        return float(self.assumptions.peak_tflops.get(dtype, self.assumptions.peak_tflops["fp32"]))

    def _build_s(self, name: str) -> float:
        facts = self._facts(name)
        if self.assumptions.builds_on_device:
            return facts.meta_build_s
        return facts.cpu_build_s + self._copy_s(name)

    def _copy_s(self, name: str) -> float:
        return 4 * self._facts(name).parameters / (self.assumptions.host_copy_gb_s * 1e9)

    def _window_s(self, step: float) -> float:
        """A timed window without extension: ``rounds`` rounds of ``ceil(min_round_s / step)`` steps."""
        return self.plan.rounds * math.ceil(self.plan.min_round_s / step) * step

    def _counting_s(self, name: str, mode: str, step: float) -> float:
        """One pass under the FLOP counter (or forward hooks): the step plus the per-operator overhead."""
        passes = 3 if mode == "train" else 1
        return step + passes * self._facts(name).forward_ops * self.assumptions.flop_counter_us * 1e-6

    # -- families -------------------------------------------------------------------------------------
    def _throughput(self, name: str, mode: str, batch: int, profiled: bool) -> tuple[float, float]:
        a = self.assumptions
        step = self._step_s(name, mode, batch)
        fixed = self._build_s(name) + a.first_call_s + self.plan.warmup_steps * step + a.per_test_s
        if profiled and self.profile_steps > 0:
            profile = a.profiler_s + self.profile_steps * step
            flops = self._counting_s(name, mode, step)
            moved = self._counting_s(name, "infer", self._step_s(name, "infer", batch))  # the bytes pass: one forward
            fixed += profile + flops + moved
        return fixed, self._window_s(step)

    def _serving(self, case: dict[str, Any]) -> tuple[float, float]:
        """Prefill: ``warmup_steps`` + ``rounds`` prompt passes; decode: ``DECODE_WARMUP_GENERATIONS`` + ``rounds``
        generations of ``decode_tokens`` tokens (a prompt pass, then one launch-bound or weight-bound step per token);
        one more under the counter."""
        a, name, batch = self.assumptions, case["workload"], case["batch_size"]
        facts = self._facts(name)
        prompt = self._step_s(name, "infer", batch)
        fixed = self._build_s(name) + a.first_call_s + a.per_test_s
        if case["mode"] == "prefill":
            counted = self._counting_s(name, "infer", prompt) if self.profile_steps > 0 else 0.0
            return fixed + self.plan.warmup_steps * prompt + counted, self.plan.rounds * prompt
        tokens = a.decode_tokens
        weights = 4 * facts.parameters / (a.bandwidth_fraction * a.memory_tb_s * 1e12)
        token_step = max(weights, facts.forward_ops * a.launch_us * 1e-6)
        generation = prompt + (tokens - 1) * token_step
        counted = ((generation + tokens * facts.forward_ops * a.flop_counter_us * 1e-6) if self.profile_steps > 0
                   else 0.0)
        return fixed + DECODE_WARMUP_GENERATIONS * generation + counted, self.plan.rounds * generation

    def _cpu_step_s(self, name: str, mode: str, batch: int) -> float:
        passes = 3 if mode == "train" else 1
        return passes * self._facts(name).forward_gflops * 1e9 * batch / (self.assumptions.host_cpu_tflops * 1e12)

    def _cpu_speedup_reference(self, name: str, batch: int) -> float:
        """The speedup's CPU side, once per model, batch and session (hwregress.measure.host_reference): the host-memory
        guard's probes above ``GUARDED_BATCH`` (a build and a step each), a build, 1 calibration step and 5 rounds."""
        if ("speedup", name, batch) in self.paid:
            return 0.0
        self.paid.add(("speedup", name, batch))
        facts, step = self._facts(name), self._cpu_step_s(name, "train", batch)
        probes = sum(facts.cpu_build_s + self._cpu_step_s(name, "train", b) for b in PROBE_BATCHES) \
            if batch > GUARDED_BATCH else 0.0
        rounds = SPEEDUP_CPU_PLAN["rounds"] * math.ceil(self.plan.min_round_s / step) * step
        return probes + facts.cpu_build_s + SPEEDUP_CPU_PLAN["warmup_steps"] * step + rounds

    def _output_parity(self, name: str, dtype: str) -> float:
        """The CPU fp32 reference (a seeded CPU build and a forward over 8 samples) and the device's copy of it."""
        a, facts = self.assumptions, self._facts(name)
        fixed = a.first_call_s + a.per_test_s
        if a.builds_on_device:  # the device copy is built on the device and the reference's weights copied in
            fixed += facts.meta_build_s + self._copy_s(name)
        else:  # a deepcopy of the CPU reference (about a build) and its copy to the device
            fixed += facts.cpu_build_s + self._copy_s(name)
        if a.shared_parity_reference and ("output-parity", name) in self.paid:
            return fixed
        self.paid.add(("output-parity", name))
        # the reference: seeded weights drawn on the device and copied to the CPU (else a CPU build), a CPU forward
        build = facts.meta_build_s + self._copy_s(name) if a.builds_on_device else facts.cpu_build_s
        tokens = min(PARITY_TOKENS, facts.context) / facts.context if facts.context else 1.0
        forward = facts.forward_gflops * 1e9 * PARITY_SAMPLES * tokens / (a.host_cpu_tflops * 1e12)
        return fixed + build + forward

    def _digits(self) -> float:
        """300 Adam steps of a tiny CNN on the GPU (launch-bound: ~40 operators forward, 3x with backward and Adam)
        and, once per session, the same on the CPU."""
        a = self.assumptions
        gpu = DIGITS_STEPS * 3 * 40 * a.launch_us * 1e-6 + a.first_call_s + a.per_test_s
        if "digits" in self.paid:
            return gpu
        self.paid.add("digits")
        return gpu + a.digits_cpu_s

    def _ceiling(self, case: dict[str, Any]) -> tuple[float, float]:
        """A roof: its operands, the warmup and a window of rounds >= ``min_round_s``; ``p2p`` and ``allreduce``
        are unsupported on one GPU (a skip)."""
        a, name = self.assumptions, case["ceiling"]
        if name in ("p2p", "allreduce"):
            return a.per_test_s, 0.0
        gib = 2**30
        if name == "gemm":
            step = 2 * 8192**3 / (self._peak(case["dtype"]) * 0.8 * 1e12)
        elif name == "copy":
            step = 2 * gib / (a.memory_tb_s * 0.9 * 1e12)
        else:  # h2d, d2h over PCIe Gen5 x16 (~50 GB/s pinned)
            step = gib / 50e9
        return a.ceiling_setup_s + a.first_call_s + self.plan.warmup_steps * step + a.per_test_s, self._window_s(step)


def table(result: TierEstimate, budget_s: float = BUDGET_S) -> str:
    """The estimate as a Markdown table: family, tests, fixed s, timed s, total s; then the session and the total."""
    lines = ["| family | tests | fixed s | timed s | total s |", "| --- | ---: | ---: | ---: | ---: |"]
    for row in result.rows.values():
        lines.append(f"| {row.family} | {row.tests} | {row.fixed_s:.0f} | {row.timed_s:.0f} | {row.total_s:.0f} |")
    lines.append(f"| session start-up and report | | {result.session_s:.0f} | | {result.session_s:.0f} |")
    lines.append(f"| **total** | **{result.tests}** | | | **{result.total_s:.0f}** (budget {budget_s:.0f}) |")
    return "\n".join(lines)

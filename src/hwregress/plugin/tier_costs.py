"""Seconds of the work a test does: the building blocks of each family's ``estimated_cost`` (the tier estimate,
:mod:`hwregress.plugin.tier_estimate`), under one machine's :class:`hwregress.plugin.tier_assumptions.Assumptions`.

A test's cost is its fixed seconds (builds, first calls, warmup, the profiled and counted passes, bookkeeping), its
timed window, and work it causes that its record does not time. What a process pays once (the device's start, a
model library's import, cuDNN's search of a shape) is charged to the first test that needs it in that process, and
what a session pays once (a CPU reference shared under a lock) to the first test of the session; a spawned job's
ranks are processes of their own (:meth:`CostModel.job`). So the order of the tests matters: pytest's order.

Step time (seconds): ``max(FLOPs / (mfu x peak), operators x launch_us)`` on a GPU, the larger of the compute at a
fraction of the published dense peak and the host's dispatch of every operator of an eager step; on the CPU
``max(FLOPs / host_cpu_tflops, operators x host_op_us)``. A training step is 3x the forward's FLOPs and operators. A
decode step reads every fp32 weight once or is launch-bound, whichever is longer.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from hwregress import workloads
from hwregress.hardware.facts import device_kind
from hwregress.measure.llm.window import DECODE_WARMUP_GENERATIONS, NEW_TOKENS
from hwregress.measure.memory_guard import GUARDED_BATCH, PROBE_BATCHES
from hwregress.measure.parity import DIGITS_STEPS, PARITY_TOKENS
from hwregress.measure.timing import TimingPlan
from hwregress.plugin.matrix import case_id
from hwregress.plugin.tier_assumptions import MODEL_FACTS, Assumptions, ModelFacts

PARITY_SAMPLES = 8  # hwregress.measure.parity.parity_inputs: 8 images or 8 sequences
SPEEDUP_CPU_PLAN = TimingPlan(warmup_steps=1, rounds=5)  # hwregress.plugin.families.speedup._cpu_reference
DIGITS_STEP_OPS = 134  # aten operators of one digits training step (forward, loss, backward, Adam; counted on the VM)


@dataclass(frozen=True)
class Cost:
    """One test's seconds.

    Attributes:
        fixed_s: everything but the timed window.
        timed_s: the timed window at the plan's minimum (a noisy window's extension comes on top).
        untimed_s: work the test causes that its record's ``duration_s`` leaves out (the digits test times its
            training alone, not the CPU reference it then asks for).
    """

    fixed_s: float = 0.0
    timed_s: float = 0.0
    untimed_s: float = 0.0

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.fixed_s + other.fixed_s, self.timed_s + other.timed_s, self.untimed_s + other.untimed_s)

    @property
    def total_s(self) -> float:
        """What the test's record times: fixed and timed seconds."""
        return self.fixed_s + self.timed_s


def not_estimated(case: dict[str, Any], why: str) -> ValueError:
    """The error a family's ``estimated_cost`` raises for a case it cannot estimate: it names the case and why."""
    return ValueError(f"the tier estimate has no cost for {case_id(case)}: {why}")


class CostModel:
    """Seconds of the parts of a test on one machine, under the session's ``--visits`` (``visits``; None: auto);
    remembers what this process and the session have paid."""

    def __init__(self, assumptions: Assumptions, plan: TimingPlan | None = None, profile_steps: int = 3,
                 session_paid: set[Hashable] | None = None, visits: int | None = None) -> None:
        self.a = assumptions
        self.plan = plan or TimingPlan()
        self.profile_steps = profile_steps
        self.visits_setting = visits  # --visits (None: auto), which launch-bound windows get visits
        self.process_paid: set[Hashable] = set()
        self.session_paid: set[Hashable] = set() if session_paid is None else session_paid
        self.visit_workers: list[CostModel] = []  # the session's visit workers, each a process of its own

    def once(self, key: Hashable, seconds: float, per_session: bool = False) -> float:
        """``seconds`` the first time ``key`` is asked for in this process (or session), 0 after."""
        paid = self.session_paid if per_session else self.process_paid
        if key in paid:
            return 0.0
        paid.add(key)
        return seconds

    def spawned(self) -> CostModel:
        """A spawned process of this session: nothing of this process paid, its launch (``process_launch_s``)
        includes the device's start."""
        process = CostModel(self.a, self.plan, self.profile_steps, self.session_paid)
        process.process_paid.update({("device", "cuda"), ("device", "cpu")})
        return process

    # -- step times -------------------------------------------------------------------------------------
    def facts(self, name: str) -> ModelFacts:
        """The :data:`MODEL_FACTS` row of workload ``name``.

        Raises:
            KeyError: no row; the message says how to measure one.
        """
        try:
            return MODEL_FACTS[name]
        except KeyError:
            raise KeyError(f"no facts for workload {name!r} in hwregress.plugin.tier_assumptions.MODEL_FACTS; measure "
                           "them with scripts/gpu_tier_estimate.py --measure and add a row") from None

    def compute_s(self, name: str, mode: str, batch: int, device: str, dtype: str = "fp32",
                  context: int | None = None) -> float:
        """A step's FLOPs at the device's sustained rate (``context``: tokens per sample, the facts' when None)."""
        facts = self.facts(name)
        tokens = context / facts.context if context and facts.context else 1.0
        flops = (3 if mode == "train" else 1) * facts.forward_gflops * 1e9 * batch * tokens
        return flops / (self.tflops(dtype, device) * 1e12)

    def step_s(self, name: str, mode: str, batch: int, device: str, dtype: str = "fp32",
               context: int | None = None) -> float:
        """One step: compute or the operators' dispatch, whichever is longer."""
        return max(self.compute_s(name, mode, batch, device, dtype, context), self.dispatch_s(name, mode, device))

    def dispatch_s(self, name: str, mode: str, device: str) -> float:
        """The host's dispatch of one step's operators."""
        per_op = self.a.host_op_us if device_kind(device) == "cpu" else self.a.launch_us
        return (3 if mode == "train" else 1) * self.facts(name).forward_ops * per_op * 1e-6

    def tflops(self, dtype: str, device: str) -> float:
        """What a model step sustains, TFLOP/s: the host's rate on the CPU, ``mfu`` x the dtype's peak elsewhere."""
        if device_kind(device) == "cpu":
            return self.a.host_cpu_tflops
        return self.a.mfu * self.peak_tflops(dtype, device)

    def peak_tflops(self, dtype: str, device: str) -> float:
        """The dtype's published dense peak, TFLOP/s (fp32's for a dtype without one); the host's rate on the CPU."""
        if device_kind(device) == "cpu":
            return self.a.host_cpu_tflops
        return float(self.a.peak_tflops.get(dtype, self.a.peak_tflops["fp32"]))

    def memory_bytes_s(self, device: str) -> float:
        """The device's memory bandwidth, bytes/s (published; the host's measured copy rate on the CPU)."""
        return self.a.host_memory_gb_s * 1e9 if device_kind(device) == "cpu" else self.a.memory_tb_s * 1e12

    def window_s(self, step: float, plan: TimingPlan | None = None) -> float:
        """A timed window without extension: ``rounds`` rounds of ``ceil(min_round_s / step)`` steps."""
        plan = plan or self.plan
        return plan.rounds * math.ceil(plan.min_round_s / step) * step

    # -- the parts of a test ----------------------------------------------------------------------------
    def start(self, device: str, name: str | None = None) -> float:
        """The device's start in this process and, for ``name``, its model library's first import."""
        seconds = self.once(("device", device_kind(device)), self.a.device_init_s.get(device_kind(device), 0.0))
        if name is not None:
            library = workloads.get(name).source.split(" ", 1)[0]  # "transformers GPT2Config (...)"
            seconds += self.once(("import", library), self.a.library_import_s.get(library, 0.0))
        return seconds

    def build_s(self, name: str, device: str) -> float:
        """A model built for ``device``: drawn on it (GPU), or on the CPU and copied."""
        facts = self.facts(name)
        if device_kind(device) == "cpu":
            return facts.cpu_build_s
        if self.a.builds_on_device:
            return facts.meta_build_s
        return facts.cpu_build_s + self.copy_s(name)

    def copy_s(self, name: str) -> float:
        """The model's fp32 weights between host and device."""
        return 4 * self.facts(name).parameters / (self.a.host_copy_gb_s * 1e9)

    def first_call_s(self, name: str, mode: str, batch: int, device: str, dtype: str = "fp32") -> float:
        """A step's first call: ``first_call_s``, and on CUDA for a convolutional model cuDNN's search of the shape,
        once per process."""
        seconds = self.a.first_call_s
        if device_kind(device) == "cuda" and self.facts(name).convolutional:
            search = self.a.cudnn_search_steps * self.compute_s(name, mode, batch, device, dtype)
            seconds += self.once(("cudnn", name, mode, batch, dtype), search)
        return seconds

    def counted_s(self, name: str, mode: str, step: float) -> float:
        """One pass under the FLOP counter (or forward hooks): the step plus the per-operator overhead."""
        return step + (3 if mode == "train" else 1) * self.facts(name).forward_ops * self.a.flop_counter_us * 1e-6

    def model_window(self, name: str, mode: str, batch: int, device: str, dtype: str = "fp32",
                     context: int | None = None, *, profile: bool = True, count: bool = True,
                     plan: TimingPlan | None = None) -> Cost:
        """A model's window (:func:`hwregress.measure.window.run_model`): the host-memory guard's probes (CPU,
        batches above ``GUARDED_BATCH``), the build, the first call, the warmup, the timed window, then a profiled
        window (``profile``) and the FLOP count and bytes pass (``count``) when the session profiles."""
        plan = plan or self.plan
        step = self.step_s(name, mode, batch, device, dtype, context)
        built = self.start(device, name) + self.build_s(name, device) + self.a.per_test_s
        fixed = built + self.first_call_s(name, mode, batch, device, dtype) + plan.warmup_steps * step
        if device_kind(device) == "cpu" and batch > GUARDED_BATCH:
            fixed += sum(self.facts(name).cpu_build_s + self.step_s(name, mode, b, device) for b in PROBE_BATCHES)
        if profile and self.profile_steps > 0:
            op_s = self.facts(name).forward_ops * self.a.profile_op_us.get(mode, 0.0) * 1e-6
            fixed += self.a.profiler_s + self.profile_steps * (step + op_s)
        if count and self.profile_steps > 0:
            forward = self.step_s(name, "infer", batch, device, dtype, context)
            fixed += self.counted_s(name, mode, step) + self.counted_s(name, "infer", forward)
        return Cost(fixed, self.window_s(step, plan))

    def serving(self, name: str, mode: str, batch: int, device: str, dtype: str = "fp32",
                context: int | None = None) -> Cost:
        """Prefill: ``warmup_steps`` + ``rounds`` prompt passes, one more counted; decode: ``DECODE_WARMUP_GENERATIONS``
        + ``rounds`` generations of ``decode_tokens`` (a prompt pass, then one step per token, weight- or
        launch-bound), the prompt pass and a generation counted (:mod:`hwregress.measure.llm.window`)."""
        facts, kind = self.facts(name), device_kind(device)
        prompt = self.step_s(name, "infer", batch, device, dtype, context)
        fixed = self.start(device, name) + self.build_s(name, device) + self.a.first_call_s + self.a.per_test_s
        counting = self.profile_steps > 0
        if mode == "prefill":
            counted = self.counted_s(name, "infer", prompt) if counting else 0.0
            return Cost(fixed + self.plan.warmup_steps * prompt + counted, self.plan.rounds * prompt)
        tokens = self.a.decode_tokens or NEW_TOKENS.get(kind, NEW_TOKENS["cuda"])
        fraction = 1.0 if kind == "cpu" else self.a.bandwidth_fraction
        weights = 4 * facts.parameters / (fraction * self.memory_bytes_s(device))
        token = max(weights, self.dispatch_s(name, "infer", device), self.compute_s(name, "infer", batch, device,
                                                                                    dtype, 1))
        generation = prompt + (tokens - 1) * token
        counted = 0.0
        if counting:
            counted = self.counted_s(name, "infer", prompt) + generation + tokens * self.counted_s(name, "infer", 0.0)
        return Cost(fixed + DECODE_WARMUP_GENERATIONS * generation + counted, self.plan.rounds * generation)

    def cpu_reference(self, name: str, mode: str, batch: int) -> Cost:
        """The speedup's CPU side, once per model, batch and session (:mod:`hwregress.measure.host_reference`): a CPU
        window of 1 warmup step and 5 rounds, unprofiled."""
        if ("cpu-reference", name, mode, batch) in self.session_paid:
            return Cost()
        self.session_paid.add(("cpu-reference", name, mode, batch))
        window = self.model_window(name, mode, batch, "cpu", profile=False, count=False, plan=SPEEDUP_CPU_PLAN)
        return Cost(window.total_s)

    def output_parity(self, name: str, dtype: str, device: str) -> Cost:
        """Output parity (:func:`hwregress.measure.parity.output_parity`): the CPU fp32 reference (seeded weights and a
        forward over 8 samples of ``PARITY_TOKENS`` tokens), once per model and session, then the device's copy of
        it and its forward (on the CPU the copy is a deepcopy)."""
        a, facts, kind = self.a, self.facts(name), device_kind(device)
        tokens = min(PARITY_TOKENS, facts.context) / facts.context if facts.context else 1.0
        cpu_forward = facts.forward_gflops * 1e9 * PARITY_SAMPLES * tokens / (a.host_cpu_tflops * 1e12)
        fixed = self.start(device, name) + a.per_test_s
        if kind == "cpu":
            fixed += 4 * facts.parameters / self.memory_bytes_s("cpu") + cpu_forward + a.first_call_s
        else:
            forward = self.step_s(name, "infer", PARITY_SAMPLES, device, dtype, facts.context and PARITY_TOKENS)
            fixed += (self.build_s(name, device) + self.copy_s(name) + forward
                      + self.first_call_s(name, "infer", PARITY_SAMPLES, device, dtype))
        if a.shared_parity_reference and ("output-parity", name) in self.session_paid:
            return Cost(fixed)
        self.session_paid.add(("output-parity", name))
        # seeded weights drawn on the device and copied to the CPU (a CPU build on the CPU or before), a CPU forward
        build = facts.meta_build_s + self.copy_s(name) if a.builds_on_device and kind != "cpu" else facts.cpu_build_s
        return Cost(fixed + build + cpu_forward)

    def digits(self, device: str) -> Cost:
        """The digits CNN's 300 Adam steps on ``device`` (launch-bound on a GPU), which its record times alone, and
        off the CPU the CPU's accuracy, trained once per session after that timing."""
        if device_kind(device) == "cpu":
            self.session_paid.add("digits-cpu")
            return Cost(self.start(device) + self.a.digits_cpu_s)
        training = DIGITS_STEPS * DIGITS_STEP_OPS * self.a.launch_us * 1e-6 + self.a.first_call_s
        return Cost(self.start(device) + training, 0.0, self.once("digits-cpu", self.a.digits_cpu_s, per_session=True))

    def roof(self, device: str, setup_s: float, step: float) -> Cost:
        """A roof (:func:`hwregress.measure.ceilings.run_ceiling`): its operands, the warmup and a timed window."""
        fixed = self.start(device) + setup_s + self.plan.warmup_steps * step + self.a.per_test_s
        return Cost(fixed, self.window_s(step))

    def pinned_s(self, gib: float) -> float:
        """Pinned host memory of ``gib`` GiB, allocated once per process (the caching host allocator keeps it)."""
        return self.once("pinned", self.a.pinned_gib_s * gib)

    def unsupported(self) -> Cost:
        """A test that ends ``unsupported`` before measuring."""
        return Cost(self.a.per_test_s)

    def visits(self, name: str, mode: str, batch: int, device: str, dtype: str = "fp32", context: int | None = None,
               count: int = 1) -> Cost:
        """A launch-bound test's ``count - 1`` visits (:mod:`hwregress.measure.visits`), one in each of the session's
        visit workers: a worker's start (``worker_launch_s``, its device's start in it) the first time it is needed,
        then per visit its model's library once per worker, the build, first call, warmup and a window of the plan's
        rounds, unprofiled. The plugin takes them between other tests (:mod:`hwregress.plugin.visits`), so they are
        work the test's record does not time (``untimed_s``)."""
        seconds = 0.0
        for index in range(count - 1):
            while len(self.visit_workers) <= index:
                worker = CostModel(self.a, self.plan, 0, self.session_paid)
                worker.process_paid.update({("device", "cuda"), ("device", "cpu")})  # in worker_launch_s
                self.visit_workers.append(worker)
                seconds += self.a.worker_launch_s
            worker = self.visit_workers[index]  # profile_steps 0: a visit is neither profiled nor counted
            if mode in ("prefill", "decode"):
                seconds += worker.serving(name, mode, batch, device, dtype, context).total_s
            else:
                seconds += worker.model_window(name, mode, batch, device, dtype, context).total_s
        return Cost(untimed_s=seconds)

    def job(self, rank: Callable[[CostModel], Cost], sharing: int = 1) -> Cost:
        """A spawned job: its ranks start together (one ``process_launch_s``), each in a process of its own running
        ``rank``'s work; ``sharing`` ranks on one device take turns on it, so its work takes that many times as long."""
        one = rank(self.spawned())
        return Cost(self.a.process_launch_s + sharing * one.fixed_s, sharing * one.timed_s)

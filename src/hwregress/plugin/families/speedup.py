"""The ``speedup`` family: the seed studies' central question, answered in one run: a model's training throughput on
a CUDA device over the host CPU's in the same session, judged against the baseline speedup."""

from __future__ import annotations

import dataclasses
from typing import Any

from hwregress import workloads
from hwregress.hardware.facts import device_kind
from hwregress.hardware.identity import device_identity
from hwregress.measure import host_reference
from hwregress.measure.record import window_figures
from hwregress.plugin.context import BenchContext
from hwregress.plugin.families.model_window import model_window
from hwregress.plugin.matrix import Selection, batch_sizes_for, models_for, numeric
from hwregress.plugin.tier_costs import Cost, CostModel
from hwregress.plugin.xdist import session_temp
from hwregress.store.assembly import put_measured
from hwregress.store.baseline_file import entry_key
from hwregress.store.measured import MeasuredFigures
from hwregress.store.results import TestRecord
from hwregress.summary import summarize


class Speedup:
    """The ``speedup`` family (:class:`hwregress.plugin.families.protocol.Family`)."""

    name = "speedup"
    marker = "speedup"
    marker_help = "GPU/CPU throughput ratio measured in one session"
    requires: frozenset[str] = frozenset()
    sub_records: tuple[str, ...] = ()
    view = None  # the report's speedup chart is the session's own

    def cases(self, selection: Selection) -> list[dict[str, Any]]:
        """CUDA devices x image models (a GPT's CPU side takes hours; of a tier, the models it names for the speedup),
        the smallest numeric train batch, fp32."""
        return [{"device": device, "workload": m, "mode": "train",
                 "batch_size": min(numeric(batch_sizes_for(selection, device, "train", m)) or [1]), "dtype": "fp32"}
                for device in selection.devices if device_kind(device) == "cuda"
                for m in models_for(selection, device, self.name) if workloads.get(m).input_kind == "images"]

    def measure(self, bench: BenchContext, *, device: str, workload: str, batch_size: int, dtype: str = "fp32",
                mode: str = "train") -> TestRecord:
        """Measure ``workload`` training (``mode``, as its cases give it) on ``device`` and on the CPU in this session;
        judge the speedup."""
        record = bench.start(self.name, device, workload, mode, batch_size, dtype)
        # the speedup depends on the host CPU too
        put_measured(record, MeasuredFigures(identity=device_identity("cpu")))
        key = entry_key(self.name, workload, mode, batch_size, dtype)
        gpu = window_figures(record, model_window(bench, record, workload, device, mode, batch_size, dtype,
                                                  bench.round_driver(), profile_steps=0,
                                                  settled=bench.window_check(record, key)))
        put_measured(record, gpu)  # a CPU side that fails leaves the GPU's window on the record
        cpu_samples = _cpu_reference(bench, record, workload, mode, batch_size, dtype)
        cpu_median = summarize(cpu_samples).median
        put_measured(record, MeasuredFigures(speedup=gpu.throughput / cpu_median if gpu.throughput else None,
                                             details={"cpu_throughput": cpu_median}, reference_samples=cpu_samples))
        return bench.conclude(record, key)

    def estimated_cost(self, case: dict[str, Any], cost: CostModel) -> Cost:
        """The GPU window, unprofiled, and the CPU side once per model and batch in the session."""
        name, mode, batch = case["workload"], case.get("mode", "train"), case["batch_size"]
        return (cost.model_window(name, mode, batch, case["device"], case["dtype"], profile=False, count=False)
                + cost.cpu_reference(name, mode, batch))


def _cpu_reference(bench: BenchContext, record: TestRecord, model: str, mode: str, batch_size: int,
                   dtype: str) -> list[float]:
    """The CPU side of a speedup, measured once per session and shared by every worker under a lock, so workers never
    run it at the same time with every core (``hwregress.measure.host_reference``)."""
    # the CPU side of a GPU-sized batch is slow: one warmup step and the minimum of rounds
    cpu_plan = dataclasses.replace(bench.settings.plan, warmup_steps=1, rounds=5)

    def measure() -> list[float]:
        return model_window(bench, record, model, "cpu", mode, batch_size, dtype, None, cpu_plan,
                            profile_steps=0).throughput_samples

    return host_reference.measured_once(f"{model}/{mode}/bs{batch_size}/{dtype}", measure,
                                        session_temp(bench.request) / "hwregress-cpu-reference")


FAMILY = Speedup()

"""One rank of a data-parallel scaling job: the workload wrapped in ``DistributedDataParallel``, its training
window timed with the suite's discipline (warmup, calibrated rounds, device-synchronized timing, planned looks against
the baseline or, without one, noise-driven extension) where every decision is the job's (the maximum over ranks), then
a short profiled window for the communication share, and DDP's own account of its gradient buckets."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from hwregress.hardware.devices import synchronize
from hwregress.hardware.facts import device_kind
from hwregress.judge.window_verdict import check_from_terms
from hwregress.measure.memory import PeakMemoryMeter
from hwregress.measure.timing import TimingPlan, default_timer, in_work_units, measure
from hwregress.measure.window import build_step, prepare_process
from hwregress.scaleout.comm_profile import communication_share
from hwregress.scaleout.rank_timing import HeartbeatTimer, agree_on_max, job_window, window_report
from hwregress.workloads import get, make_batch

if TYPE_CHECKING:
    from hwregress.scaleout.job import JobSpec
    from hwregress.scaleout.rank import RankContext


def measure_rank(spec: JobSpec, context: RankContext) -> dict[str, Any]:
    """This rank's training window: per-round seconds, peak memory, the profiled communication share, and DDP's
    buckets. Every rank trains on a batch of the same shape. Judged against a baseline (``spec.verdict``), each rank
    looks at the job's throughput as its own steps imply it (world size x its work per step / its step seconds; DDP's
    all-reduce keeps the ranks' steps together) and the job takes each look's decision together."""
    device = context.device
    workload = get(spec.models[0])
    prepare_process(device)
    with PeakMemoryMeter(device) as memory:
        model = workload.build().to(device)
        ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[torch.device(device).index]
                                                        if device_kind(device) == "cuda" else None)
        inputs, labels = make_batch(workload, spec.batch_size, device)
        step = build_step(workload, ddp, "train", inputs, labels, device, spec.dtype)
        context.on_warmup()
        timer = HeartbeatTimer(default_timer(device), lambda index: context.on_round(index, spec.plan.get("rounds")))
        window = job_window(device, spec.telemetry_interval_s)
        job_work_per_step = spec.world_size * spec.batch_size * workload.work_per_sample(None)
        timing = measure(step, timer, TimingPlan(**spec.plan), window=memory.steady(window),
                         agree=agree_on_max(device),
                         settled=in_work_units(check_from_terms(spec.verdict), job_work_per_step))
    share = _profiled_share(step, device, spec.profile_steps, context) if spec.profile_steps else None
    buckets = ddp_buckets(ddp)
    return {"round_seconds": timing.round_seconds, "steps_per_round": timing.steps_per_round,
            "warmup_steps": timing.warmup_steps, "stable": timing.stable, "extended_rounds": timing.extended_rounds,
            "verdict_rounds": timing.verdict_rounds, "looks": asdict(timing.looks) if timing.looks else None,
            "peak_memory_bytes": memory.peak_bytes, "work_per_step": spec.batch_size * workload.work_per_sample(None),
            "work_per_sample": workload.work_per_sample(None), "unit": workload.unit, **window_report(window),
            **(share or {}), **buckets}


def _profiled_share(step: Callable[[], None], device: str, steps: int, context: RankContext) -> dict[str, Any]:
    """Profile ``steps`` more steps (after the timed window, so the profiler never slows it) and measure the share
    of their wall time with a collective in flight."""
    from torch.profiler import ProfilerActivity, profile

    context.status("profiling")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device_kind(device) == "cuda" else [])
    dist.barrier()
    with profile(activities=activities) as profiler:
        for _ in range(steps):
            step()
        synchronize(device)
    share = communication_share(profiler.events(), device_kind(device))
    share["comm_ms_per_step"] = share.pop("comm_us") / 1000.0 / steps
    share["profiled_step_ms"] = share.pop("window_us") / 1000.0 / steps
    return share


def ddp_buckets(ddp: torch.nn.parallel.DistributedDataParallel) -> dict[str, Any]:
    """Gradient buckets DDP all-reduces each step and their total bytes, from DDP's own logging data
    (``bucket_sizes`` after its first-iteration rebuild, in bytes); None where this torch does not say."""
    try:
        data = ddp._get_ddp_logging_data()
    except (AttributeError, RuntimeError):
        return {"buckets": None, "allreduce_bytes_per_step": None}
    sizes_text = data.get("rebuilt_bucket_sizes") or data.get("bucket_sizes") or ""
    sizes = [int(s) for s in str(sizes_text).replace(",", " ").split() if s.strip().isdigit()]
    if not sizes:
        return {"buckets": None, "allreduce_bytes_per_step": None}
    return {"buckets": len(sizes), "allreduce_bytes_per_step": sum(sizes),
            "bucket_cap_bytes": data.get("bucket_cap_bytes")}

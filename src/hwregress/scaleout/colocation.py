"""Co-located training: K independent training processes on one device at once (the seed study's two jobs on one
GPU). Each process times its own window with the suite's discipline; they start their timed windows together at a
barrier, and a process that finishes first keeps training (untimed) until every other one has finished, so every
timed round of every process ran beside the others. Solo throughput comes from the same job with one process."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import torch.distributed as dist

from hwregress.hardware.devices import synchronize
from hwregress.hardware.facts import device_kind
from hwregress.measure.memory import PeakMemoryMeter
from hwregress.measure.timing import TimingPlan, default_timer, measure
from hwregress.measure.window import build_step, prepare_process
from hwregress.scaleout.rank_timing import HeartbeatTimer, job_window, window_report
from hwregress.workloads import get, make_batch

if TYPE_CHECKING:
    from hwregress.scaleout.job import JobSpec
    from hwregress.scaleout.rank import RankContext

MPS_PROCESS_NAMES = ("nvidia-cuda-mps-control", "nvidia-cuda-mps-server")
FINISHED_KEY = "hwregress/colocated/finished"


def mps_status(device: str, window_health: Iterable[Mapping[str, Any]] = ()) -> tuple[bool | None, str]:
    """Whether CUDA MPS (Multi-Process Service) shared ``device`` between the processes: the MPS clients NVML listed
    on the GPU during their windows (``gpu_mps_processes`` of each process's window health,
    nvmlDeviceGetMPSComputeRunningProcesses); where NVML could not say, its control daemon or server running on
    this host (their process names, NVIDIA's MPS documentation). None on non-CUDA devices."""
    if device_kind(device) != "cuda":
        return None, f"not a CUDA device ({device})"
    listed = [h["gpu_mps_processes"] for h in window_health if h.get("gpu_mps_processes") is not None]
    if listed:
        pids = sorted({p["pid"] for processes in listed for p in processes})
        if pids:
            return True, (f"NVML listed {len(pids)} MPS client processes on the GPU during the window (pids "
                          f"{', '.join(map(str, pids[:8]))}): kernels of the processes may run concurrently")
        return False, "NVML listed no MPS client on the GPU during the window: the processes time-slice the GPU"
    import psutil

    running = sorted({p.info["name"] for p in psutil.process_iter(["name"]) if p.info["name"] in MPS_PROCESS_NAMES})
    if running:
        return True, f"MPS daemon running ({', '.join(running)}): kernels of the processes may run concurrently"
    return False, "no MPS daemon on this host: the processes time-slice the GPU"


def measure_rank(spec: JobSpec, context: RankContext) -> dict[str, Any]:
    """This process's window beside the others: per-round seconds and its peak memory."""
    device = context.device
    workload = get(spec.models[context.rank])
    prepare_process(device)
    with PeakMemoryMeter(device) as memory:
        model = workload.build().to(device)
        inputs, labels = make_batch(workload, spec.batch_size, device)
        step = build_step(workload, model, "train", inputs, labels, device, spec.dtype)
        context.on_warmup()
        for _ in range(max(1, int(spec.plan.get("warmup_steps", 1)))):
            step()
        synchronize(device)  # no queued warmup work may spill into another process's timed window
        dist.barrier()  # every process has built its model and warmed up: the timed windows start together
        timer = HeartbeatTimer(default_timer(device), lambda index: context.on_round(index, spec.plan.get("rounds")))
        window = job_window(device, spec.telemetry_interval_s)
        warmed_up = TimingPlan(**{**spec.plan, "warmup_steps": 1})
        timing = measure(step, timer, warmed_up, window=memory.steady(window))
        _keep_training_until_all_finish(step, dist.get_world_size(), context, spec.timeout_s)
    return {"model": workload.name, "round_seconds": timing.round_seconds, "steps_per_round": timing.steps_per_round,
            "stable": timing.stable, "peak_memory_bytes": memory.peak_bytes, **window_report(window),
            "work_per_step": spec.batch_size * workload.work_per_sample(None),
            "work_per_sample": workload.work_per_sample(None), "unit": workload.unit}


def _keep_training_until_all_finish(step: Any, processes: int, context: RankContext, timeout_s: float) -> None:
    """Count this process as finished in the job's store, then train untimed until every process has, reporting
    progress to the watchdog every quarter of its timeout."""
    store = dist.distributed_c10d._get_default_store()
    finished = store.add(FINISHED_KEY, 1)
    phase = "finished its window; training on beside the others"
    context.status(phase)
    last_report = time.monotonic()
    while finished < processes:
        step()
        finished = store.add(FINISHED_KEY, 0)
        if time.monotonic() - last_report > timeout_s / 4:
            context.status(phase)
            last_report = time.monotonic()

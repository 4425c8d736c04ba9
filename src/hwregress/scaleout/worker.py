"""Every rank's entry point (the function the elastic agent spawns): set up the process, join the process group,
measure what the job's kind asks, gather every rank's figures and write them for the pytest session.

A rank reports its phase to ``rank-<r>.status.json`` as it goes (the watchdog's heartbeat and, after a failure,
where it was); an allocation failure is reported as ``oom`` with its message, any other error as ``failed``.
"""

from __future__ import annotations

import datetime
import faulthandler
import socket
import traceback
from collections.abc import Callable
from typing import Any

from torch.distributed.elastic.multiprocessing.errors import record

from hwregress.measure.memory import freeze_imported_objects
from hwregress.measure.window import cudnn_benchmark
from hwregress.scaleout.job import STACK_DUMP_SIGNAL, JobSpec, result_path
from hwregress.scaleout.rank import RankContext
from hwregress.store.atomic import atomic_write_json


@record
def run_rank(job_path: str) -> None:
    """Run one rank of the job in ``job_path`` (a :class:`hwregress.scaleout.job.JobSpec` file).

    Raises:
        whatever the measurement raises, after the rank's status says ``oom`` or ``failed`` with the error.
    """
    spec = JobSpec.read(job_path)  # type: ignore[arg-type]
    context = RankContext(spec)
    faulthandler.register(STACK_DUMP_SIGNAL, all_threads=True)  # the watchdog asks a stalled rank where it is
    freeze_imported_objects()
    context.status("started")
    _run(spec, context)
    context.status("done")


def _report_failure(context: RankContext, error: BaseException) -> None:
    """The rank's status says ``oom`` or ``failed`` with the error: written before anything that could block (a
    process group's shutdown waits for peers stuck in a collective), so the watchdog sees it at once."""
    from hwregress.measure.out_of_memory import is_out_of_memory

    phase = "oom" if is_out_of_memory(error) else "failed"
    context.status(phase, error=f"{type(error).__name__}: {error}"[:2000], traceback=traceback.format_exc()[-4000:])


def _run(spec: JobSpec, context: RankContext) -> None:
    import torch
    import torch.distributed as dist

    from hwregress.workloads import plugins as workload_plugins

    try:
        if spec.threads_per_rank:
            torch.set_num_threads(spec.threads_per_rank)
        workload_plugins.load_entry_points()  # the workloads the pytest session knows, installed and named
        if spec.workload_modules:
            workload_plugins.import_modules(spec.workload_modules, "--workloads")
        if context.device.startswith("cuda"):
            torch.cuda.set_device(context.device)
        context.status("joining the process group")
        # collectives give up only after twice the watchdog's timeout: the watchdog, which knows every rank's last
        # phase, decides and names the rank that stopped, not a peer's collective timing out first
        dist.init_process_group(spec.backend, timeout=datetime.timedelta(seconds=2 * spec.timeout_s))
        with cudnn_benchmark(spec.cudnn_benchmark):
            measured = _measure(spec, context)
        measured.update(rank=context.rank, local_rank=context.local_rank, node_rank=context.node_rank,
                        host=socket.gethostname(), device=context.device, threads=torch.get_num_threads())
        context.status("gathering")
        gathered: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, measured)
        if context.local_rank == 0:  # one copy per node: every node's session reads its own folder
            atomic_write_json(result_path(spec.out_dir), {"ranks": sorted(gathered, key=lambda r: r["rank"])})
        dist.barrier()
    except BaseException as error:
        _report_failure(context, error)
        raise  # without destroying the process group: its shutdown could wait for ever on a peer
    dist.destroy_process_group()


def _measure(spec: JobSpec, context: RankContext) -> dict[str, Any]:
    measure: Callable[[JobSpec, RankContext], dict[str, Any]]
    if spec.kind == "scaling":
        from hwregress.scaleout.ddp_window import measure_rank as measure
    elif spec.kind == "allreduce":
        from hwregress.scaleout.collectives import measure_rank as measure
    else:
        from hwregress.scaleout.colocation import measure_rank as measure
    return measure(spec, context)

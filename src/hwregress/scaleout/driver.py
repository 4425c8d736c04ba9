"""The process that hosts torch.distributed's elastic agent for one job on this node:
``python -m hwregress.scaleout.driver JOB_JSON --endpoint HOST:PORT --is-host 0|1``.

It is started by :func:`hwregress.scaleout.launch.run_job` in a session of its own, so the pytest process can end it
and every rank with one signal to the process group. It writes ``driver.json``: ``{"ok": true}``, or the failed
ranks (global rank, local rank, exit code, signal, the error their ``@record`` decorator captured), or the
launcher's own error (a rendezvous that never completed, say).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from hwregress.scaleout.job import JobSpec, driver_path
from hwregress.store.atomic import atomic_write_json

MONITOR_INTERVAL_S = 0.2  # how often the agent looks at its ranks (older torch defaults to 30 s)


def launch_config(spec: JobSpec, endpoint: str, is_host: bool) -> Any:
    """The elastic launcher's configuration of ``spec``: c10d rendezvous at ``endpoint`` (``is_host``: this node
    runs the store), no restarts (a failed rank fails the measurement), spawned ranks whose stdout and stderr go to
    ``<out_dir>/logs/<run_id>_*/attempt_0/<local_rank>/``."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std
    from torch.distributed.launcher.api import LaunchConfig

    return LaunchConfig(min_nodes=spec.nnodes, max_nodes=spec.nnodes, nproc_per_node=spec.ranks_per_node,
                        run_id=spec.run_id, rdzv_backend="c10d", rdzv_endpoint=endpoint,
                        # join: how long nodes wait for each other; read: how long a node retries reaching the store
                        rdzv_configs={"is_host": is_host, "join_timeout": int(spec.timeout_s),
                                      "read_timeout": int(spec.timeout_s)},
                        max_restarts=0, monitor_interval=MONITOR_INTERVAL_S, start_method="spawn",
                        logs_specs=DefaultLogsSpecs(log_dir=str(Path(spec.out_dir) / "logs"), redirects=Std.ALL))


def error_file_folder(spec: JobSpec) -> Path:
    """Where this driver's temporary files go: ``<out_dir>/tmp`` (made here). torch.multiprocessing gives each spawned
    rank a ``pytorch-errorfile-*.pickle`` in the launcher's temporary folder for its traceback and never deletes it
    (``torch/multiprocessing/spawn.py``, ``start_processes``): in the system's, every failed rank of every job left
    one behind; in the job's folder it stays beside the ranks' logs and goes with them."""
    folder = Path(spec.out_dir) / "tmp"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def failures_of(error: Any) -> list[dict[str, Any]]:
    """The failed ranks of a ``ChildFailedError``, the launcher's first failure first (it orders by whole seconds:
    :func:`hwregress.scaleout.failure_text.describe_failures` decides which rank died first)."""
    first = error.get_first_failure()[0] if error.failures else None
    out = []
    for rank, failure in sorted(error.failures.items(), key=lambda item: item[0] != first):
        out.append({"rank": rank, "local_rank": failure.local_rank, "exitcode": failure.exitcode,
                    "signal": failure.signal_name() if failure.exitcode < 0 else None,
                    "message": str(failure.message)[-2000:] if failure.message else "", "pid": failure.pid})
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the job; 0 when every rank finished, 1 when a rank failed, 2 when the launcher itself failed."""
    parser = argparse.ArgumentParser(prog="python -m hwregress.scaleout.driver")
    parser.add_argument("job", type=Path)
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--is-host", type=int, choices=(0, 1), required=True)
    args = parser.parse_args(argv)
    spec = JobSpec.read(args.job)
    sys.path[:0] = [p for p in spec.sys_path if p not in sys.path]  # spawned ranks inherit this path
    tempfile.tempdir = str(error_file_folder(spec))

    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import elastic_launch

    from hwregress.scaleout.worker import run_rank

    try:
        elastic_launch(launch_config(spec, args.endpoint, bool(args.is_host)), run_rank)(str(args.job))
    except ChildFailedError as error:
        atomic_write_json(driver_path(spec.out_dir), {"ok": False, "failures": failures_of(error)})
        return 1
    except Exception as error:  # the launcher's own failure: rendezvous, store, a rank that never started
        atomic_write_json(driver_path(spec.out_dir), {"ok": False, "error": f"{type(error).__name__}: {error}"})
        return 2
    atomic_write_json(driver_path(spec.out_dir), {"ok": True})
    return 0


if __name__ == "__main__":
    sys.exit(main())

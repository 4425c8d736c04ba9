"""The distributed families end to end through the plugin, on this CPU with gloo: scaling over world sizes 1 and
2, the all-reduce ceiling, a co-located pair, two pytest processes as two nodes, and a rank killed or hung
mid-window (the test fails naming the rank, within the timeout, and no process of the job survives)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time

import psutil
import pytest
from support.project import REPO, SUBPROCESS_ARGS, HwProject

from hwregress.scaleout.launch import JOB_VARIABLE
from hwregress.scaleout.topology import usable_cores

DIST = ["--workloads", "selftest_support", "--models", "tiny", "--batch-sizes", "4", "--profile-steps", "2"]


@pytest.fixture
def dist_project(hw_project: HwProject) -> HwProject:
    for name in ("test_scaling.py", "test_colocated.py", "test_ceilings.py"):
        shutil.copy(REPO / "bench_tests" / name, hw_project.path / "bench_tests")
    return hw_project


def _job_processes(project: HwProject) -> list[psutil.Process]:
    """Every process left of the project's jobs: it carries a job token and the project on its import path."""
    found = []
    for process in psutil.process_iter(["pid"]):
        try:
            environment = process.environ()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if JOB_VARIABLE in environment and str(project.path) in environment.get("PYTHONPATH", ""):
            found.append(process)
    return found


def _records(project: HwProject) -> dict[str, dict]:
    return {r["test_id"].rsplit("[", 1)[-1].rstrip("]"): r for r in project.results["records"]}


def test_scaling_records_world_sizes_one_and_two_with_efficiency_and_communication_share(dist_project):
    # under -n 2 only: the launcher's serial path is every other test's here, and each run is 36 s of CI's 2 cores
    result = dist_project.run("-m", "cpu and scaling", "--world-sizes", "1,2", "--update-baselines", *DIST, "-n", "2")
    result.assert_outcomes(passed=2)
    records = _records(dist_project)
    one, two = records["cpu-tiny-train-w1-bs4-fp32"], records["cpu-tiny-train-w2-bs4-fp32"]
    assert one["family"] == two["family"] == "scaling"
    assert one["efficiency"] == 1.0 and one["scaling"]["threads_per_rank"] == 2
    scaling = two["scaling"]
    assert scaling["world_size"] == 2 and scaling["nodes"] == 1 and scaling["backend"] == "gloo"
    assert scaling["threads_per_rank"] == 1 and len(scaling["ranks"]) == 2
    assert two["efficiency"] == pytest.approx(two["throughput"] / (2 * one["throughput"]), rel=1e-9)
    assert scaling["reference_throughput"] == pytest.approx(one["throughput"])  # T(1) from the same session
    assert 0 < scaling["comm_share"] < 1 and scaling["buckets"] >= 1
    assert scaling["allreduce_bytes_per_step"] == 4 * (3 * 8 * 8 * 32 + 32 + 32 * 10 + 10)  # every fp32 gradient
    entries = json.loads(dist_project.baseline_files()[0].read_text())["entries"]
    assert entries["scaling/tiny/train-w2/bs4/fp32"]["efficiency"] == pytest.approx(two["efficiency"])
    assert "scaling/tiny/train-w1/bs4/fp32" in entries
    assert two["looks"] is None  # nothing to judge against yet: no looks
    # judged against the entry just recorded: the ranks take the planned looks together, and the record keeps them
    dist_project.run("-m", "cpu and scaling", "--world-sizes", "2", *DIST, "-n", "2")
    judged = _records(dist_project)["cpu-tiny-train-w2-bs4-fp32"]
    looks = judged["looks"]
    assert looks is not None and looks["rounds"] and looks["rounds"][-1] == judged["rounds"]
    assert looks["rounds"] == looks["planned"][:len(looks["rounds"])] or judged["rounds"] < looks["planned"][-1]
    assert judged["alpha"] == pytest.approx(0.01 / len(looks["planned"]))
    assert not _job_processes(dist_project)


def test_the_cpu_ceilings_include_allreduce_and_a_colocated_pair_is_recorded(dist_project):
    result = dist_project.run("-m", "cpu and (ceiling or colocated)", *DIST)
    result.assert_outcomes(passed=4)  # gemm, copy, allreduce, the co-located pair
    records = _records(dist_project)
    allreduce = records["cpu-allreduce-fp32"]
    curve = allreduce["allreduce"]["curve"]
    assert allreduce["unit"] == "GB/s" and allreduce["allreduce"]["world_size"] == 2
    assert [point["bytes"] for point in curve] == [4**k * 1024 for k in range(8)]
    assert allreduce["batch_size"] == 16 * 2**20 and allreduce["throughput"] == statistics.median(allreduce["samples"])
    assert allreduce["throughput"] == pytest.approx(curve[-1]["busbw_gbps"], rel=0.1)  # the curve's last point
    assert all(point["busbw_gbps"] == pytest.approx(point["algbw_gbps"]) for point in curve)  # 2(W-1)/W = 1 at W=2
    pair = records["cpu-tiny+tiny-train-bs4-fp32"]
    colocated = pair["colocated"]
    assert pair["family"] == "colocated" and colocated["processes"] == 2 and colocated["mps_active"] is None
    assert [m["model"] for m in colocated["members"]] == ["tiny", "tiny"]
    assert all(m["interference"] > 0 and m["solo_throughput"] > 0 and m["peak_memory_bytes"]
               for m in colocated["members"])
    assert pair["efficiency"] == pytest.approx(sum(m["interference"] for m in colocated["members"]) / 2)
    assert not _job_processes(dist_project)


@pytest.mark.nightly
def test_a_killed_rank_fails_the_test_by_name_and_leaves_no_process(dist_project):
    started = time.monotonic()
    result = dist_project.run("-m", "cpu and scaling", "--world-sizes", "2", "--dist-timeout", "60", "--rounds", "20",
                              *DIST, env={"HWREGRESS_SELFTEST_KILL_RANK": "1"})
    result.assert_outcomes(failed=1)
    assert time.monotonic() - started < 60 + 60  # well within the timeout (start-up included)
    (record,) = dist_project.results["records"]
    assert record["verdict"] == "failed"
    assert "RankFailed: rank 1 (node 0, local rank 1) exited with exit code -9 (SIGKILL) during 'timed round 2" in \
        record["message"]
    assert not _job_processes(dist_project)


@pytest.mark.nightly
def test_a_hung_rank_fails_the_test_within_the_timeout_and_leaves_no_process(dist_project):
    started = time.monotonic()
    result = dist_project.run("-m", "cpu and scaling", "--world-sizes", "2", "--dist-timeout", "20", "--rounds", "20",
                              *DIST, env={"HWREGRESS_SELFTEST_HANG_RANK": "1"})
    result.assert_outcomes(failed=1)
    (record,) = dist_project.results["records"]
    assert "JobHung: no progress for 20 s (--dist-timeout) on rank(s)" in record["message"]
    assert "rank 1 (pid" in record["message"] and "timed round 2" in record["message"]
    rank_one = record["message"].split("rank 1 (pid", 1)[1]
    assert "_inject_fault" in rank_one  # the stack it dumped: where it stopped
    assert time.monotonic() - started < 20 + 100  # the timeout, start-up and the solo run around it
    assert not _job_processes(dist_project)


@pytest.mark.nightly
def test_an_out_of_memory_rank_ends_the_test_as_oom(dist_project):
    result = dist_project.run("-m", "cpu and scaling", "--world-sizes", "2", *DIST,
                              env={"HWREGRESS_SELFTEST_OOM_RANK": "0"})
    result.assert_outcomes(skipped=1)
    (record,) = dist_project.results["records"]
    assert record["verdict"] == "oom" and "out of memory on rank 0 (cpu)" in record["message"]
    assert not _job_processes(dist_project)
    # torch.multiprocessing's traceback files of the failed ranks (the one out of memory, the other's lost peer), which
    # it never deletes: in the job's folder, beside the ranks' logs, not one more in the system's temporary folder
    error_files = list(dist_project.path.rglob("pytorch-errorfile-*.pickle"))
    assert error_files and all(f.parent.name == "tmp" and (f.parent.parent / "logs").is_dir() for f in error_files)


def _free_port() -> int:
    """A port whose successor is free too (the session store and the job rendezvous)."""
    for _ in range(50):
        with socket.socket() as first:
            first.bind(("127.0.0.1", 0))
            port = first.getsockname()[1]
            with socket.socket() as second:
                try:
                    second.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
        return port
    raise RuntimeError("no two consecutive free ports")


def _two_nodes(project: HwProject, *extra: str, env: dict[str, str] | None = None) -> list[str]:
    """Run the scaling family at world size 2 as two nodes of one rank each (two pytest processes on localhost,
    c10d rendezvous on 127.0.0.1); returns both outputs after asserting both sessions ended."""
    port = _free_port()
    for node in (0, 1):
        (project.path / f"node{node}").mkdir()
    common = [sys.executable, "-m", "pytest", *SUBPROCESS_ARGS, "-p", "no:cacheprovider", "--devices", "cpu",
              "--rounds", "5", "--warmup", "1", "--min-round-time", "0.02", "--time-budget", "1",
              "-m", "cpu and scaling", "--world-sizes", "2", "--nnodes", "2", "--rdzv-endpoint", f"127.0.0.1:{port}",
              "--dist-timeout", "120", *DIST, *extra]
    environment = {**os.environ, **(env or {})}
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        environment.pop(name, None)
    nodes = [subprocess.Popen([*common, "--node-rank", str(node), f"--report-dir=node{node}/reports",
                               f"--baseline-dir=node{node}/baselines", "--update-baselines"],
                              cwd=project.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=environment)
             for node in (0, 1)]
    return [node.communicate(timeout=400)[0] for node in nodes]


def _node_record(project: HwProject, node: int) -> dict:
    (record,) = json.loads((project.path / f"node{node}" / "reports" / "results.json").read_text())["records"]
    return record


@pytest.mark.nightly
def test_two_pytest_processes_on_localhost_are_two_nodes_of_one_job(dist_project):
    outputs = _two_nodes(dist_project)
    record = _node_record(dist_project, 0)
    scaling = record["scaling"]
    assert record["verdict"] == "new", "\n\n".join(outputs)
    assert scaling["world_size"] == 2 and scaling["nodes"] == 2
    assert scaling["ranks_per_node"] == 1 and sorted(r["node_rank"] for r in scaling["ranks"]) == [0, 1]
    assert record["efficiency"] > 0  # against node 0's own W=1 run in the same session
    other = _node_record(dist_project, 1)
    assert other["verdict"] == "skipped" and other["details"]["participant"]["node_rank"] == 1
    assert other["details"]["participant"]["world_size"] == 2 and other["details"]["participant"]["nodes"] == 2
    assert "node 1 took part in job" in other["message"]
    entries = json.loads(next((dist_project.path / "node0" / "baselines").glob("*.json")).read_text())["entries"]
    assert "scaling/tiny/train-w2-n2/bs4/fp32" in entries
    assert not list((dist_project.path / "node1" / "baselines").glob("*.json"))  # only node 0 records
    assert not _job_processes(dist_project)


@pytest.mark.nightly
def test_an_out_of_memory_on_either_node_ends_node_zeros_record_as_oom(dist_project):
    outputs = _two_nodes(dist_project, env={"HWREGRESS_SELFTEST_OOM_RANK": "1"})  # rank 1: whichever node has it
    record = _node_record(dist_project, 0)
    assert record["verdict"] == "oom", "\n\n".join(outputs)
    assert "out of memory on rank 1" in record["message"]
    assert _node_record(dist_project, 1)["verdict"] in ("oom", "failed")
    assert not _job_processes(dist_project)


def test_several_nodes_refuse_pytest_xdist(dist_project):
    result = dist_project.run("-n", "2", "--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", "127.0.0.1:29999",
                              inprocess=False)
    assert result.ret == 4
    assert "drop -n (pytest-xdist)" in str(result.stderr) + str(result.stdout)


def test_on_the_cpu_scaling_and_colocation_run_when_asked_for(dist_project):
    def collected(*args: str) -> str:
        result = dist_project.run("--collect-only", "-q", *args, fast=False, inprocess=True)
        return str(result.stdout)

    assert "test_scaling" not in collected("-m", "cpu") and "test_colocated" not in collected("-m", "cpu")
    assert "test_ceiling[cpu-allreduce-fp32]" in collected("-m", "cpu")
    assert "test_scaling[cpu-mobilenet_v3_small-train-w1-bs8-fp32]" in collected("-m", "cpu and scaling")
    assert "test_scaling[cpu-mobilenet_v3_small-train-w4-bs8-fp32]" in collected("-m", "cpu", "--world-sizes", "4",
                                                                                 "--oversubscribe")
    assert "test_colocated[cpu-resnet18+alexnet-train-bs8-fp32]" in collected("--colocate", "resnet18+alexnet")


def test_world_sizes_beyond_the_cores_are_a_usage_error_unless_oversubscribed(dist_project):
    cores = usable_cores()
    too_many = cores + 1

    pyproject = dist_project.path / "pyproject.toml"
    original = pyproject.read_text()

    def configure(*args: str, ini: str = "") -> pytest.RunResult:
        pyproject.write_text(original.replace("[tool.pytest.ini_options]\n", f"[tool.pytest.ini_options]\n{ini}\n"))
        return dist_project.run("--collect-only", "-q", "-m", "cpu", *args, fast=False, inprocess=True)

    refused = configure("--world-sizes", f"1,{too_many}")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    assert (f"--world-sizes=1,{too_many}: world size {too_many} needs {too_many} ranks on this node, beyond its "
            f"{cores} usable CPU cores (gloo); use world sizes up to {cores}, or --oversubscribe (ini: "
            "hwregress_oversubscribe = true) to run them anyway") in refused.stderr.str()
    forced = configure("--world-sizes", f"1,{too_many}", "--oversubscribe")
    assert forced.ret == pytest.ExitCode.OK
    assert f"test_scaling[cpu-mobilenet_v3_small-train-w{too_many}-bs8-fp32]" in forced.stdout.str()
    assert configure("--world-sizes", str(cores)).ret == pytest.ExitCode.OK  # every core a rank: no oversubscription

    sizes_in_ini = f'hwregress_world_sizes = ["{too_many}"]'
    from_ini = configure(ini=sizes_in_ini)
    assert from_ini.ret == pytest.ExitCode.USAGE_ERROR
    assert f"ini option hwregress_world_sizes={too_many}: world size {too_many} needs" in from_ini.stderr.str()
    assert configure(ini=f'{sizes_in_ini}\nhwregress_oversubscribe = "true"').ret == pytest.ExitCode.OK
    bad_switch = configure(ini=f'{sizes_in_ini}\nhwregress_oversubscribe = "maybe"')
    assert bad_switch.ret == pytest.ExitCode.USAGE_ERROR
    assert "ini option hwregress_oversubscribe='maybe': use true or false" in bad_switch.stderr.str()


def test_world_sizes_beyond_the_selected_gpus_are_a_usage_error_unless_oversubscribed(dist_project, monkeypatch):
    from fakes import cuda as fake_cuda

    fake_cuda.install(monkeypatch, {0: fake_cuda.fake_properties(bus=0x18), 1: fake_cuda.fake_properties(bus=0x3B)})
    args = ["--collect-only", "-q", "-m", "scaling", "--devices", "cuda:0,cuda:1", "--world-sizes", "2,4"]

    refused = dist_project.run(*args, fast=False, inprocess=True)  # in this process: the fake GPUs are seen

    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    assert ("--world-sizes=2,4: world size 4 needs 4 ranks on this node, beyond its 2 selected GPUs (NCCL: one rank "
            "per GPU); use world sizes up to 2, select more GPUs with --devices, or --oversubscribe") in (
        refused.stderr.str())
    forced = dist_project.run(*args, "--oversubscribe", fast=False, inprocess=True)
    assert forced.ret == pytest.ExitCode.OK
    assert "test_scaling[cuda:0-resnet50-train-w4-" in forced.stdout.str()  # kept; skipped as unsupported when run

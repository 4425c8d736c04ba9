"""Machine health: CPU time of other processes from synthetic psutil readings, GPU state through a fake
NVML, the sentences of ``findings``, and one real busy-loop contention check."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import types
from collections import namedtuple

import psutil
import pytest

from hwregress.hardware import gpu_health, health
from hwregress.scaleout import colocation, launch, rank_timing

CpuTimes = namedtuple("CpuTimes", "user nice system idle iowait irq softirq steal guest guest_nice")
ProcTimes = namedtuple("ProcTimes", "user system children_user children_system")


class FakeProcess:
    def __init__(self, seconds: list[float]) -> None:
        self.seconds = seconds

    def cpu_times(self) -> ProcTimes:
        return ProcTimes(self.seconds.pop(0), 0.0, 0.0, 0.0)

    def children(self, recursive: bool = False) -> list:
        return []


class FakePsutil:
    """Two readings of everything: at entry and at exit of the probe."""

    def __init__(self, times: list[CpuTimes], own: list[float], *, loads=(0.5, 0.5), sin=(0, 0),
                 freq=(2800.0, 3000.0), broken=()):
        self.times, self.loads, self.sin = list(times), list(loads), list(sin)
        self.process = FakeProcess(list(own))
        self.freq, self.broken = freq, broken

    def _check(self, name):
        if name in self.broken:
            raise PermissionError(f"{name} denied")

    def cpu_times(self):
        self._check("cpu_times")
        return self.times.pop(0)

    def Process(self):
        return self.process

    def getloadavg(self):
        return (self.loads.pop(0), 0.0, 0.0)

    def virtual_memory(self):
        return types.SimpleNamespace(available=4 * 2**30, total=16 * 2**30)

    def swap_memory(self):
        return types.SimpleNamespace(sin=self.sin.pop(0))

    def cpu_count(self):
        return 2

    def cpu_freq(self):
        self._check("cpu_freq")
        return types.SimpleNamespace(current=self.freq[0], max=self.freq[1])


def _times(busy: float, idle: float, steal: float = 0.0) -> CpuTimes:
    return CpuTimes(busy, 0.0, 0.0, idle, 0.0, 0.0, 0.0, steal, 0.0, 0.0)


def _probe(fake: FakePsutil, tmp_path) -> dict:
    with health.CpuHealthProbe(psutil_module=fake, cpufreq_dir=str(tmp_path)) as probe:
        pass
    return probe.result


def test_other_processes_share_from_synthetic_cpu_times(tmp_path):
    # 2 cores x 1 s = 2 core-seconds: 1.9 busy, of which 0.3 ours -> others used 80%
    fake = FakePsutil([_times(100.0, 100.0), _times(101.9, 100.1)], own=[10.0, 10.3])
    result = _probe(fake, tmp_path)
    assert result["other_cpu_fraction"] == pytest.approx(0.8)
    assert result["own_cpu_fraction"] == pytest.approx(0.15)
    assert health.findings(result)[0].startswith("CPU contention: other processes used 80% of the 2 cores'")


def test_quiet_window_has_no_findings(tmp_path):
    fake = FakePsutil([_times(100.0, 100.0), _times(101.0, 101.0)], own=[10.0, 10.95])
    result = _probe(fake, tmp_path)
    assert result["other_cpu_fraction"] == pytest.approx(0.025)
    assert health.findings(result) == []


def test_steal_load_swap_frequency_and_governor(tmp_path):
    (tmp_path / "scaling_governor").write_text("powersave\n")
    (tmp_path / "scaling_driver").write_text("acpi-cpufreq\n")
    fake = FakePsutil([_times(100.0, 100.0, 0.0), _times(100.9, 100.9, 0.2)], own=[10.0, 10.9],
                      loads=(4.0, 4.5), sin=(0, 50 * 2**20), freq=(1200.0, 3000.0))
    result = _probe(fake, tmp_path)
    assert result["steal_fraction"] == pytest.approx(0.1)
    assert (result["cpu_governor"], result["swap_in_bytes"]) == ("powersave", 50 * 2**20)
    text = " | ".join(health.findings(result))
    for expected in ("hypervisor took 10%", "load average 4.0 on 2 cores", "CPU clock 1200 MHz is 40%",
                     "governor is 'powersave'", "50 MiB swapped in"):
        assert expected in text


def test_powersave_under_pstate_driver_is_normal(tmp_path):
    (tmp_path / "scaling_governor").write_text("powersave\n")
    (tmp_path / "scaling_driver").write_text("intel_pstate\n")
    fake = FakePsutil([_times(100.0, 100.0), _times(101.0, 101.0)], own=[10.0, 11.0])
    assert health.findings(_probe(fake, tmp_path)) == []


def test_unreadable_counters_are_errors_not_exceptions(tmp_path):
    fake = FakePsutil([], own=[1.0, 1.0], broken=("cpu_times", "cpu_freq"))
    result = _probe(fake, tmp_path)
    assert result["other_cpu_fraction"] is None and result["cpu_freq_mhz"] is None
    assert "cpu_times" in result["errors"] and "cpu_freq" in result["errors"]
    assert health.findings(result) == []


class NotSupported(Exception):
    """Like pynvml.NVMLError_NotSupported."""


class FakeNvml:
    NVML_FEATURE_ENABLED = 1
    NVML_TEMPERATURE_GPU = 0
    NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0

    def __init__(self, pids=(100,), **readings):
        self.pids = pids
        self.readings = {"persistence": 1, "pending": 0, "remap": (0, 0, 0, 0), "ecc": 0, "enforced": 700_000,
                         "default": 700_000, "gen": 5, "max_gen": 5, "width": 16, "max_width": 16,
                         "temperature": 60, "slowdown": 90, **readings}

    def _get(self, key):
        value = self.readings[key]
        if isinstance(value, Exception):
            raise value
        return value

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [types.SimpleNamespace(pid=p, usedGpuMemory=2**30) for p in self.pids]

    def nvmlDeviceGetPersistenceMode(self, h):
        return self._get("persistence")

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h):
        return self._get("pending")

    def nvmlDeviceGetRemappedRows(self, h):
        return self._get("remap")

    def nvmlDeviceGetTotalEccErrors(self, h, kind, counter):
        return self._get("ecc")

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return self._get("enforced")

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h):
        return self._get("default")

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return self._get("gen")

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return self._get("max_gen")

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return self._get("width")

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return self._get("max_width")

    def nvmlDeviceGetTemperature(self, h, sensor):
        return self._get("temperature")

    def nvmlDeviceGetTemperatureThreshold(self, h, kind):
        return self._get("slowdown")


def test_healthy_gpu_has_no_findings():
    state = gpu_health.gpu_health("h", FakeNvml(pids=(100,)), our_pids={100})
    assert state["gpu_other_processes"] == [] and state["gpu_pids_comparable"] is True
    assert health.findings(state) == []


def test_gpu_findings():
    nvml = FakeNvml(pids=(100, 4242), persistence=0, pending=1, remap=(0, 2, 1, 1), ecc=3, enforced=350_000,
                    gen=3, width=8, temperature=87)
    state = gpu_health.gpu_health("h", nvml, our_pids={100})
    text = " | ".join(health.findings(state))
    for expected in ("another compute process on the GPU during the window (pids 4242)", "remapping failed",
                     "waiting to be remapped", "3 uncorrected ECC errors", "350 W enforced vs 700 W default",
                     "GPU at 87 C, within 5 C of its slowdown temperature 90 C", "PCIe link generation gen 3",
                     "PCIe link width x8 below its maximum x16", "persistence mode is off"):
        assert expected in text
    assert health.findings(state)[0].startswith("another compute process")  # contention leads


def test_gpu_pids_from_another_namespace():
    lone = gpu_health.gpu_health("h", FakeNvml(pids=(7,)), our_pids={100})
    assert lone["gpu_pids_comparable"] is False
    assert health.findings(lone) == []  # the one process listed is probably us
    shared = gpu_health.gpu_health("h", FakeNvml(pids=(7, 8)), our_pids={100})
    assert "2 compute processes on the GPU" in health.findings(shared)[0]


def test_gpu_read_errors_cost_one_field():
    state = gpu_health.gpu_health("h", FakeNvml(remap=NotSupported("Not Supported")), our_pids={100})
    assert state["row_remap_pending"] is None and "row_remap_pending" in state["errors"]
    assert state["temperature_c"] == 60


SPIN = "import sys; sys.stdout.write('go\\n'); sys.stdout.flush()\nwhile True: pass"


def test_real_busy_loops_are_found_as_contention():
    """One spinning process per core (two on the 2-core development VM) during a 1 s window: found,
    whatever else runs here (more load only adds contention). The spinners are orphaned (started through a
    shell that exits) so they are not this process's descendants, whose CPU time the probe counts as ours."""
    cores = os.cpu_count() or 2
    if cores > 16:
        pytest.skip(f"{cores} cores: spinning one process per core would be rude to a shared runner")
    spinners = [_orphan_spinner() for _ in range(max(cores, 2))]
    try:
        time.sleep(0.2)  # let them start spinning
        with health.CpuHealthProbe() as probe:
            time.sleep(1.0)
    finally:
        for pid in spinners:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert probe.result["other_cpu_fraction"] is not None
    assert any(s.startswith("CPU contention") for s in health.findings(probe.result)), probe.result


def test_the_thread_that_runs_the_window_is_watched():
    with health.CpuHealthProbe() as probe:
        time.sleep(0.05)
    result = probe.result
    assert result["errors"] == {}, result["errors"]
    assert result["thread_involuntary_switches"] >= 0 and result["thread_migrations"] >= 0
    assert {result["thread_cpu_before"], result["thread_cpu_after"]} <= set(range(os.cpu_count() or 1))
    assert 0 < result["host_speed_before_ns"] < 10_000 and 0 < result["host_speed_after_ns"] < 10_000


def test_a_window_thread_preempted_by_busy_loops_counts_its_involuntary_switches():
    cores = os.cpu_count() or 2
    if cores > 16:
        pytest.skip(f"{cores} cores: spinning one process per core would be rude to a shared runner")
    spinners = [_orphan_spinner() for _ in range(max(cores, 2))]
    try:
        time.sleep(0.2)
        with health.CpuHealthProbe() as probe:
            ends = time.perf_counter() + 1.0
            while time.perf_counter() < ends:  # a launch-bound window's thread never sleeps
                pass
    finally:
        for pid in spinners:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    # one more spinning thread than cores for a second: the scheduler takes the core from this one (CFS slices of
    # 3-24 ms), however fast the machine
    assert probe.result["thread_involuntary_switches"] > 0, probe.result


def _orphan_spinner() -> int:
    """The pid of a spinning Python process that is not a descendant of this one."""
    shell = subprocess.run(["sh", "-c", f'"{sys.executable}" -c "while True: pass" >/dev/null 2>&1 & echo $!'],
                           capture_output=True, text=True, check=True)
    return int(shell.stdout.strip())


# -- the whole job is "us": the pytest worker that launched it and every process under it -----------------------

RANK = """
import json
from hwregress.scaleout.launch import job_owner
from hwregress.hardware.health import CpuHealthProbe
probe = CpuHealthProbe(process=job_owner())  # job_health_probe's, without importing torch
with probe:
    pass
print(json.dumps(sorted(probe.our_pids())), flush=True)
"""
LAUNCHER = """
import subprocess, sys
idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
rank = subprocess.Popen([sys.executable, "-c", sys.argv[1]])
print(idle.pid, rank.pid, flush=True)
rank.wait()
idle.kill()
idle.wait()
"""


def test_a_ranks_health_counts_the_launching_pytest_worker_and_all_under_it_as_us():
    """This process stands for the pytest worker: it starts a sibling and a launcher, the launcher two ranks. The
    rank reads its window's "us": this process, the sibling, the launcher and both ranks."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "HWREGRESS_JOB_OWNER_PID": str(os.getpid())}
    sibling = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, RANK], stdout=subprocess.PIPE, text=True, env=env)
    try:
        idle_rank, measuring_rank = map(int, launcher.stdout.readline().split())
        us = set(json.loads(launcher.stdout.readline() or "[]"))
        launcher.wait(60)
    finally:
        for process in (sibling, launcher):
            process.kill()
            process.wait()
    assert {os.getpid(), sibling.pid, launcher.pid, idle_rank, measuring_rank} <= us


def test_the_job_owner_is_the_process_that_launches_the_job(monkeypatch):
    spec = types.SimpleNamespace(sys_path=[])
    environment = launch._environment(spec, types.SimpleNamespace(node_rank=0), "token")
    assert environment[launch.JOB_OWNER_VARIABLE] == str(os.getpid())
    monkeypatch.setenv(launch.JOB_OWNER_VARIABLE, str(os.getpid()))
    assert launch.job_owner() is None  # not an ancestor of this process: a reused pid is nobody's job
    owner = psutil.Process(os.getppid())
    monkeypatch.setattr(rank_timing, "job_owner", lambda: owner)
    assert rank_timing.job_health_probe().process is owner


BURN = "import time\nwhile time.process_time() < 0.5: pass"
REAPER = f"""
import os, subprocess, sys
subprocess.run([sys.executable, "-c", {BURN!r}], check=True)
times = os.times()
print(times.children_user + times.children_system, flush=True)
sys.stdin.read()
"""


def test_cpu_of_a_process_reaped_inside_the_job_is_ours():
    """A rank that reaped a worker (a data loader, a compile worker) is alive when the window ends: the worker's CPU
    seconds sit in the rank's ``children_*`` times, and they are ours."""
    ours = psutil.Process()
    before = health.tree_cpu_seconds(ours)
    rank = subprocess.Popen([sys.executable, "-c", REAPER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        worker_cpu_s = float(rank.stdout.readline())
        after = health.tree_cpu_seconds(ours)  # the rank still runs
    finally:
        rank.kill()
        rank.wait()
    assert worker_cpu_s >= 0.4  # os.times counts clock ticks
    assert after - before >= worker_cpu_s


# -- MPS: NVML's list of MPS clients, read during the window ---------------------------------------------------

class MpsNvml(FakeNvml):
    def __init__(self, pids=(), mps_pids=(), **readings):
        super().__init__(pids=pids, **readings)
        self.mps_pids = mps_pids

    def nvmlDeviceGetMPSComputeRunningProcesses(self, h):
        return [types.SimpleNamespace(pid=p, usedGpuMemory=2**29) for p in self.mps_pids]


def test_mps_clients_are_recorded_and_a_stranger_among_them_is_contention():
    state = gpu_health.gpu_health("h", MpsNvml(mps_pids=(100, 101, 555)), our_pids={100, 101})
    assert [p["pid"] for p in state["gpu_mps_processes"]] == [100, 101, 555]
    assert [p["pid"] for p in state["gpu_mps_other_processes"]] == [555]
    assert state["gpu_mps_active"] is True
    assert "another MPS client on the GPU during the window (pids 555)" in " | ".join(health.findings(state))


def _wait_for_name(pid: int, name: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while psutil.Process(pid).name() != name and time.monotonic() < deadline:
        time.sleep(0.01)


def test_our_mps_clients_alone_are_no_contention_and_the_mps_server_is_not_a_stranger(tmp_path):
    """Under MPS, NVML's compute list names the MPS server, which holds the shared context; it runs no work of
    its own. A process named like NVIDIA's server (a copy of ``sleep``) is recognised by its name."""
    server_binary = tmp_path / "nvidia-cuda-mps-server"
    shutil.copy(shutil.which("sleep"), server_binary)
    server = subprocess.Popen([str(server_binary), "60"])
    _wait_for_name(server.pid, "nvidia-cuda-mps-server")  # before its exec, the child still bears python's name
    try:
        state = gpu_health.gpu_health("h", MpsNvml(pids=(server.pid,), mps_pids=(100, 101)), our_pids={100, 101})
    finally:
        server.kill()
        server.wait()
    assert state["gpu_other_processes"] == [] and state["gpu_mps_other_processes"] == []
    assert state["gpu_mps_server_pids"] == [server.pid]
    assert health.findings(state) == []


def test_a_pynvml_without_the_mps_query_costs_that_field_only():
    state = gpu_health.gpu_health("h", FakeNvml(pids=(100,)), our_pids={100})
    assert state["gpu_mps_processes"] is None and "mps_processes" in state["errors"]
    assert state["gpu_other_processes"] == [] and health.findings(state) == []


def test_colocation_reads_mps_from_the_windows_nvml_list():
    active, detail = colocation.mps_status("cuda:0", [{"gpu_mps_processes": [{"pid": 7}, {"pid": 8}]}, {}])
    assert active is True and "NVML listed 2 MPS client processes" in detail
    active, detail = colocation.mps_status("cuda:0", [{"gpu_mps_processes": []}])
    assert active is False and "no MPS client" in detail
    assert colocation.mps_status("cpu", [])[0] is None

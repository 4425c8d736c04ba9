"""GPU numbers you can trust, proven on the CPU through fakes: numeric flags held through backward and
the optimizer step, attention FLOPs, exact CUDA memory judgement, one shared CPU reference, capability-based
dtype support, NVML handles matched by bus id, published peaks matched on the full name, library
allocation failures as OOM, cuDNN autotuning set and recorded."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import types
from typing import ClassVar

import pytest
import torch
from fakes import cuda as fake_cuda
from fakes.nvml import FakeGpu, FakeNvml
from support.project import REPO
from torch import nn
from torch.optim.optimizer import register_optimizer_step_pre_hook

from hwregress import workloads
from hwregress.hardware import health, roofline, telemetry
from hwregress.hardware.devices import environment_fingerprint
from hwregress.hardware.facts import PERFORMANCE_RELEVANT, fingerprint_changes
from hwregress.hardware.nvml import NvmlDevice, pci_bus_id
from hwregress.judge import evidence
from hwregress.judge.compare import Measured, judge
from hwregress.judge.tolerances import Tolerances
from hwregress.measure import host_reference, out_of_memory, parity, profiling
from hwregress.measure import window as bench
from hwregress.measure.memory import PeakMemoryMeter
from hwregress.measure.precision import numerics, support
from hwregress.measure.timing import TimingPlan
from hwregress.store.results import TestRecord

QUICK = TimingPlan(warmup_steps=1, rounds=3, min_round_s=0.001, budget_s=0.5)


class FixedTimer:
    def time_round(self, run_steps, steps):
        run_steps()
        return steps * 0.002


def torch_state() -> dict[str, bool]:
    return {"matmul_tf32": torch.backends.cuda.matmul.allow_tf32, "cudnn_tf32": torch.backends.cudnn.allow_tf32,
            "cudnn_benchmark": torch.backends.cudnn.benchmark, "autocast": torch.is_autocast_enabled("cpu")}


class _Record(torch.autograd.Function):
    """Identity whose forward and backward write the torch state they run under into ``seen``."""

    @staticmethod
    def forward(ctx, x, seen):
        ctx.seen = seen
        seen.setdefault("forward", []).append(torch_state())
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        ctx.seen.setdefault("backward", []).append(torch_state())
        return grad, None


class Probe(nn.Module):
    def __init__(self, seen: dict) -> None:
        super().__init__()
        self.seen = seen

    def forward(self, x):
        return _Record.apply(x, self.seen)


def probed_workload(seen: dict) -> workloads.Workload:
    return workloads.Workload("probe", lambda: nn.Sequential(nn.Flatten(), nn.Linear(48, 10), Probe(seen)), (3, 4, 4),
                              10)


@pytest.fixture
def torch_defaults():
    """torch's own defaults outside the step (cudnn TF32 on, matmul TF32 off, no autotuning); restored after."""
    saved = torch_state()
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = False, True
    torch.backends.cudnn.benchmark = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved["matmul_tf32"], saved["cudnn_tf32"]
    torch.backends.cudnn.benchmark = saved["cudnn_benchmark"]


@pytest.fixture
def optimizer_states():
    """The torch state at every optimizer step, through torch's global step pre-hook."""
    states: list[dict[str, bool]] = []
    handle = register_optimizer_step_pre_hook(lambda *_: states.append(torch_state()))
    yield states
    handle.remove()


# -- 1. TF32 flags hold through backward and the optimizer step ------------------------------------------

@pytest.mark.parametrize("dtype", ["fp32", "tf32"])
def test_train_step_holds_tf32_flags_through_backward_and_optimizer(dtype, torch_defaults, optimizer_states):
    seen: dict = {}
    workload = probed_workload(seen)
    model = workload.build()
    inputs, labels = workloads.make_batch(workload, 4, "cpu")
    bench.build_step(workload, model, "train", inputs, labels, "cpu", dtype)()
    wanted = dtype == "tf32"
    for phase in (seen["forward"], seen["backward"], optimizer_states):
        assert [(s["matmul_tf32"], s["cudnn_tf32"]) for s in phase] == [(wanted, wanted)]
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == (False, True)  # restored


def test_autocast_covers_forward_only(torch_defaults):
    seen: dict = {}
    workload = probed_workload(seen)
    model = workload.build()
    inputs, labels = workloads.make_batch(workload, 4, "cpu")
    bench.build_step(workload, model, "train", inputs, labels, "cpu", "bf16")()
    assert seen["forward"][0]["autocast"] and not seen["backward"][0]["autocast"]
    assert (seen["backward"][0]["matmul_tf32"], seen["backward"][0]["cudnn_tf32"]) == (False, False)


@pytest.mark.parametrize("dtype", ["fp32", "tf32"])
def test_digits_training_holds_tf32_flags_through_backward(dtype, torch_defaults, optimizer_states, monkeypatch):
    seen: dict = {}
    build = parity.digits_cnn
    monkeypatch.setattr(parity, "digits_cnn", lambda: nn.Sequential(build(), Probe(seen)))
    parity.train_digits("cpu", dtype, steps=2)
    wanted = dtype == "tf32"
    assert {(s["matmul_tf32"], s["cudnn_tf32"]) for s in seen["backward"] + optimizer_states} == {(wanted, wanted)}
    assert len(seen["backward"]) == len(optimizer_states) == 2


# -- 9b. fp16 training scales its loss on CUDA ------------------------------------------------------------

class RecordingScaler:
    made: ClassVar[list[tuple[str, bool]]] = []

    def __init__(self, device="cuda", enabled=True, **_):
        self.made.append((device, enabled))
        self.calls: list[str] = []
        RecordingScaler.last = self

    def scale(self, loss):
        self.calls.append("scale")
        return loss

    def step(self, optimizer):
        self.calls.append("step")
        optimizer.step()

    def update(self):
        self.calls.append("update")


def test_digits_fp16_training_steps_through_a_grad_scaler_enabled_on_cuda(monkeypatch):
    RecordingScaler.made = []
    monkeypatch.setattr(torch.amp, "GradScaler", RecordingScaler)
    parity.train_digits("cpu", "fp16", steps=2)
    assert RecordingScaler.made == [("cpu", False)]  # a pass-through on the CPU ...
    assert RecordingScaler.last.calls == ["scale", "step", "update"] * 2  # ... that every step goes through
    RecordingScaler.made = []
    for device, dtype in (("cuda:0", "fp16"), ("cuda:1", "bf16"), ("cuda:0", "fp32"), ("cpu", "fp16")):
        numerics.grad_scaler(device, dtype)
    assert RecordingScaler.made == [("cuda", True), ("cuda", False), ("cuda", False), ("cpu", False)]


# -- 2. attention FLOPs: the MHA fast path is off while counting, fused SDPA is counted --------------------

def encoder_flops(batch: int, seq: int, width: int, hidden: int) -> int:
    """2 x MACs of one encoder layer: QKV and output projections (4 w^2 per token), the MLP
    (2 w h per token), and Q K^T plus P V (2 s w per token)."""
    return 2 * batch * seq * (4 * width * width + 2 * width * hidden + 2 * seq * width)


def test_eval_transformer_encoder_flops_match_the_analytic_count():
    layer = nn.TransformerEncoderLayer(64, 4, 128, batch_first=True).eval()
    x = torch.randn(2, 10, 64)
    with torch.no_grad():
        counted = profiling.count_flops(lambda: layer(x))
    assert counted == pytest.approx(encoder_flops(2, 10, 64, 128), rel=0.01)
    assert torch.backends.mha.get_fastpath_enabled()  # restored


def test_eval_multihead_attention_and_fused_sdpa_are_counted():
    attention = nn.MultiheadAttention(64, 4, batch_first=True).eval()  # what vit_b_16 uses
    x = torch.randn(2, 10, 64)
    with torch.inference_mode():
        counted = profiling.count_flops(lambda: attention(x, x, x, need_weights=False))
    assert counted == pytest.approx(2 * 2 * 10 * 4 * 64 * 64 + 4 * 2 * 10 * 10 * 64, rel=0.01)
    q = torch.randn(2, 4, 10, 16)
    assert (profiling.count_flops(lambda: nn.functional.scaled_dot_product_attention(q, q, q))
            == 4 * 2 * 4 * 10 * 10 * 16)


# -- 3. exact CUDA memory has no slack; sampled CPU memory keeps its 64 MiB ---------------------------------

@pytest.mark.parametrize(("exact", "fails"), [(True, True), (False, False)])
def test_memory_doubling_fails_exact_cuda_peaks_only(exact, fails):
    baseline = {"peak_memory_bytes": 40 * 2**20}
    measured = Measured("t[cuda:0-tiny]", [], "samples/s", True, {}, peak_memory_bytes=80 * 2**20, exact_memory=exact)
    judgement = judge(measured, baseline, Tolerances())
    assert bool(judgement.failures) is fails
    assert judgement.figures.memory_ratio == 2.0


def test_cuda_meter_reports_the_peak_of_what_was_allocated_inside(monkeypatch):
    allocated = {"now": 100 * 2**20, "peak": 100 * 2**20}
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats",
                        lambda device=None: allocated.update(peak=allocated["now"]))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: allocated["now"])
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: allocated["peak"])
    with PeakMemoryMeter("cuda:0") as meter:
        allocated["peak"] += 256 * 2**20  # a 256 MiB block, freed again
    assert meter.peak_bytes == 256 * 2**20  # an earlier test's 100 MiB is not this test's


# -- 4. the CPU reference of a speedup is measured once across workers --------------------------------------

def test_concurrent_callers_share_one_cpu_measurement(tmp_path):
    calls: list[int] = []
    start = threading.Barrier(3)
    results: list[list[float]] = []

    def measure() -> list[float]:
        calls.append(1)
        time.sleep(0.2)  # long enough that the other callers arrive while it runs
        return [10.0, 11.0, 12.0]

    def worker() -> None:
        start.wait()
        results.append(host_reference.measured_once("resnet18/train/bs8/fp32", measure, tmp_path))

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1 and results == [[10.0, 11.0, 12.0]] * 3
    assert host_reference.measured_once("resnet18/train/bs16/fp32", lambda: [1.0], tmp_path) == [1.0]  # other key


def test_another_process_reuses_the_measurement(tmp_path):
    host_reference.measured_once("alexnet/train/bs4/fp32", lambda: [5.0, 6.0], tmp_path)
    script = ("import sys; from pathlib import Path; from hwregress.measure.host_reference import measured_once\n"
              "def fail(): raise SystemExit('measured again')\n"
              "print(measured_once('alexnet/train/bs4/fp32', fail, Path(sys.argv[1])))")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True,
                          env={"PYTHONPATH": str(REPO / "src"), "PATH": ""}, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[5.0, 6.0]"


def test_host_identity_names_family_model_stepping_and_threads():
    identity = host_reference.host_cpu_identity()
    assert "family" in identity and "stepping" in identity
    assert f"{torch.get_num_threads()} torch threads" in identity


# -- 5. dtype support from the compute capability of the device under test -----------------------------------

def test_dtype_support_follows_the_capability_of_the_device_under_test(monkeypatch):
    devices = {0: fake_cuda.fake_properties(capability=(9, 0)),
               1: fake_cuda.fake_properties("Tesla V100-SXM2-16GB", (7, 0))}
    fake_cuda.install(monkeypatch, devices, current=0)
    for dtype in ("bf16", "tf32"):
        reason = support.dtype_unsupported_reason("cuda:1", dtype)
        assert reason is not None and "7.0" in reason and "8.0" in reason, reason
        assert support.dtype_unsupported_reason("cuda:0", dtype) is None
    assert support.dtype_unsupported_reason("cuda:1", "fp16") is None
    devices[1] = fake_cuda.fake_properties("NVIDIA A100-SXM4-80GB", (8, 0))
    assert support.dtype_unsupported_reason("cuda:1", "bf16") is None
    assert support.dtype_unsupported_reason("cuda:1", "tf32") is None


# -- 6. the NVML handle is the GPU under test, never the NVML index ------------------------------------------

@pytest.fixture
def machine(monkeypatch):
    """Three GPUs; CUDA_VISIBLE_DEVICES=1,2 makes cuda:1 NVML's GPU 2. torch's UUIDs are unknown to NVML."""
    gpus = [FakeGpu("00000000:18:00.0", "GPU-aaaa", 100_000), FakeGpu("00000000:3B:00.0", "GPU-bbbb", 200_000),
            FakeGpu("00000000:86:00.0", "GPU-cccc", 300_000)]
    nvml = FakeNvml(gpus)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    fake_cuda.install(monkeypatch, {0: fake_cuda.fake_properties(bus=0x3B, uuid="not-nvml-0"),
                                    1: fake_cuda.fake_properties(bus=0x86, uuid="not-nvml-1")})
    return nvml


def test_nvml_handle_is_found_by_pci_bus_id(machine):
    handle = NvmlDevice("cuda:1")
    assert handle.handle is machine.gpus[2] and machine.index_lookups == []
    assert handle.lookup == "pci bus id 00000000:86:00.0"
    assert handle.sample()["power_w"] == 300.0  # NVML's mW in W


def test_nvml_handle_falls_back_to_uuid(machine, monkeypatch):
    fake_cuda.install(monkeypatch, {0: fake_cuda.fake_properties(bus=0x99, uuid="bbbb")})
    handle = NvmlDevice("cuda:0")
    assert handle.handle is machine.gpus[1] and handle.lookup == "uuid GPU-bbbb"


def test_no_match_means_no_gpu_telemetry_with_the_reason(machine, monkeypatch):
    fake_cuda.install(monkeypatch, {0: fake_cuda.fake_properties(bus=0x99)})
    with telemetry.TelemetrySampler("cuda:0", interval_s=0.01) as sampler:
        pass
    summary = sampler.summary()
    assert not summary["gpu_available"] and machine.index_lookups == []
    assert "00000000:99:00.0" in summary["gpu_unavailable_reason"]
    assert "CUDA_VISIBLE_DEVICES" in summary["gpu_unavailable_reason"]
    assert machine.inits == machine.shutdowns == 1


def test_energy_comes_from_the_counter_in_joules(machine):
    with telemetry.TelemetrySampler("cuda:1", interval_s=10) as sampler:
        pass
    assert sampler.energy_source == "total-energy counter" and sampler.energy_j == pytest.approx(1.5)
    assert sampler.summary()["gpu_lookup"] == "pci bus id 00000000:86:00.0"


def test_a_counter_that_did_not_advance_falls_back_to_integrated_power(machine):
    machine.gpus[2].energy_step_mj = 0  # a window shorter than the counter's update interval
    sampler = telemetry.TelemetrySampler("cuda:1", interval_s=10)
    sampler._open_nvml()
    sampler._energy_start = sampler._nvml.energy_mj()
    sampler.series = [{"t_s": 0.0, "power_w": 300.0}, {"t_s": 0.5, "power_w": 300.0}]
    sampler.duration_s = 0.5
    sampler._finish_energy()
    assert sampler.energy_source == "integrated power" and sampler.energy_j == pytest.approx(150.0)


def test_pci_bus_id_is_built_in_nvml_format():
    assert pci_bus_id(fake_cuda.fake_properties(bus=0x86)) == "00000000:86:00.0"
    assert pci_bus_id(type("P", (), {"pci_bus_id": "0000:3b:00.0"})()) == "0000:3B:00.0"
    assert pci_bus_id(object()) is None


# -- 7. published peaks matched on the full name ---------------------------------------------------------------

@pytest.mark.parametrize(("device_name", "product", "bf16", "tb_s"), [
    ("NVIDIA H100 80GB HBM3", "H100 SXM", 989.4, 3.35),
    ("NVIDIA H100 PCIe", "H100 PCIe", 756.5, 2.0),
    ("NVIDIA H100 NVL", "H100 NVL", 835.5, 3.9),
    ("NVIDIA H200", "H200 SXM", 989.4, 4.8),
    ("NVIDIA H200 NVL", "H200 NVL", 835.5, 4.8),
    ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM", 312.0, 2.039),
    ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe", 312.0, 1.935),
    ("NVIDIA A100-PCIE-40GB", "A100 40GB PCIe", 312.0, 1.555),
    ("NVIDIA A100-SXM4-40GB", "A100 40GB SXM", 312.0, 1.555),
    ("Tesla V100-SXM2-16GB", "V100 SXM2", None, 0.9),
    ("Tesla V100-PCIE-32GB", "V100 PCIe", None, 0.9),
    ("Tesla V100S-PCIE-32GB", "V100S PCIe", None, 1.134),
    ("NVIDIA A10", "A10", 125.0, 0.6),
    ("NVIDIA L4", "L4", 121.0, 0.3),
    ("Tesla T4", "T4", None, 0.32),
])
def test_published_peak_by_full_name(device_name, product, bf16, tb_s):
    peak = roofline.published_peak(device_name)
    assert peak is not None and peak.name == product
    assert peak.tflops.get("bf16") == bf16 and peak.memory_tb_s == tb_s
    assert peak.source.startswith("NVIDIA ") and "datasheet" in peak.source


@pytest.mark.parametrize(("device_name", "reason_mentions"), [
    ("NVIDIA GH200 480GB", "GH200"),
    ("NVIDIA A10G", "no published peak"),
    ("NVIDIA L40S", "no published peak"),
    ("NVIDIA H800", "no published peak"),
    ("NVIDIA H100", "form factor"),
    ("Tesla V100-SXM3-32GB", "SXM3"),
    ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "SM count"),
    ("AMD EPYC", "no published peak"),
])
def test_no_peak_where_the_name_does_not_settle_it(device_name, reason_mentions):
    lookup = roofline.peak_lookup(device_name)
    assert lookup.peak is None and reason_mentions in lookup.reason


def test_mig_instance_peaks_scale_by_its_share_of_sms_and_memory():
    peak = roofline.published_peak("NVIDIA H100 80GB HBM3 MIG 1g.10gb", sm_count=16)
    assert peak.tflops["bf16"] == pytest.approx(989.4 * 16 / 132)
    assert peak.memory_tb_s == pytest.approx(3.35 / 8)
    assert "16/132 SMs" in peak.source
    assert roofline.mfu(10.0, "NVIDIA H100 80GB HBM3 MIG 1g.10gb", "bf16") is None  # no SM count, no MFU
    flagged = roofline.peak_lookup("NVIDIA A100-SXM4-40GB", sm_count=14, mig=True)
    assert flagged.peak is None and "profile" in flagged.reason  # a MIG flag without a profile name


# -- 8. cuBLAS/cuDNN allocation failures are out of memory ----------------------------------------------------

@pytest.mark.parametrize("message", [
    "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
    "cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
    "Unable to find a valid cuDNN algorithm to run convolution",
])
def test_library_allocation_failures_are_out_of_memory_and_release_memory(message, monkeypatch):
    released: list[str] = []
    monkeypatch.setattr(out_of_memory, "release_device_memory", released.append)

    class Failing(nn.Module):
        def forward(self, x):
            raise RuntimeError(message)

    workload = workloads.Workload("failing", Failing, (3, 4, 4), 10)
    with pytest.raises(out_of_memory.OutOfMemory, match="out of memory at batch 64 on cpu"):
        bench.run_model(workload, "cpu", "infer", 64, "fp32", FixedTimer(), bench.RunOptions(QUICK, profile_steps=0))
    assert released == ["cpu"]
    assert not out_of_memory.is_out_of_memory(RuntimeError("cuDNN error: CUDNN_STATUS_BAD_PARAM"))


# -- 9. cudnn.benchmark set for the window, restored after, and recorded ----------------------------------------

@pytest.mark.parametrize("autotune", [True, False])
def test_cudnn_benchmark_holds_inside_the_step_and_is_restored(autotune, torch_defaults):
    torch.backends.cudnn.benchmark = not autotune
    seen: dict = {}
    options = bench.RunOptions(QUICK, telemetry_interval_s=0.05, profile_steps=1, cudnn_benchmark=autotune)
    bench.run_model(probed_workload(seen), "cpu", "train", 4, "fp32", FixedTimer(), options)
    assert {s["cudnn_benchmark"] for s in seen["forward"] + seen["backward"]} == {autotune}
    assert torch.backends.cudnn.benchmark is (not autotune)


def test_fingerprint_records_cudnn_benchmark_as_performance_relevant():
    assert environment_fingerprint("cuda:0")["cudnn_benchmark"] == "True"
    assert environment_fingerprint("cuda:0", cudnn_benchmark=False)["cudnn_benchmark"] == "False"
    assert environment_fingerprint("cpu")["cudnn_benchmark"] is None
    assert "cudnn_benchmark" in PERFORMANCE_RELEVANT
    assert (fingerprint_changes({"cudnn_benchmark": "False"}, {"cudnn_benchmark": "True"})
            == ["cudnn_benchmark False -> True"])
    # older baseline
    assert fingerprint_changes({"torch": "2.13.0"}, {"torch": "2.13.0", "cudnn_benchmark": "True"}) == []


# -- 10. MIG instances by their MIG UUID; Hopper's 1 s power average never invalidates a short window ----------

MIG_UUID = "MIG-1f2e3d4c-5b6a-7980-a1b2-c3d4e5f60718"


@pytest.fixture
def mig_machine(monkeypatch):
    """One H100 in MIG mode at bus 0x18 with two instances; torch's cuda:0 is the second instance. CUDA reports
    the instance's MIG UUID without prefix (cuDeviceGetUuid_v2: "If the device is in MIG mode, returns its MIG
    UUID") and the parent GPU's PCI address."""
    instances = [FakeGpu("00000000:18:00.0", "MIG-00000000-0000-0000-0000-000000000001", 0),
                 FakeGpu("00000000:18:00.0", MIG_UUID, 0)]
    gpu = FakeGpu("00000000:18:00.0", "GPU-parent", 350_000, mig_devices=instances)
    nvml = FakeNvml([gpu])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    fake_cuda.install(monkeypatch, {0: fake_cuda.fake_properties(name="NVIDIA H100 80GB HBM3 MIG 1g.10gb", bus=0x18,
                                                                 uuid=MIG_UUID.removeprefix("MIG-"), sms=16)})
    return nvml


def test_mig_instance_handle_is_found_by_its_mig_uuid_before_the_bus_id(mig_machine, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", MIG_UUID)
    handle = NvmlDevice("cuda:0")
    instance = mig_machine.gpus[0].mig_devices[1]
    assert handle.handle is instance and handle.lookup == f"mig uuid {MIG_UUID}"
    assert mig_machine.gpus[0].lookups == []  # the whole GPU's bus id was never asked


def test_mig_uuid_comes_from_torch_when_the_name_says_mig(mig_machine, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert NvmlDevice("cuda:0").handle is mig_machine.gpus[0].mig_devices[1]


def test_mig_instance_is_found_among_its_gpus_instances_where_uuid_lookup_refuses(mig_machine, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", MIG_UUID)
    mig_machine.mig_uuid_lookup = False  # a driver whose nvmlDeviceGetHandleByUUID knows GPUs only
    handle = NvmlDevice("cuda:0")
    assert handle.handle is mig_machine.gpus[0].mig_devices[1]
    assert handle.lookup == f"mig uuid {MIG_UUID} among the MIG devices of the GPU at pci bus id 00000000:18:00.0"


def test_short_window_on_hopper_is_not_invalid_and_its_energy_is_the_counters(monkeypatch):
    """0.3 s at 700 W after idle at 100 W: the counter advances 210 J, NVML's 1 s averages read 160-280 W (mean
    220 W, E = P t would say 66 J: 3.2x off, which the plain 2x rule calls impossible)."""
    hopper = FakeGpu("00000000:18:00.0", "GPU-hopper", 100_000, energy_step_mj=210_000,
                     architecture=FakeNvml.NVML_DEVICE_ARCH_HOPPER)
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml([hopper]))
    fake_cuda.install(monkeypatch, {0: fake_cuda.fake_properties(bus=0x18)})
    sampler = telemetry.TelemetrySampler("cuda:0", interval_s=10)
    sampler._open_nvml()
    sampler._energy_start = sampler._nvml.energy_mj()
    sampler.series = [{"t_s": 0.1, "power_w": 160.0}, {"t_s": 0.2, "power_w": 220.0}, {"t_s": 0.3, "power_w": 280.0}]
    sampler.duration_s = 0.3
    sampler._finish_energy()
    summary = sampler.summary()
    assert (summary["energy_j"], summary["energy_source"]) == (pytest.approx(210.0), "total-energy counter")
    assert summary["power_averaging_s"] == 1.0
    assert "averaged over 1 s, not the 0.3 s window" in summary["power_note"]
    record = TestRecord(test_id="t", model="resnet50", mode="train", device="cuda:0", dtype="fp32", batch_size=8,
                        telemetry=summary)
    assert evidence.physics_of(record, {}) == []


def test_old_architectures_read_instantaneous_power(monkeypatch):
    volta = FakeGpu("00000000:18:00.0", "GPU-volta", 250_000, architecture=FakeNvml.NVML_DEVICE_ARCH_VOLTA)
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml([volta]))
    fake_cuda.install(monkeypatch, {0: fake_cuda.fake_properties(bus=0x18)})
    assert NvmlDevice("cuda:0").power_averaging_s == 0.0


class JobRoot:
    """A psutil-like process standing for the pytest worker that launched a job: two ranks and a sibling under it."""

    pid = 1000

    def __init__(self, descendants: list[int]) -> None:
        self.descendants = [types.SimpleNamespace(pid=pid) for pid in descendants]

    def cpu_times(self):
        return types.SimpleNamespace(user=1.0, system=0.0, children_user=0.0, children_system=0.0)

    def children(self, recursive: bool = False):
        return self.descendants


def test_the_jobs_other_processes_on_the_gpu_are_ours(machine):
    """Co-located ranks share cuda:1: NVML lists the other rank (1002) beside a stranger (4242); only the stranger
    is contention."""
    machine.gpus[2].processes = [os.getpid(), 1002, 4242]
    probe = health.CpuHealthProbe(process=JobRoot([1001, 1002, 1003]))
    with telemetry.TelemetrySampler("cuda:1", interval_s=10, health_probe=probe) as sampler:
        pass
    assert [p["pid"] for p in sampler.health["gpu_other_processes"]] == [4242]


@pytest.mark.parametrize(("device_name", "int8", "fp8"), [
    ("NVIDIA H100 80GB HBM3", 1979.0, 1979.0),  # sheet: 3,958* each (sparse)
    ("NVIDIA H100 PCIe", 1513.0, 1513.0),  # 3,026*
    ("NVIDIA H100 NVL", 1670.5, 1670.5),  # 3,341*
    ("NVIDIA H200", 1979.0, 1979.0),
    ("NVIDIA H200 NVL", 1670.5, 1670.5),
    ("NVIDIA A100-SXM4-80GB", 624.0, None),  # Ampere has no fp8
    ("NVIDIA L4", 242.5, 242.5),  # 485*
    ("NVIDIA A10", 250.0, None),
    ("Tesla T4", 130.0, None),
    ("Tesla V100-SXM2-16GB", None, None),  # no int8 tensor-core figure on its sheet
])
def test_int8_and_fp8_peaks_are_the_datasheets_dense_figures_and_give_an_mfu(device_name, int8, fp8):
    peak = roofline.published_peak(device_name)
    assert peak.tflops.get("int8") == int8 and peak.tflops.get("fp8") == fp8
    assert roofline.mfu(100.0, device_name, "int8") == (None if int8 is None else 100.0 / int8)
    assert roofline.mfu(100.0, device_name, "fp8") == (None if fp8 is None else 100.0 / fp8)

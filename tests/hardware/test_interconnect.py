"""Interconnect roofs: the PCIe encoding table, NVLink figures by GPU name, the PCIe link and NVLink state
read from the right GPU's NVML handle (through fakes), the published roof of each bus ceiling, and the
``d2h``/``p2p`` ceilings' reasons for not running here. The GPU-only tests at the end run the copies."""

from __future__ import annotations

import sys

import pytest
import torch
from fakes import cuda as fake_cuda
from fakes.nvml import FakeGpu, FakeNvml

from hwregress.hardware import interconnect
from hwregress.measure import ceilings
from hwregress.measure.ceilings import CeilingMeasurement, CeilingSpec, CeilingUnsupported
from hwregress.measure.timing import CudaEventTimer, HostClockTimer, TimingPlan

QUICK = TimingPlan(warmup_steps=1, rounds=3, min_round_s=0.001, budget_s=0.5)


# -- PCIe encoding ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("generation, width, gbps", [
    (1, 16, 4.0), (2, 16, 8.0), (3, 16, 15.754), (4, 16, 31.508), (5, 16, 63.015), (6, 16, 121.0),
    (3, 1, 0.985), (4, 1, 1.969), (5, 1, 3.938), (6, 1, 7.5625), (4, 8, 15.754),
])
def test_pcie_bandwidth_per_direction_after_line_encoding(generation, width, gbps):
    assert interconnect.pcie_bandwidth_gbps(generation, width) == pytest.approx(gbps, abs=1e-3)


@pytest.mark.parametrize("generation, width, message", [
    (7, 16, "PCIe generation 7 is unknown; use 1-6"),
    (0, 16, "PCIe generation 0 is unknown"),
    (4, 3, "PCIe link width x3 is not one the specification defines"),
    (4, 0, "PCIe link width x0"),
])
def test_pcie_bandwidth_rejects_what_no_specification_defines(generation, width, message):
    with pytest.raises(ValueError, match=message):
        interconnect.pcie_bandwidth_gbps(generation, width)


# -- NVLink by name --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, product, version, links, per_direction", [
    ("NVIDIA H100 80GB HBM3", "H100 SXM", 4, 18, 450.0),
    ("NVIDIA H100 SXM5 80GB", "H100 SXM", 4, 18, 450.0),
    ("NVIDIA H200", "H200 SXM", 4, 18, 450.0),
    ("NVIDIA A100-SXM4-80GB", "A100 SXM4", 3, 12, 300.0),
    ("NVIDIA A100-SXM4-40GB", "A100 SXM4", 3, 12, 300.0),
    ("NVIDIA B200", "B200", 5, 18, 900.0),
    ("Tesla V100-SXM2-32GB", "V100 SXM2", 2, 6, 150.0),
])
def test_nvlink_figures_of_sxm_gpus(name, product, version, links, per_direction):
    link = interconnect.nvlink_published(name)
    assert link is not None and (link.product, link.version, link.links) == (product, version, links)
    assert link.per_direction_gbps == per_direction and link.bidirectional_gbps == 2 * per_direction
    assert "datasheet" in link.source


@pytest.mark.parametrize("name", ["NVIDIA H100 PCIe", "NVIDIA H100 NVL", "NVIDIA H200 NVL", "NVIDIA A100 80GB PCIe",
                                  "NVIDIA A100-PCIE-40GB", "Tesla V100-PCIE-32GB", "NVIDIA L4", "NVIDIA H100",
                                  "NVIDIA GH200 480GB", "NVIDIA GB200", "Tesla T4", "AMD EPYC 7B13"])
def test_no_nvlink_figure_for_pcie_cards_and_names_that_cannot_tell(name):
    assert interconnect.nvlink_published(name) is None


# -- NVML through the fake: the right GPU's link --------------------------------------------------------------

@pytest.fixture
def machine(monkeypatch):
    """Three GPUs; cuda:0 is NVML's GPU 1 (Gen5 x16, idle at Gen1), cuda:1 NVML's GPU 2 (Gen4 x8, 18 NVLinks
    of which 17 up). The fake has no PCIe or NVLink calls: they are added here, answering per GPU."""
    gpus = [FakeGpu("00000000:18:00.0", "GPU-aaaa", 100_000), FakeGpu("00000000:3B:00.0", "GPU-bbbb", 200_000),
            FakeGpu("00000000:86:00.0", "GPU-cccc", 300_000)]
    nvml = FakeNvml(gpus)
    links = {gpus[0].bus_id: (3, 16, 3, 16), gpus[1].bus_id: (5, 16, 1, 16), gpus[2].bus_id: (4, 8, 4, 8)}
    nvlinks = {gpus[0].bus_id: [], gpus[1].bus_id: [], gpus[2].bus_id: [1] * 17 + [0]}

    def state(handle: FakeGpu, link: int) -> int:
        if not nvlinks[handle.bus_id]:
            raise RuntimeError("NVMLError_NotSupported")
        if link >= len(nvlinks[handle.bus_id]):
            raise RuntimeError("NVMLError_InvalidArgument")
        return nvlinks[handle.bus_id][link]

    monkeypatch.setattr(nvml, "nvmlDeviceGetMaxPcieLinkGeneration", lambda h: links[h.bus_id][0], raising=False)
    monkeypatch.setattr(nvml, "nvmlDeviceGetMaxPcieLinkWidth", lambda h: links[h.bus_id][1], raising=False)
    monkeypatch.setattr(nvml, "nvmlDeviceGetCurrPcieLinkGeneration", lambda h: links[h.bus_id][2], raising=False)
    monkeypatch.setattr(nvml, "nvmlDeviceGetCurrPcieLinkWidth", lambda h: links[h.bus_id][3], raising=False)
    monkeypatch.setattr(nvml, "nvmlDeviceGetNvLinkState", state, raising=False)
    monkeypatch.setattr(nvml, "NVML_FEATURE_ENABLED", 1, raising=False)
    monkeypatch.setattr(nvml, "NVML_NVLINK_MAX_LINKS", 18, raising=False)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    fake_cuda.install(monkeypatch, {0: fake_cuda.fake_properties(bus=0x3B), 1: fake_cuda.fake_properties(bus=0x86)})
    return nvml


def test_pcie_link_is_the_gpu_under_test_max_and_current(machine):
    link = interconnect.pcie_link("cuda:0")
    assert link == interconnect.PcieLink(5, 16, 1, 16)
    assert link.published_gbps == pytest.approx(63.015, abs=1e-3)  # the max link, not the idle Gen1
    assert link.describe() == "PCIe Gen5 x16 (link now Gen1 x16)"
    assert interconnect.pcie_link("cuda:1") == interconnect.PcieLink(4, 8, 4, 8)
    assert machine.index_lookups == [] and machine.inits == machine.shutdowns == 2


def test_pcie_link_without_a_readable_current_link(machine, monkeypatch):
    def unsupported(handle):
        raise RuntimeError("NVMLError_NotSupported")

    monkeypatch.setattr(machine, "nvmlDeviceGetCurrPcieLinkWidth", unsupported)
    link = interconnect.pcie_link("cuda:0")
    assert link == interconnect.PcieLink(5, 16, 1, None) and link.describe() == "PCIe Gen5 x16"
    monkeypatch.setattr(machine, "nvmlDeviceGetMaxPcieLinkWidth", unsupported)
    assert interconnect.pcie_link("cuda:0") is None


def test_a_link_outside_the_specification_has_no_published_figure():
    assert interconnect.PcieLink(0, 0, None, None).published_gbps is None


def test_no_link_off_cuda_or_without_nvml(machine, monkeypatch):
    assert interconnect.pcie_link("cpu") is None and interconnect.active_nvlinks("mps") is None
    assert machine.inits == 0
    fake_cuda.install(monkeypatch, {0: fake_cuda.fake_properties(bus=0x99, uuid="nowhere")})
    assert interconnect.pcie_link("cuda:0") is None  # no NVML device matches: never NVML's index 0
    assert machine.index_lookups == []
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    assert interconnect.pcie_link("cuda:0") is None and interconnect.active_nvlinks("cuda:0") is None


def test_active_nvlinks_counts_links_up_until_nvml_errors(machine, monkeypatch):
    assert interconnect.active_nvlinks("cuda:1") == 17
    assert interconnect.active_nvlinks("cuda:0") == 0  # NotSupported at link 0: no NVLink
    monkeypatch.delattr(machine, "nvmlDeviceGetNvLinkState")
    assert interconnect.active_nvlinks("cuda:1") is None  # a pynvml that cannot ask: unknown, not 0


# -- published roofs ------------------------------------------------------------------------------------------

def test_host_bus_ceilings_sit_beside_the_max_pcie_link(machine):
    for name in ("h2d", "d2h"):
        gbps, source = interconnect.published_roof(name, "cuda:0", "NVIDIA H100 80GB HBM3")
        assert gbps == pytest.approx(63.015, abs=1e-3)
        assert "PCIe Gen5 x16 (link now Gen1 x16): 63.0 GB/s per direction after 128b/130b" in source
        assert "PCI Express Base Specification 5.0" in source


def test_p2p_and_allreduce_sit_beside_nvlink_when_links_are_up(machine):
    gbps, source = interconnect.published_roof("p2p", "cuda:1", "NVIDIA H100 80GB HBM3")
    assert gbps == 450.0 and "NVLink 4, 18 links" in source and "17 of 18 links active" in source
    assert "nccl-tests" not in source
    gbps, source = interconnect.published_roof("allreduce", "cuda:1", "NVIDIA H100 80GB HBM3")
    assert gbps == 450.0 and "doc/PERFORMANCE.md" in source


def test_p2p_and_allreduce_fall_back_to_pcie_without_active_nvlink(machine):
    for name in ("p2p", "allreduce"):
        gbps, source = interconnect.published_roof(name, "cuda:0", "NVIDIA H100 80GB HBM3")
        assert gbps == pytest.approx(63.015, abs=1e-3) and source.startswith("PCIe Gen5 x16")


def test_a_bridged_pcie_card_has_no_published_p2p_roof(machine):
    # links are up but the card's bridge figure is not tabled: the PCIe figure would understate the link
    assert interconnect.published_roof("p2p", "cuda:1", "NVIDIA H100 PCIe") is None
    gbps, _ = interconnect.published_roof("h2d", "cuda:1", "NVIDIA H100 PCIe")
    assert gbps == pytest.approx(15.754, abs=1e-3)  # Gen4 x8


def test_no_published_roof_off_cuda_without_nvml_or_for_device_ceilings(machine, monkeypatch):
    for name in interconnect.INTERCONNECT_CEILINGS:
        assert interconnect.published_roof(name, "cpu", "AMD EPYC 7B13") is None
    assert interconnect.published_roof("gemm", "cuda:0", "NVIDIA H100 80GB HBM3") is None
    assert interconnect.published_roof("copy", "cuda:0", "NVIDIA H100 80GB HBM3") is None
    with pytest.raises(ValueError, match="unknown ceiling 'h2D'; interconnect ceilings are h2d, d2h, p2p, allreduce"):
        interconnect.published_roof("h2D", "cuda:0", "NVIDIA H100 80GB HBM3")
    monkeypatch.setitem(sys.modules, "pynvml", None)
    for name in interconnect.INTERCONNECT_CEILINGS:
        assert interconnect.published_roof(name, "cuda:0", "NVIDIA H100 80GB HBM3") is None


# -- ceilings: d2h and p2p ------------------------------------------------------------------------------------

def test_default_spec_sizes_of_the_bus_ceilings():
    for name in ("h2d", "d2h", "p2p", "copy"):
        assert ceilings.default_spec(name, "cuda:0") == CeilingSpec(name, "GB/s", 2**30)
        assert ceilings.default_spec(name, "cpu") == CeilingSpec(name, "GB/s", 256 * 2**20)
    assert ceilings.default_spec("gemm", "cuda:0") == CeilingSpec("gemm", "TFLOP/s", 8192)
    with pytest.raises(ValueError, match="unknown ceiling 'allreduce'; use gemm, copy, h2d, d2h, p2p"):
        ceilings.default_spec("allreduce", "cuda:0")


@pytest.mark.parametrize("name, device, reason", [
    ("d2h", "cpu", "d2h needs a CUDA device, got cpu"),
    ("h2d", "cpu", "h2d needs a CUDA device, got cpu"),
    ("d2h", "mps", "d2h needs a CUDA device, got mps"),
    ("p2p", "cpu", "p2p needs a CUDA device, got cpu"),
])
def test_bus_ceilings_off_cuda_raise_the_reason(name, device, reason):
    assert ceilings.unsupported_reason(name, device).startswith(reason)
    with pytest.raises(CeilingUnsupported, match=reason) as raised:
        ceilings.run_ceiling(ceilings.default_spec(name, device), device, "fp32", HostClockTimer(device), QUICK)
    assert isinstance(raised.value, ValueError)  # callers that caught h2d's ValueError still do


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
def test_p2p_without_any_cuda_device():
    with pytest.raises(CeilingUnsupported, match="p2p needs two CUDA devices, 0 visible"):
        ceilings.run_ceiling(ceilings.default_spec("p2p", "cuda:0"), "cuda:0", "fp32", HostClockTimer("cpu"), QUICK)


def test_p2p_with_one_gpu_raises_the_reason(monkeypatch):
    fake_cuda.install(monkeypatch, {0: fake_cuda.fake_properties()})
    assert ceilings.unsupported_reason("p2p", "cuda:0").startswith("p2p needs two CUDA devices, 1 visible")
    with pytest.raises(CeilingUnsupported, match="p2p needs two CUDA devices, 1 visible"):
        ceilings.run_ceiling(ceilings.default_spec("p2p", "cuda:0"), "cuda:0", "fp32", HostClockTimer("cpu"), QUICK)


def test_p2p_route_is_the_next_visible_gpu_with_its_peer_access(monkeypatch):
    fake_cuda.install(monkeypatch, {0: fake_cuda.fake_properties(bus=0x18), 1: fake_cuda.fake_properties(bus=0x3B),
                                    2: fake_cuda.fake_properties("NVIDIA A100-SXM4-80GB", bus=0x86)}, current=1)
    asked = []
    monkeypatch.setattr(torch.cuda, "can_device_access_peer", lambda a, b: asked.append((a, b)) or b != 0)
    assert ceilings.p2p_route("cuda:1") == ceilings.PeerRoute("cuda:1", "cuda:2", "NVIDIA A100-SXM4-80GB", True)
    route = ceilings.p2p_route("cuda:2")  # wraps around to the first GPU
    assert route.facts() == {"peer": "cuda:0", "peer_name": "NVIDIA H100 80GB HBM3", "peer_direct_access": False}
    assert ceilings.p2p_route("cuda").peer == "cuda:2"  # the current device, cuda:1
    assert asked == [(1, 2), (2, 0), (1, 2)]
    assert ceilings.unsupported_reason("p2p", "cuda:0") is None


def test_existing_ceilings_still_run_and_carry_no_facts():
    spec = CeilingSpec("copy", "GB/s", 2**20)
    measurement = ceilings.run_ceiling(spec, "cpu", "fp32", HostClockTimer("cpu"), QUICK, telemetry_interval_s=0.01)
    assert isinstance(measurement, CeilingMeasurement) and measurement.facts == {}
    assert len(measurement.throughput_samples) >= 3 and min(measurement.throughput_samples) > 0
    assert measurement.work_per_step == 2 * 2**20 / 1e9  # read and write


# -- GPU only: the copies themselves --------------------------------------------------------------------------

def _measure_on_gpu(name: str) -> CeilingMeasurement:
    spec = CeilingSpec(name, "GB/s", 256 * 2**20)
    return ceilings.run_ceiling(spec, "cuda:0", "fp32", CudaEventTimer("cuda:0"), QUICK, telemetry_interval_s=0.05)


def _within_published(name: str, measurement: CeilingMeasurement) -> None:
    published = interconnect.published_roof(name, "cuda:0", torch.cuda.get_device_name(0))
    median = sorted(measurement.throughput_samples)[len(measurement.throughput_samples) // 2]
    assert median > 0
    if published is not None:  # a copy cannot beat its link; 5% for the published figure's rounding
        assert median <= 1.05 * published[0], (median, published)


@pytest.mark.parametrize("name", ["h2d", "d2h"])
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_host_bus_copy_stays_under_the_published_pcie_figure(name):
    measurement = _measure_on_gpu(name)
    assert measurement.facts == {} and measurement.work_per_step == 256 * 2**20 / 1e9
    _within_published(name, measurement)


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_p2p_copy_records_its_peer_and_stays_under_the_published_figure():
    measurement = _measure_on_gpu("p2p")
    assert measurement.facts["peer"] == "cuda:1"
    assert measurement.facts["peer_direct_access"] == torch.cuda.can_device_access_peer(0, 1)
    _within_published("p2p", measurement)


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() != 1, reason="needs exactly one CUDA device")
def test_p2p_on_a_single_gpu_machine_says_why_not():
    with pytest.raises(CeilingUnsupported, match="p2p needs two CUDA devices, 1 visible"):
        _measure_on_gpu("p2p")

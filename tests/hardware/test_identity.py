"""Hardware identity: parsing /proc/cpuinfo and lscpu, GPU facts through a fake NVML, what changed."""

from __future__ import annotations

import types

import pytest

from hwregress.hardware import facts, identity

EPYC_ZEN3 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC
stepping\t: 1
cache size\t: 512 KB
flags\t\t: fpu sse sse2 avx avx2 fma bmi2

processor\t: 1
vendor_id\t: AuthenticAMD
cpu family\t: 99
"""

SAPPHIRE_RAPIDS_FLAGS = ("flags : avx2 fma avx512f avx512bw avx512_vnni avx512_bf16 avx512_fp16 "
                         "amx_bf16 amx_tile amx_int8\n")

GRACE = """processor\t: 0
BogoMIPS\t: 2000.00
Features\t: fp asimd evtstrm sha3 sve sve2 bf16
CPU implementer\t: 0x41
"""

LSCPU = """Model name:                              AMD EPYC
CPU max MHz:                             3700.0000
L1d cache:                               96 KiB (2 instances)
L2 cache:                                2 MiB (2 instances)
L3 cache:                                32 MiB (1 instance)
"""


def test_proc_cpuinfo_first_processor_only():
    found = identity.parse_proc_cpuinfo(EPYC_ZEN3)
    assert found["cpu_vendor"] == "AuthenticAMD"
    assert (found["cpu_family"], found["cpu_model"], found["cpu_stepping"]) == (25, 1, 1)
    assert found["cpu_brand"] == "AMD EPYC"
    assert found["cpu_avx2"] is True and found["cpu_fma"] is True
    assert found["cpu_avx512f"] is False and found["cpu_amx_tile"] is False


def test_isa_features_on_x86_and_arm():
    spr = identity.parse_proc_cpuinfo(SAPPHIRE_RAPIDS_FLAGS)
    assert all(spr[f"cpu_{f}"] for f in ("avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16"))
    arm = identity.parse_proc_cpuinfo(GRACE)
    assert arm["cpu_asimd"] and arm["cpu_sve"] and arm["cpu_sve2"] and not arm["cpu_avx2"]


def test_lscpu_cache_sizes_and_clock():
    assert identity.parse_lscpu(LSCPU) == {"cpu_l2_cache_bytes": 2 * 2**20, "cpu_l3_cache_bytes": 32 * 2**20,
                                           "cpu_max_mhz": 3700.0}
    assert identity.parse_lscpu("L2:   512K\nL3:  16384K\n") == {"cpu_l2_cache_bytes": 512 * 2**10,
                                                              "cpu_l3_cache_bytes": 16384 * 2**10}


def test_cpu_identity_merges_sources_and_calls_py_cpuinfo_only_for_unknowns():
    calls = []

    def fake_py_cpuinfo():
        calls.append(1)
        return {"vendor_id_raw": "GenuineIntel", "brand_raw": "Intel Xeon", "family": 6, "model": 143,
                "stepping": 8, "flags": ["avx2", "avx512vnni"], "l2_cache_size": 2**21}

    full = identity.cpu_identity(proc_cpuinfo=EPYC_ZEN3, lscpu=LSCPU, py_cpuinfo=fake_py_cpuinfo)
    assert calls == []  # /proc/cpuinfo knew everything py-cpuinfo could add
    assert full["cpu_family"] == 25 and full["cpu_l3_cache_bytes"] == 32 * 2**20
    assert full["cpu_logical_cores"] and full["torch_threads"]
    fallback = identity.cpu_identity(proc_cpuinfo="", lscpu="", py_cpuinfo=fake_py_cpuinfo)
    assert calls == [1]
    assert (fallback["cpu_vendor"], fallback["cpu_family"], fallback["cpu_model"]) == ("GenuineIntel", 6, 143)
    assert fallback["cpu_avx512_vnni"] is True  # py-cpuinfo's "avx512vnni" spelling


def test_cpu_identity_never_raises():
    def broken():
        raise RuntimeError("CPUID child died")

    found = identity.cpu_identity(proc_cpuinfo="garbage without colons\n\x00", lscpu="L2 cache: lots",
                                  py_cpuinfo=broken)
    assert found["cpu_family"] is None and found["cpu_l2_cache_bytes"] is None
    assert set(facts.CPU_PERFORMANCE_FIELDS) <= set(found)


def test_this_cpu_identity_is_a_fresh_copy():
    first = identity.this_cpu_identity()
    first["cpu_family"] = "tampered"
    assert identity.this_cpu_identity()["cpu_family"] != "tampered"


class NotSupported(Exception):
    """Like pynvml.NVMLError_NotSupported."""


class FakeNvml:
    """The NVML calls gpu_identity makes; MIG mode is not supported (consumer GPUs, old drivers)."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2

    def __init__(self):
        self.looked_up = []

    def nvmlDeviceGetHandleByPciBusId(self, bus_id):
        self.looked_up.append(bus_id)
        return "handle-0"

    def nvmlDeviceGetHandleByIndex(self, index):
        raise AssertionError("identity must not look GPUs up by NVML index")

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle):
        return 700_000

    def nvmlDeviceGetEnforcedPowerLimit(self, handle):
        return 500_000

    def nvmlDeviceGetMaxClockInfo(self, handle, clock):
        return 1980 if clock == self.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetMigMode(self, handle):
        raise NotSupported("Not Supported")

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle):
        return 5

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle):
        return 16

    def nvmlDeviceGetEccMode(self, handle):
        return (1, 1)

    def nvmlDeviceGetName(self, handle):
        return b"NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetMemoryInfo(self, handle):
        return types.SimpleNamespace(total=80 * 2**30)

    def nvmlDeviceGetUUID(self, handle):
        return "GPU-1234"


H100_PROPS = types.SimpleNamespace(name="NVIDIA H100 80GB HBM3", total_memory=85_000_000_000,
                                   multi_processor_count=132, major=9, minor=0, pci_bus_id="00000000:18:00.0")


def test_gpu_identity_from_torch_and_nvml_with_a_failing_read():
    nvml = FakeNvml()
    found = identity.gpu_identity(0, nvml, props=H100_PROPS)
    assert nvml.looked_up == ["00000000:18:00.0"]
    assert found["gpu_name"] == "NVIDIA H100 80GB HBM3" and found["gpu_memory_bytes"] == 85_000_000_000
    assert (found["gpu_sm_count"], found["gpu_compute_capability"]) == (132, "9.0")
    assert (found["gpu_power_limit_default_w"], found["gpu_power_limit_enforced_w"]) == (700.0, 500.0)
    assert (found["gpu_max_sm_clock_mhz"], found["gpu_max_mem_clock_mhz"]) == (1980, 2619)
    assert (found["gpu_pcie_max_gen"], found["gpu_pcie_max_width"], found["gpu_ecc_mode"]) == (5, 16, True)
    assert found["gpu_mig_mode"] is None  # the NVML error cost that field only


def test_gpu_identity_without_nvml_or_torch():
    assert identity.gpu_identity(0, None, props=H100_PROPS)["gpu_power_limit_default_w"] is None
    found = identity.gpu_identity(0, FakeNvml(), props=None, handle="handle-0")
    assert found["gpu_name"] == "NVIDIA H100 80GB HBM3"  # NVML fills what torch could not say
    assert found["gpu_sm_count"] is None


def test_a_gpu_identity_names_its_host(monkeypatch):
    # a launch-bound GPU test measures its host too: the identity a GPU record keeps says which host it was
    monkeypatch.setattr(identity, "cpu_identity", lambda: {"cpu_brand": "Intel Xeon 8480", "cpu_logical_cores": 16})
    identity._cached_device_identity.cache_clear()
    try:
        found = identity.device_identity("cuda:0")
    finally:
        identity._cached_device_identity.cache_clear()
    assert (found["host_cpu_brand"], found["host_logical_cores"]) == ("Intel Xeon 8480", 16)
    assert "gpu_name" in found and set(facts.UNIT_FIELDS) <= set(found)


def test_identity_changes_only_for_fields_known_on_both_sides():
    stored = {"cpu_family": 25, "cpu_model": 1, "cpu_avx512f": False, "cpu_l3_cache_bytes": None, "memory_gib": 8}
    current = {"cpu_family": 26, "cpu_model": 1, "cpu_avx512f": True, "cpu_l3_cache_bytes": 2**25, "memory_gib": 16}
    assert facts.identity_changes(stored, current) == ["cpu_family: 25 -> 26", "cpu_avx512f: False -> True"]
    assert facts.identity_changes({}, current) == []  # an old baseline without an identity


@pytest.mark.parametrize(("fields", "suffix", "key"), [
    ({"cpu_brand": "AMD EPYC", "cpu_family": 25, "cpu_model": 1, "torch_threads": 2}, "f25m1", "amd-epyc-f25m1-2t"),
    ({"cpu_brand": "AMD EPYC", "cpu_family": 26, "cpu_model": 2, "torch_threads": 2}, "f26m2", "amd-epyc-f26m2-2t"),
    ({"cpu_brand": "Intel(R) Xeon(R) CPU @ 2.20GHz", "cpu_family": 6, "cpu_model": 85, "torch_threads": 4},
     "f6m85", "intel-r-xeon-r-cpu-2-20ghz-f6m85-4t"),
    ({"cpu_brand": "AMD EPYC 7B13", "cpu_family": 25, "cpu_model": 1, "torch_threads": 8}, "", "amd-epyc-7b13-8t"),
    ({"cpu_brand": "AMD EPYC", "cpu_family": None, "torch_threads": 2}, "", "amd-epyc-2t"),
    ({"gpu_name": "NVIDIA H100 80GB HBM3"}, "", "unknown-cpu"),
])
def test_key_suffix_only_where_the_name_is_ambiguous(fields, suffix, key):
    assert identity.key_suffix(fields) == suffix
    assert identity.cpu_hardware_key(fields) == key

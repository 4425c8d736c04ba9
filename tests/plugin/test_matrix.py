"""The test matrix, device parsing and hardware keys."""

from __future__ import annotations

import pytest

from hwregress import workloads
from hwregress.hardware.devices import describe, parse_device_list
from hwregress.hardware.facts import slugify
from hwregress.measure.precision.support import dtype_unsupported_reason
from hwregress.plugin import matrix
from hwregress.plugin.families import registry


def test_cpu_defaults_are_the_small_tier():
    cases = registry.cases(matrix.Selection(["cpu"]), "throughput")
    assert {c["workload"] for c in cases} == {"resnet18", "mobilenet_v3_small", "alexnet", "bert_base", "gpt2"}
    cnns = {(c["mode"], c["batch_size"]) for c in cases
            if c["workload"] in ("resnet18", "mobilenet_v3_small", "alexnet")}
    assert cnns == {("infer", 1), ("infer", 8), ("train", 8)}
    text = sorted(matrix.case_id(c) for c in cases if c["workload"] in ("bert_base", "gpt2"))
    assert text == ["cpu-bert_base-infer-ctx128-bs1-fp32", "cpu-gpt2-decode-ctx128-bs1-fp32"]


def test_the_full_gpu_tier_is_the_zoo_plus_transformers_and_speedup_only_on_cuda():
    selection = matrix.Selection(["cuda:0", "cpu"], tier="full")
    gpu = [c for c in registry.cases(selection, "throughput") if c["device"] == "cuda:0"]
    assert ({c["workload"] for c in gpu}
            == {*workloads.ZOO, "bert_base", "roberta_base", "deit_small", "gpt2", "llama_1b"})
    assert {c["mode"] for c in gpu if c["workload"] == "llama_1b"} == {"train", "infer", "prefill", "decode"}
    assert {c["mode"] for c in gpu if c["workload"] == "bert_base"} == {"train", "infer"}
    assert {c["context"] for c in gpu if c["workload"] == "gpt2"} == {512}
    speedup = registry.cases(selection, "speedup")
    assert {c["device"] for c in speedup} == {"cuda:0"} and {c["batch_size"] for c in speedup} == {32}
    assert {c["workload"] for c in speedup} == {*workloads.ZOO, "deit_small"}  # image models: a GPT's CPU side is hours


def test_selected_modes_apply_to_the_workloads_that_can_run_them():
    selection = matrix.Selection(["cpu"], models=["resnet18", "gpt2"], modes=["infer", "decode"], batch_sizes=[1])
    ids = sorted(matrix.case_id(c) for c in registry.cases(selection, "throughput"))
    assert ids == ["cpu-gpt2-decode-ctx128-bs1-fp32", "cpu-gpt2-infer-ctx128-bs1-fp32", "cpu-resnet18-infer-bs1-fp32"]


def test_workload_declared_batches_win_over_the_device_defaults():
    assert matrix.batch_sizes_for(matrix.Selection(["cuda:0"]), "cuda:0", "train", "llama_1b") == [4]
    assert matrix.batch_sizes_for(matrix.Selection(["cuda:0"]), "cuda:0", "train", "resnet50") == [32, 128]
    assert matrix.batch_sizes_for(matrix.Selection(["cuda:0"]), "cuda:0", "train", "vgg19") == [32, 128]


def test_the_tier_rows_win_over_the_workload_and_the_device_defaults():
    assert matrix.batch_sizes_for(matrix.Selection(["cuda:0"]), "cuda:0", "train", "resnet18") == [32]
    assert matrix.batch_sizes_for(matrix.Selection(["cuda:0"], tier="full"), "cuda:0", "train", "resnet18") == [
        32, 64, 128]
    given = matrix.Selection(["cuda:0"], batch_sizes=[2], tier="full")
    assert matrix.batch_sizes_for(given, "cuda:0", "train", "resnet18") == [2]


def test_selection_overrides_and_ids():
    selection = matrix.Selection(["cpu"], models=["resnet50"], batch_sizes=[2], modes=["infer"], dtypes=["bf16"])
    (case,) = registry.cases(selection, "throughput")
    assert matrix.case_id(case) == "cpu-resnet50-infer-bs2-bf16"


def test_ceilings_skip_the_bus_on_cpu_and_cover_every_gpu_dtype():
    names = {c["ceiling"] for c in registry.cases(matrix.Selection(["cpu"]), "ceiling")}
    assert names == {"gemm", "copy", "allreduce"}
    gpu = registry.cases(matrix.Selection(["cuda:0"]), "ceiling")
    assert {c["dtype"] for c in gpu if c["ceiling"] == "gemm"} == {"fp32", "tf32", "bf16", "fp16"}
    assert {c["ceiling"] for c in gpu} == {"gemm", "copy", "h2d", "d2h", "p2p", "allreduce"}


def test_a_node_wide_allreduce_and_scaling_run_once_per_device_kind():
    selection = matrix.Selection(["cuda:0", "cuda:1"], world_sizes=[1, 2])
    allreduce = [c for c in registry.cases(selection, "ceiling") if c["ceiling"] == "allreduce"]
    assert [c["device"] for c in allreduce] == ["cuda:0"]
    scaling = registry.cases(selection, "scaling")
    assert {c["device"] for c in scaling} == {"cuda:0"}
    assert [matrix.case_id(c) for c in scaling if c["workload"] == "resnet50"] == [
        "cuda:0-resnet50-train-w1-bs128-fp32", "cuda:0-resnet50-train-w2-bs128-fp32"]


def test_scaling_and_colocated_run_on_the_cpu_when_asked_for():
    assert registry.cases(matrix.Selection(["cpu"]), "scaling") == []  # the default CPU tier stays within 2 minutes
    assert registry.cases(matrix.Selection(["cpu"]), "colocated") == []
    asked = frozenset({"scaling", "colocated"})
    scaling = registry.cases(matrix.Selection(["cpu"], opted_in=asked), "scaling")
    assert [matrix.case_id(c) for c in scaling] == ["cpu-mobilenet_v3_small-train-w1-bs8-fp32",
                                                    "cpu-mobilenet_v3_small-train-w2-bs8-fp32"]
    pair = registry.cases(matrix.Selection(["cpu"], colocate=[("resnet18", "alexnet")], batch_sizes=[4, 2],
                                         opted_in=asked),
                        "colocated")
    assert [matrix.case_id(c) for c in pair] == ["cpu-resnet18+alexnet-train-bs2-fp32"]
    chosen = registry.cases(matrix.Selection(["cpu"], models=["resnet18"], opted_in=asked), "colocated")
    assert [c["members"] for c in chosen] == ["resnet18+resnet18"]


def test_distributed_families_train_in_training_numerics_on_devices_with_a_backend():
    selection = matrix.Selection(["mps", "cuda:0"], dtypes=["fp32", "int8", "bf16"])
    scaling = registry.cases(selection, "scaling")
    assert {c["device"] for c in scaling} == {"cuda:0"} and {c["dtype"] for c in scaling} == {"fp32", "bf16"}
    assert [c["device"] for c in registry.cases(selection, "ceiling") if c["ceiling"] == "allreduce"] == ["cuda:0"]
    assert {c["device"] for c in registry.cases(selection, "colocated")} == {"mps", "cuda:0"}


@pytest.mark.parametrize("selection, message", [
    (matrix.Selection(["cpu"], world_sizes=[0]), "world sizes must be whole numbers >= 1, got 0"),
    (matrix.Selection(["cpu"], world_sizes=[3], nnodes=2), "world size 3 does not split evenly over 2 nodes"),
    (matrix.Selection(["cpu"], colocate=[("resnet18",)]), "needs two or more processes, got 'resnet18'"),
    (matrix.Selection(["cpu"], colocate=[("resnet18", "nope")]),
     "co-located group 'resnet18\\+nope': unknown model 'nope'"),
])
def test_distributed_selections_are_checked(selection, message):
    with pytest.raises(ValueError, match=message):
        matrix.validate(selection)


def test_zoo_holds_the_seed_models():
    assert set(workloads.ZOO) >= {"alexnet", "resnet18", "resnet50", "resnet152", "vgg16", "vgg19", "densenet121",
                                  "mobilenet_v3_small", "vit_b_16", "convnext_tiny"}
    with pytest.raises(KeyError, match="unknown model 'nope'; registered models: alexnet"):
        workloads.get("nope")


@pytest.mark.parametrize("selection, message", [
    (matrix.Selection(["cpu"], modes=["eval"]), "unknown mode 'eval'"),
    (matrix.Selection(["cpu"], dtypes=["int4"]), "unknown dtype 'int4'"),
    (matrix.Selection(["cpu"], batch_sizes=[-1]), "batch sizes must be >= 1"),
])
def test_validation(selection, message):
    with pytest.raises(ValueError, match=message):
        matrix.validate(selection)


def test_parse_device_list():
    assert parse_device_list("cuda:1, cpu,cpu", "--devices") == ["cuda:1", "cpu"]
    expected = r"--devices: 'tpu' is not a device; use cpu, mps, cuda or cuda:<index> \(visible here: cpu"
    with pytest.raises(ValueError, match=expected):
        parse_device_list("tpu", "--devices")


def test_hardware_keys():
    assert slugify("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    info = describe("cpu")
    assert info.hardware_key.endswith(f"-{info.facts['threads']}t")


def test_dtype_support():
    assert dtype_unsupported_reason("cpu", "fp32") is None
    assert dtype_unsupported_reason("cpu", "bf16") is None
    assert "tf32" in dtype_unsupported_reason("cpu", "tf32")
    assert "fp16" in dtype_unsupported_reason("cpu", "fp16")


@pytest.mark.parametrize(("nodeid", "expected"), [
    ("bench_tests/test_throughput.py::test_throughput[cuda:1-resnet50-train-bs32-fp32]", "cuda:1"),
    ("bench_tests/test_parity.py::test_digits_accuracy[cpu-fp32]", "cpu"),
    ("bench_tests/test_ceilings.py::test_ceiling[mps-gemm-fp16]", "mps"),
    ("bench_tests/test_x.py::test_x[cpu]", "cpu"),
    ("tests/test_stats.py::test_summary[cpuish-1]", None),
    ("tests/test_stats.py::test_summary", None),
])
def test_device_scope_of_node_ids(nodeid, expected):
    from hwregress.plugin.xdist import device_scope

    assert device_scope(nodeid) == expected


def test_documented_option_table_matches_the_code(pytestconfig):
    import re

    from support.project import REPO

    page = (REPO / "docs" / "running.md").read_text(encoding="utf-8")
    table = page[page.index("| option (ini twin"):page.index("## xdist")]
    documented = set(re.findall(r"^\| `(--[a-z-]+)", table, flags=re.MULTILINE))
    group = pytestconfig._parser.getgroup("hwregress")  # the options as this pytest registered them
    assert documented == {name for option in group.options for name in option.names()}


def test_compile_and_memory_format_axes_name_only_non_default_variants():
    selection = matrix.Selection(["cpu"], models=["resnet18", "bert_base"], modes=["infer"], batch_sizes=[1],
                                 compilers=["eager", "inductor"], memory_formats=["contiguous", "channels_last"])
    ids = sorted(matrix.case_id(c) for c in registry.cases(selection, "throughput"))
    assert ids == ["cpu-bert_base-infer-ctx128-bs1-fp32", "cpu-bert_base-infer-ctx128-inductor-bs1-fp32",
                   "cpu-resnet18-infer-bs1-fp32", "cpu-resnet18-infer-channels_last-bs1-fp32",
                   "cpu-resnet18-infer-inductor-bs1-fp32", "cpu-resnet18-infer-inductor-channels_last-bs1-fp32"]


def test_decode_is_never_compiled_by_the_axis():
    selection = matrix.Selection(["cpu"], models=["gpt2"], modes=["decode"], batch_sizes=[1], compilers=["inductor"])
    assert [c["compiler"] for c in registry.cases(selection, "throughput")] == ["eager"]


@pytest.mark.parametrize("selection, message", [
    (matrix.Selection(["cpu"], compilers=["tvm"]), "unknown compiler 'tvm'; use eager, inductor"),
    (matrix.Selection(["cpu"], memory_formats=["nhwc"]), "unknown memory format 'nhwc'; use contiguous, channels_last"),
])
def test_unknown_compiler_or_memory_format_is_refused(selection, message):
    with pytest.raises(ValueError, match=message):
        matrix.validate(selection)


def test_the_gemm_roof_is_measured_in_floating_dtypes_only():
    # the roof's GEMM multiplies float tensors: an "int8" or "fp8" roof would be an fp32 GEMM set against the int8
    # or fp8 peak
    selection = matrix.Selection(["cpu", "cuda:0"], dtypes=["fp32", "int8", "fp8", "bf16"])
    gemm = {(c["device"], c["dtype"]) for c in registry.cases(selection, "ceiling") if c["ceiling"] == "gemm"}
    assert gemm == {("cpu", "fp32"), ("cpu", "bf16"), *(("cuda:0", d) for d in ("fp32", "tf32", "bf16", "fp16"))}

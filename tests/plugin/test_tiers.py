"""The tiers (--tier quick|default|full, hwregress.plugin.tiers): what each holds on a GPU and on the CPU, that they
nest, that --tier composes with --models, --modes, -m and -n, its errors, and the header's estimate."""

from __future__ import annotations

import pytest

from hwregress import workloads
from hwregress.measure.timing import TimingPlan
from hwregress.plugin import matrix, tier_estimate, tier_header, tiers
from hwregress.plugin.families import registry
from hwregress.plugin.matrix import Selection

# spark (-m spark: Java) and serving (-m serving: a server) are opt-in, in no tier
ALWAYS_ON = [f.name for f in registry.BUILT_IN if f.name not in ("spark", "serving")]


def ids(tier: str, device: str) -> dict[str, set[str]]:
    cases = tier_estimate.selection_cases(Selection([device], tier=tier), registry.names())
    return {family: {matrix.case_id(case) for case in found} for family, found in cases.items()}


@pytest.mark.parametrize("tier", list(tiers.TIERS))
def test_every_gpu_tier_runs_every_family(tier):
    assert sorted(family for family, found in ids(tier, "cuda:0").items() if found) == sorted(ALWAYS_ON)


@pytest.mark.parametrize("tier", ["default", "full"])
def test_the_default_and_full_gpu_tiers_keep_every_workload_class(tier):
    cases = tier_estimate.tier_cases(tier)["throughput"]
    classes = {tiers.WORKLOAD_CLASSES[case["workload"]] for case in cases}
    assert classes == set(tiers.WORKLOAD_CLASSES.values())
    # every class trains and infers; every decoder LM class prefills and decodes
    for wanted in set(tiers.WORKLOAD_CLASSES.values()):
        modes = {case["mode"] for case in cases if tiers.WORKLOAD_CLASSES[case["workload"]] == wanted}
        assert {"train", "infer" if wanted != "decoder LM" else "prefill"} <= modes, wanted
    assert {case["mode"] for case in cases if case["workload"] == "gpt2"} == {"train", "infer", "prefill", "decode"}


def test_the_quick_gpu_tier_is_one_model_per_family():
    cases = tier_estimate.tier_cases("quick")
    for family, found in cases.items():
        image_models = {case["workload"] for case in found if "workload" in case
                        and workloads.get(case["workload"]).input_kind == "images"}
        assert len(image_models) <= 1, (family, image_models)
    # gpt2 only for the modes no image model has
    assert {case["mode"] for case in cases["throughput"] if case["workload"] == "gpt2"} == {"prefill", "decode"}
    assert {case["workload"] for case in cases["output-parity"]} == {"resnet50"}


@pytest.mark.parametrize("device", ["cuda:0", "cpu", "mps"])
def test_the_tiers_nest(device):
    # a quick run is judged against the baselines the nightly default tier records, and a full run records them all
    quick, default, full = (ids(name, device) for name in ("quick", "default", "full"))
    for family in full:
        assert quick.get(family, set()) <= default.get(family, set()) <= full[family], family


def test_the_cpu_default_tier_is_the_cpu_tier_of_before():
    cases = tier_estimate.tier_cases("default", "cpu")
    assert sorted(matrix.case_id(case) for case in cases["throughput"]) == sorted([
        "cpu-resnet18-train-bs8-fp32", "cpu-resnet18-infer-bs1-fp32", "cpu-resnet18-infer-bs8-fp32",
        "cpu-mobilenet_v3_small-train-bs8-fp32", "cpu-mobilenet_v3_small-infer-bs1-fp32",
        "cpu-mobilenet_v3_small-infer-bs8-fp32", "cpu-alexnet-train-bs8-fp32", "cpu-alexnet-infer-bs1-fp32",
        "cpu-alexnet-infer-bs8-fp32", "cpu-bert_base-infer-ctx128-bs1-fp32", "cpu-gpt2-decode-ctx128-bs1-fp32"])


def test_an_mps_device_runs_the_cuda_tables_models_at_its_own_batches():
    cases = tier_estimate.selection_cases(Selection(["mps"], tier="default"), ["throughput"])["throughput"]
    assert {case["workload"] for case in cases} == set(tiers.DEFAULT.tables["cuda"])
    assert {case["batch_size"] for case in cases if case["workload"] == "resnet152" and case["mode"] == "infer"} == {
        1, 32}  # the default tier's modes, MPS's default batches (1, 32)


def test_models_given_replace_the_tiers_and_keep_their_rows():
    quick = Selection(["cuda:0"], models=["resnet50", "vgg19"], tier="quick")
    cases = registry.cases(quick, "throughput")
    assert sorted(matrix.case_id(c) for c in cases if c["workload"] == "resnet50") == [
        "cuda:0-resnet50-infer-bs1-fp32", "cuda:0-resnet50-infer-bs32-fp32", "cuda:0-resnet50-train-bs128-fp32",
        "cuda:0-resnet50-train-bs32-fp32"]
    # a model the tier does not hold runs every mode at the workload's or device's batches
    assert {(c["mode"], c["batch_size"]) for c in cases if c["workload"] == "vgg19"} == {
        ("train", 32), ("train", 128), ("infer", 1), ("infer", 32), ("infer", 256)}
    # --modes and --batch-sizes replace the rows
    narrowed = Selection(["cuda:0"], models=["resnet50"], modes=["infer"], batch_sizes=[4], tier="full")
    assert [matrix.case_id(c) for c in registry.cases(narrowed, "throughput")] == ["cuda:0-resnet50-infer-bs4-fp32"]


def test_an_unknown_tier_is_named():
    with pytest.raises(ValueError, match=r"unknown tier 'nightly'; use quick, default, full"):
        matrix.validate(Selection(["cpu"], tier="nightly"))


def test_the_header_counts_what_minus_m_keeps_and_estimates_it():
    plan = TimingPlan()
    whole = tier_header.tier_lines(Selection(["cpu"], tier="quick"), plan, 3)
    assert whole[0].startswith("hwregress: tier quick (per-commit CI: one model per family")
    count = sum(len(found) for found in tier_estimate.tier_cases("quick", "cpu").values())
    assert f"hwregress: tier quick on cpu: {count} tests, estimated " in whole[1]
    assert "min recording" in whole[1] and "min judged" in whole[1]
    narrowed = tier_header.tier_lines(Selection(["cpu"], tier="quick"), plan, 3, markexpr="cpu and throughput",
                                      keyword="resnet")
    throughput = len(tier_estimate.tier_cases("quick", "cpu")["throughput"])
    assert f"on cpu: {throughput} tests, " in narrowed[1] and narrowed[1].endswith("; -k is not counted")
    assert tier_header.tier_lines(Selection(["cpu"], tier="quick"), plan, 3, markexpr="gpu")[1:] == []


def test_tier_selects_the_collected_tests_with_and_without_xdist(hw_project, xdist_args):
    result = hw_project.run("--tier", "quick", "-m", "cpu and not train", "--collect-only", "-q", "-p",
                            "no:cacheprovider", *xdist_args, fast=False)
    collected = sorted(line.split("[", 1)[1].rstrip("]") for line in result.outlines if "::test_throughput[" in line)
    assert collected == ["cpu-gpt2-decode-ctx128-bs1-fp32", "cpu-resnet18-infer-bs1-fp32"], result.stdout.str()


def test_the_header_names_the_tier_and_its_estimate(hw_project):
    result = hw_project.run("--tier", "full", "-m", "cpu", "--collect-only", "-p", "no:cacheprovider", fast=False,
                            inprocess=True)
    full = sum(len(found) for found in tier_estimate.tier_cases("full", "cpu").values())
    result.stdout.fnmatch_lines(["hwregress: tier full (weekly or a new machine*",
                                 f"hwregress: tier full on cpu: {full} tests, estimated * min recording, * min "
                                 "judged, *"])


@pytest.mark.parametrize("given, named", [(["--tier", "nightly"], "--tier='nightly'"), (["--tier="], "--tier=''"),
                                          (["-o", "hwregress_tier=weekly"], "ini option hwregress_tier='weekly'")])
def test_a_tier_that_is_not_one_is_a_usage_error_naming_it(hw_project, given, named):
    result = hw_project.run(*given, "--collect-only", fast=False, inprocess=True)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{named} is not a tier; use quick, default, full*"])

"""A host reported ``defective`` when two independent micro-figures or two models fall below its fleet
(:mod:`hwregress.judge.defective`)."""

from __future__ import annotations

import random

import pytest

from hwregress.judge.defective import DEFECT_LIMIT, component, defective_hosts, host_finding
from hwregress.judge.fleet import fleet_baselines

MICRO = {"gemm_bf16_tflops": 700.0, "gemm_fp16_tflops": 710.0, "gemm_fp32_tflops": 50.0, "copy_gbs": 2900.0,
         "h2d_gbs": 55.0, "allreduce_gbs": 380.0}
MODELS = {"resnet50-train-bs32": 2500.0, "resnet50-train-bs64": 2700.0, "gpt2-train-bs8": 300.0,
          "bert-infer-bs16": 4000.0}
MODEL_OF = {"resnet50-train-bs32": "resnet50", "resnet50-train-bs64": "resnet50", "gpt2-train-bs8": "gpt2",
            "bert-infer-bs16": "bert"}


def fleet(n: int = 10, sd: float = 0.005, seed: int = 3,
          table: dict[str, float] = MICRO) -> dict[str, dict[str, float]]:
    """host -> figure -> that host's median: each figure drawn around ``table`` with relative sd ``sd``."""
    rng = random.Random(seed)
    return {f"host-{i:02d}": {name: value * rng.gauss(1.0, sd) for name, value in table.items()} for i in range(n)}


def slowed(hosts: dict[str, dict[str, float]], host: str, factor: float, *names: str) -> dict[str, dict[str, float]]:
    return {h: {name: v * (factor if h == host and name in names else 1.0) for name, v in figures.items()}
            for h, figures in hosts.items()}


def test_gemm_and_copy_8_percent_low_make_a_host_defective_with_both_in_its_evidence():
    micro = slowed(fleet(), "host-04", 0.92, "gemm_bf16_tflops", "copy_gbs")
    findings = defective_hosts(micro, {}, {})
    assert [host for host, finding in findings.items() if finding.defective] == ["host-04"]
    finding = findings["host-04"]
    assert {e.figure for e in finding.evidence} == {"gemm_bf16_tflops", "copy_gbs"}
    assert finding.components == ("GEMM", "device memory")
    for evidence in finding.evidence:
        assert evidence.ratio == pytest.approx(evidence.value / evidence.fleet_value)
        assert evidence.ratio < 1 - DEFECT_LIMIT
    assert "defective" in finding.message and "gemm_bf16_tflops" in finding.message


def test_two_gemm_dtypes_low_are_one_component_and_not_defective():
    micro = slowed(fleet(), "host-04", 0.85, "gemm_bf16_tflops", "gemm_fp16_tflops")
    finding = defective_hosts(micro, {}, {})["host-04"]
    assert not finding.defective
    assert finding.components == ("GEMM",) and len(finding.evidence) == 2
    assert "not defective: at most one independent figure of a kind" in finding.message


def test_two_batch_sizes_of_one_model_are_one_model_and_two_models_are_defective():
    models = slowed(fleet(table=MODELS), "host-07", 0.9, "resnet50-train-bs32", "resnet50-train-bs64")
    finding = defective_hosts({}, models, MODEL_OF)["host-07"]
    assert not finding.defective and finding.models == ("resnet50",)
    models = slowed(fleet(table=MODELS), "host-07", 0.9, "resnet50-train-bs32", "gpt2-train-bs8")
    finding = defective_hosts({}, models, MODEL_OF)["host-07"]
    assert finding.defective and finding.models == ("gpt2", "resnet50")


def test_a_new_host_is_judged_against_a_fleet_it_is_not_part_of():
    hosts = fleet()
    by_figure: dict[str, dict[str, float]] = {}
    for host, figures in hosts.items():
        for name, value in figures.items():
            by_figure.setdefault(name, {})[host] = value
    new = {name: value * (0.9 if name in ("h2d_gbs", "allreduce_gbs") else 1.0) for name, value in MICRO.items()}
    finding = host_finding("new-host", new, fleet_baselines(by_figure), {}, {}, {})
    assert finding.defective and finding.components == ("GPU interconnect", "host link")
    assert all(e.n_hosts == 10 for e in finding.evidence)


def test_a_figure_whose_fleet_spreads_wider_than_the_limit_needs_to_fall_beyond_the_spread():
    """h2d on a fleet whose hosts spread 6%: 8% low is within its threshold, so it is no evidence."""
    micro = fleet(sd=0.005)
    rng = random.Random(11)
    for figures in micro.values():
        figures["h2d_gbs"] *= rng.gauss(1.0, 0.06)
    mean_h2d = sum(f["h2d_gbs"] for h, f in micro.items() if h != "host-04") / 9
    micro["host-04"]["h2d_gbs"] = mean_h2d * 0.92
    micro["host-04"]["copy_gbs"] *= 0.9
    finding = defective_hosts(micro, {}, {})["host-04"]
    assert [e.figure for e in finding.evidence] == ["copy_gbs"] and not finding.defective


def test_a_roof_name_outside_the_known_components_is_refused_with_the_fix():
    with pytest.raises(ValueError, match=r"'tpu_gbs'.*gemm_<dtype>_tflops"):
        component("tpu_gbs")


def test_a_model_figure_without_a_model_name_is_refused():
    models = fleet(table=MODELS)
    with pytest.raises(ValueError, match=r"bert-infer-bs16.*model name"):
        defective_hosts({}, models, {k: v for k, v in MODEL_OF.items() if k != "bert-infer-bs16"})

"""A ``defective`` host: a machine-level finding, with its evidence, when at least two independent micro-figures or
two models fall more than 5% below the host's fleet (issue 30, section 4).

Independent means another part of the machine: the micro-figures (roofs named as
:func:`hwregress.judge.evidence.roof_name` names them) count once per component, GEMM once whatever its dtypes
(bf16 and fp16 run on the same tensor cores, so both low is one finding), the device copy once (HBM), host-to-device
and device-to-host once (one PCIe link carries both), peer-to-peer and all-reduce once (both cross NVLink). Models
count once per model name: two batch sizes of one model share its kernels.

A figure is evidence when it falls below its fleet by more than ``max(DEFECT_LIMIT, the fleet verdict's threshold)``
(:func:`hwregress.judge.fleet.fleet_threshold`): more than 5%, and beyond the fleet's own spread where the hosts
spread wider than 5% allows (a host-to-device copy that varies 6% between hosts is not evidence at 8% low).
The page: docs/fleet-verdicts.md, 'Defective hosts'.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hwregress.judge.fleet import FleetBaseline, fleet_baselines, judge_against_fleet
from hwregress.store.verdicts import Verdict

DEFECT_LIMIT = 0.05  # issue 30: "more than 5% below its fleet"
MIN_INDEPENDENT = 2  # two independent figures: one low figure is a test's regression, two are the machine's
# a roof's ceiling (the first word of its roof name) -> the part of the machine it measures
COMPONENTS = {"gemm": "GEMM", "copy": "device memory", "h2d": "host link", "d2h": "host link",
              "p2p": "GPU interconnect", "allreduce": "GPU interconnect"}


@dataclass(frozen=True)
class FigureEvidence:
    """One figure of a host below its fleet.

    Attributes:
        figure: a roof name (``"gemm_bf16_tflops"``) or a test id.
        kind: ``micro`` or ``model``.
        group: what it counts as independently: a component (``"GEMM"``) or a model name.
        value: the host's median (the figure's unit).
        fleet_value: the fleet baseline's value.
        ratio: value / fleet value.
        threshold: the relative drop it exceeded (fraction).
        n_hosts: the hosts of the fleet.
    """

    figure: str
    kind: str
    group: str
    value: float
    fleet_value: float
    ratio: float
    threshold: float
    n_hosts: int


@dataclass(frozen=True)
class DefectiveFinding:
    """What the fleet says about one host.

    Attributes:
        host: the host id.
        defective: at least :data:`MIN_INDEPENDENT` components or models among the evidence.
        evidence: every figure below its fleet, worst ratio first.
        components: the components among the evidence, sorted.
        models: the model names among the evidence, sorted.
        message: one sentence for the report.
    """

    host: str
    defective: bool
    evidence: tuple[FigureEvidence, ...]
    components: tuple[str, ...]
    models: tuple[str, ...]
    message: str


def component(roof: str) -> str:
    """The part of the machine a roof measures (``"gemm_bf16_tflops"`` -> ``"GEMM"``).

    Raises:
        ValueError: a roof name of no known ceiling.
    """
    ceiling = roof.split("_", 1)[0]
    if ceiling not in COMPONENTS:
        raise ValueError(f"micro-figure {roof!r} is no roof hwregress measures; name roofs as "
                         "hwregress.judge.evidence.roof_name does (gemm_<dtype>_tflops, copy_gbs, h2d_gbs, d2h_gbs, "
                         "p2p_gbs, allreduce_gbs)")
    return COMPONENTS[ceiling]


def host_finding(host: str, micro: Mapping[str, float], micro_fleet: Mapping[str, FleetBaseline],
                 models: Mapping[str, float], model_fleet: Mapping[str, FleetBaseline],
                 model_names: Mapping[str, str]) -> DefectiveFinding:
    """The finding on ``host`` from its micro-figures (roof name -> median) and model tests (test id -> median)
    against fleets it is not part of (:func:`hwregress.judge.fleet.fleet_baselines` with ``exclude=host``);
    ``model_names`` maps each test id to its model. A figure without a fleet, or whose fleet gives no verdict (too
    few hosts, no majority), is no evidence.

    Raises:
        ValueError: a roof name of no known ceiling, or a model test without a model name.
    """
    evidence = [e for name, value in micro.items() if name in micro_fleet
                for e in _below(name, "micro", component(name), value, micro_fleet[name])]
    for test_id, value in models.items():
        if test_id not in model_names:
            raise ValueError(f"model test {test_id!r} of host {host!r} has no model name; pass model_names "
                             "(test id -> the record's model) for every model test")
        if test_id in model_fleet:
            evidence += _below(test_id, "model", model_names[test_id], value, model_fleet[test_id])
    evidence.sort(key=lambda e: (e.ratio, e.figure))
    components = tuple(sorted({e.group for e in evidence if e.kind == "micro"}))
    low_models = tuple(sorted({e.group for e in evidence if e.kind == "model"}))
    defective = len(components) >= MIN_INDEPENDENT or len(low_models) >= MIN_INDEPENDENT
    return DefectiveFinding(host, defective, tuple(evidence), components, low_models,
                            _message(host, defective, evidence, components, low_models))


def defective_hosts(micro_by_host: Mapping[str, Mapping[str, float]],
                    models_by_host: Mapping[str, Mapping[str, float]],
                    model_names: Mapping[str, str]) -> dict[str, DefectiveFinding]:
    """:func:`host_finding` of every host (host id -> roof name or test id -> its latest median), each against the
    fleet of the other hosts; hosts sorted.

    Raises:
        ValueError: as :func:`host_finding`, or a median that is not a positive finite number.
    """
    micro_by_figure, models_by_test = _by_figure(micro_by_host), _by_figure(models_by_host)
    return {host: host_finding(host, micro_by_host.get(host, {}), fleet_baselines(micro_by_figure, exclude=host),
                               models_by_host.get(host, {}), fleet_baselines(models_by_test, exclude=host), model_names)
            for host in sorted(set(micro_by_host) | set(models_by_host))}


def _by_figure(by_host: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for host, figures in by_host.items():
        for name, value in figures.items():
            out.setdefault(name, {})[host] = value
    return out


def _below(figure: str, kind: str, group: str, value: float, fleet: FleetBaseline) -> list[FigureEvidence]:
    verdict = judge_against_fleet(value, fleet, min_threshold=DEFECT_LIMIT)
    if verdict.verdict is not Verdict.REGRESSION:
        return []
    return [FigureEvidence(figure, kind, group, value, fleet.value, verdict.ratio, verdict.threshold, fleet.n)]


def _message(host: str, defective: bool, evidence: list[FigureEvidence], components: tuple[str, ...],
             models: tuple[str, ...]) -> str:
    if not evidence:
        return f"{host}: every figure within its fleet"
    figures = "; ".join(f"{e.figure} {e.value:.4g} = {e.ratio:.3f} x the fleet's {e.fleet_value:.4g} "
                        f"({e.n_hosts} hosts)" for e in evidence)
    parts = [f"{len(components)} component(s) ({', '.join(components)})" if components else "",
             f"{len(models)} model(s) ({', '.join(models)})" if models else ""]
    counted = " and ".join(p for p in parts if p)
    if defective:
        return f"{host} is defective: {counted} below its fleet: {figures}"
    return (f"{host} is not defective: at most one independent figure of a kind below its fleet ({counted}; a "
            f"defective host needs {MIN_INDEPENDENT} components or {MIN_INDEPENDENT} models): {figures}")

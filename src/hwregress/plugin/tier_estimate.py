"""How long a selection of the suite takes on a machine, estimated from each test's costs; checked against sessions
measured on an H200 and on the CPU development VM (:mod:`hwregress.plugin.tier_durations`).

Every test pays costs that do not shrink with a faster device: building the model, its first call (cuDNN's
algorithm search per shape), the warmup steps, a timed window of at least ``rounds x min_round_s``, the profiled
window, the FLOP count and the bytes pass, and, for parity and speedup, work on the host CPU. Each family says what
its tests cost (``estimated_cost(case, cost)`` beside its ``measure``, :mod:`hwregress.plugin.families.protocol`),
from the building blocks of :class:`hwregress.plugin.tier_costs.CostModel` under one machine's
:class:`hwregress.plugin.tier_assumptions.Assumptions`, whose every number names its source; a reader can change one
and re-run ``scripts/gpu_tier_estimate.py``. The estimate leaves out what no cost predicts: a noisy window's or an
open verdict's extension toward its 30-s budget (``results.json`` records the extended rounds).

Measured against it (``tests/data/tier_durations``, ``tests/plugin/test_tier_estimate.py``): one model per family on one
H200 (``-m gpu --models resnet50,gpt2``), and the default CPU tier on the VM; docs/running.md, 'Tier times', has the
figures.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hwregress.measure.timing import TimingPlan
from hwregress.plugin import tiers
from hwregress.plugin.families import registry
from hwregress.plugin.matrix import Selection
from hwregress.plugin.tier_assumptions import Assumptions
from hwregress.plugin.tier_costs import CostModel

BUDGET_S = 600.0  # the default GPU tier must end within 10 minutes on one GPU
# the order pytest runs the families in: bench_tests' files by name (test_ceilings, test_colocated, test_parity with
# the digits test first, test_scaling, test_serving, test_spark, test_speedup, test_throughput); a once-per-process
# cost goes to the first
RUN_ORDER = ("ceiling", "colocated", "parity", "output-parity", "scaling", "serving", "spark", "speedup", "throughput")


@dataclass
class FamilyEstimate:
    """One family's row: tests, fixed seconds (everything but the timed windows), timed seconds."""

    family: str
    tests: int = 0
    fixed_s: float = 0.0
    timed_s: float = 0.0

    @property
    def total_s(self) -> float:
        return self.fixed_s + self.timed_s


@dataclass
class TierEstimate:
    """The estimate of a tier: rows per family, what the session's wall time holds besides them, and the start-up
    before its clock.

    Attributes:
        rows: family -> its row, in the order estimated.
        session_s: ``meta.duration_s`` besides the tests' records: collection, the report, and work the records do
            not time (the digits' CPU reference).
        startup_s: interpreter start and imports before the session's clock (not in ``meta.duration_s``).
        machine: the assumptions' machine.
    """

    rows: dict[str, FamilyEstimate]
    session_s: float
    startup_s: float = 0.0
    machine: str = ""

    @property
    def tests(self) -> int:
        return sum(row.tests for row in self.rows.values())

    @property
    def session_wall_s(self) -> float:
        """What ``results.json``'s ``meta.duration_s`` measures: the session's clock."""
        return self.session_s + sum(row.total_s for row in self.rows.values())

    @property
    def total_s(self) -> float:
        """The command's wall time: start-up and the session."""
        return self.startup_s + self.session_wall_s


def default_gpu_cases(device: str = "cuda:0") -> dict[str, list[dict[str, Any]]]:
    """The default tier's cases on one GPU, per built-in family in pytest's order (:data:`RUN_ORDER`): what
    ``pytest -m gpu`` collects on a one-GPU node (``--dtypes fp32``, no opt-in family)."""
    return tier_cases(tiers.DEFAULT_TIER, device)


def tier_cases(tier: str, device: str = "cuda:0") -> dict[str, list[dict[str, Any]]]:
    """Tier ``tier``'s cases on ``device`` alone, per built-in family in pytest's order: what ``pytest --tier TIER
    -m gpu`` (``-m cpu`` for ``cpu``) collects on a node with that one device (``--dtypes fp32``, no opt-in family).

    Raises:
        ValueError: an unknown tier.
    """
    tiers.get(tier)
    return selection_cases(Selection([device], tier=tier), [family.name for family in registry.BUILT_IN])


def selection_cases(selection: Selection, families: Iterable[str]) -> dict[str, list[dict[str, Any]]]:
    """The cases of ``families`` in ``selection`` (:func:`hwregress.plugin.families.registry.cases`), in pytest's
    order: :data:`RUN_ORDER` first, then any other family in the order given.

    Raises:
        hwregress.plugin.families.registry.FamilyError: a family is not registered.
    """
    names = list(dict.fromkeys(families))
    ordered = [name for name in RUN_ORDER if name in names] + [name for name in names if name not in RUN_ORDER]
    return {name: registry.cases(selection, name) for name in ordered}


def estimate(cases: Mapping[str, Iterable[dict[str, Any]]], assumptions: Assumptions | None = None,
             plan: TimingPlan | None = None, profile_steps: int = 3,
             unestimated: list[str] | None = None, visits: int | None = None) -> TierEstimate:
    """The seconds of ``cases`` (family -> parameter sets, as :func:`selection_cases` gives them) on the machine of
    ``assumptions`` (an H100 SXM by default), per family, charging each once-per-process cost to the first case in
    the order given (pytest's, for a comparison with a session), under ``--visits`` ``visits`` (None: auto). With
    ``unestimated`` (a list), a case that cannot be estimated is left out and the reason appended there instead of
    raised.

    Raises:
        hwregress.plugin.families.registry.FamilyError: a family is not registered.
        ValueError: a family has no ``estimated_cost``, or cannot estimate a case (the message says which and why).
        KeyError: a case's workload has no :data:`hwregress.plugin.tier_assumptions.MODEL_FACTS` entry.
    """
    a = assumptions or Assumptions()
    model = CostModel(a, plan, profile_steps, visits=visits)
    rows, untimed = {}, 0.0
    for name, family_cases in cases.items():
        family_cases = list(family_cases)
        if not family_cases:  # an opt-in family not asked for needs no rule
            continue
        for case in family_cases:
            try:
                cost = _cost_rule(name)(case, model)
            except (ValueError, KeyError) as error:
                if unestimated is None:
                    raise
                unestimated.append(str(error.args[0]) if error.args else repr(error))
                continue
            row = rows.setdefault(name, FamilyEstimate(name))
            row.tests += 1
            row.fixed_s += cost.fixed_s
            row.timed_s += cost.timed_s
            untimed += cost.untimed_s
    return TierEstimate(rows, a.session_s + untimed, a.startup_s, a.name)


def _cost_rule(name: str) -> Any:
    family = registry.get(name)
    rule = getattr(family, "estimated_cost", None)
    if rule is None:
        raise ValueError(f"test family {name!r} ({type(family).__module__}) has no estimated_cost(case, cost), so the "
                         "tier estimate cannot count its tests; add one (hwregress.plugin.families.protocol.Family)")
    return rule


def table(result: TierEstimate, budget_s: float = BUDGET_S) -> str:
    """The estimate as a Markdown table: family, tests, fixed s, timed s, total s; then the session, the start-up and
    the total against ``budget_s``."""
    lines = ["| family | tests | fixed s | timed s | total s |", "| --- | ---: | ---: | ---: | ---: |"]
    for row in result.rows.values():
        lines.append(f"| {row.family} | {row.tests} | {row.fixed_s:.0f} | {row.timed_s:.0f} | {row.total_s:.0f} |")
    lines.append(f"| session (collection, report, untimed CPU references) | | {result.session_s:.0f} | | "
                 f"{result.session_s:.0f} |")
    lines.append(f"| start-up before the session's clock | | {result.startup_s:.0f} | | {result.startup_s:.0f} |")
    lines.append(f"| **total** | **{result.tests}** | | | **{result.total_s:.0f}** (budget {budget_s:.0f}) |")
    return "\n".join(lines)


"""What a test family is: the :class:`Family` protocol every family module implements, as every pytest-xdist
scheduler implements ``xdist.scheduler.protocol.Scheduling``.

A family is one module: an object with the attributes and the two methods below, registered under its name
(:mod:`hwregress.plugin.families.registry`). The plugin asks the registry for it by the marker on a test
(parametrizing the test over :meth:`Family.cases`) and by name in ``hwbench.measure(name, **case)`` (running
:meth:`Family.measure`). The registered object is also registered with pytest as a plugin, so a family may implement
pytest hooks as methods of its own (the ``spark`` family stops its Spark session in ``pytest_sessionfinish``).

A family may also say what its tests cost, for the tier estimate (:mod:`hwregress.plugin.tier_estimate`): a method
``estimated_cost(case, cost) -> Cost`` built from the parts of :class:`hwregress.plugin.tier_costs.CostModel` (a model
window, a roof, a spawned job). It is optional (:data:`MEMBERS` does not list it): without it the family's tests cannot
be estimated, and the estimate says so.

What the judge, the fleet check and the worker processes need to know of a family, it declares in optional attributes
(:data:`TRAITS`, read through :func:`traits_of`, each False or empty where a family leaves it out), never by its name
below ``plugin/``: ``roof`` (its records' throughput is a device roof named by the record's ``model``: the ceiling
family), ``judged_latency_modes`` (the modes whose ``latency_ms`` is a judged figure), ``host_evidence`` (its records
are compared with the fleet's other hosts in the defective-host check), ``worker_window`` (its timed window is the
model window that A/B and visit worker processes run in place of the test's own process) and ``own_ab`` (it runs an
A/B form of its own in an A/B session). The record carries the
first two (``TestRecord.measures_roof``, ``TestRecord.latency_judged``), so that every reader of a results file
judges it alike."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from hwregress.plugin.context import BenchContext
    from hwregress.plugin.matrix import Selection
    from hwregress.store.results import TestRecord

MEMBERS = ("name", "marker", "marker_help", "requires", "sub_records", "view", "cases", "measure")


@dataclass(frozen=True)
class FamilyTraits:
    """What a family declares for the judge, the fleet check and the worker processes (see the module doc); the
    defaults are a family that declares none of them.

    Attributes:
        roof: its records' throughput is a device roof (GEMM TFLOP/s, copy GB/s, ...) named by the record's ``model``:
            the roof the physics checks, a regression's diagnosis and the fleet's component check take.
        judged_latency_modes: the modes whose records' ``latency_ms`` is judged against the baseline (lower is better),
            e.g. a decode window's inter-token latency p50 or a stream's p50 latency per image.
        host_evidence: its records, a model's window on one device, are compared with the same tests of the fleet's
            other hosts in the defective-host check (:meth:`hwregress.judge.day_one.FleetJudge.host_findings`).
        worker_window: its timed window is the model window that A/B and visit worker processes run
            (:mod:`hwregress.ab.worker`); every other family's tests skip in an A/B session (but those of an
            ``own_ab`` family) and get one visit.
        own_ab: its ``measure`` runs an A/B form of its own in an A/B session (the serving family: one server per
            stack, their windows interleaved), so its tests are not skipped there.
    """

    roof: bool = False
    judged_latency_modes: frozenset[str] = frozenset()
    host_evidence: bool = False
    worker_window: bool = False
    own_ab: bool = False


TRAITS = tuple(trait.name for trait in fields(FamilyTraits))


def traits_of(family: object) -> FamilyTraits:
    """The traits ``family`` declares (:class:`FamilyTraits`): each attribute it has, the default for each it lacks.

    Raises:
        TypeError: an attribute of the wrong type (``roof = "yes"``); the message names the family and the attribute.
    """
    declared = {name: getattr(family, name) for name in TRAITS if hasattr(family, name)}
    for name, value in declared.items():
        wanted = frozenset if name == "judged_latency_modes" else bool
        if name == "judged_latency_modes" and isinstance(value, (set, tuple, list)):
            declared[name] = value = frozenset(value)
        if not isinstance(value, wanted):
            raise TypeError(f"test family {getattr(family, 'name', family)!r}: {name} = {value!r} is not a "
                            f"{wanted.__name__} (see hwregress.plugin.families.protocol.FamilyTraits)")
    return FamilyTraits(**declared)


class Family(Protocol):
    """One test family.

    Attributes:
        name: the family's name: its records' ``family``, the first part of its baseline keys
            (``throughput/resnet18/train/bs8/fp32``) and the name ``hwbench.measure`` takes.
        marker: the pytest marker that selects its tests (``@pytest.mark.throughput``); registered by the plugin.
        marker_help: the marker's line in ``pytest --markers``.
        requires: fixtures a test of the family asks for besides ``device`` and ``hwbench``; where two families share
            a marker the one whose requirements a test meets, the most of them, takes it (``parity`` and, with a
            ``workload``, ``output-parity``).
        sub_records: the :class:`hwregress.store.results.TestRecord` fields of typed figures
            (:mod:`hwregress.store.figures`) its measurement fills, empty for none (the judge's reaches, the window's
            looks and a project's declared metrics, ``declared``, are every family's and listed by none).
        view: the report view of its records (``TestRecord.view``, :func:`hwregress.report.family_views.record_views`:
            ``models``, ``parity``, ``ceilings``, ``scaling``, ``colocation``, ``spark``), None: the records show in
            the report's generic tables only.
    """

    name: str
    marker: str
    marker_help: str
    requires: frozenset[str]
    sub_records: tuple[str, ...]
    view: str | None

    def cases(self, selection: Selection) -> list[dict[str, Any]]:
        """The parameter sets of the family's tests in this session, each a dict over the axes a test asks for
        (``device`` always, then any of ``workload, members, ceiling, mode, world_size, context, compiler,
        memory_format, batch_size, dtype`` or axes of the family's own); :func:`hwregress.plugin.matrix.case_id`
        names each. Empty: the family does not run (an opt-in family not asked for)."""
        ...

    def measure(self, bench: BenchContext, **params: Any) -> TestRecord:
        """Measure one case (``params``: the case's values, as the test received them and passed them on) for the
        running test: start its record (``bench.start``), fill it, and judge it (``bench.conclude``), which fails the
        test when the judgement says so. Returns the judged record."""
        ...


def missing_members(candidate: object) -> list[str]:
    """The members of :class:`Family` that ``candidate`` lacks (empty: it is one)."""
    return [member for member in MEMBERS if not hasattr(candidate, member)]

"""The report's family views, by name: the section of the page that a family's records get beyond the generic tables
and charts. A family names its view (``view`` of :class:`hwregress.plugin.families.protocol.Family`); a family without
one shows in the generic tables only. Torch-free, as the rest of the report: the page renders from ``results.json``
alone (``python -m hwregress report render``), where no family module is loaded.

Each view reads the records of the families it lists and gives its template's variables; the page includes every
view's template in :data:`VIEWS` order, and each shows nothing without records."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from hwregress.report.scaleout_view import COLOCATED_FAMILY, SCALING_FAMILY, scaleout_context
from hwregress.report.spark_view import SPARK_FAMILY, spark_context
from hwregress.store.results import TestRecord


@dataclass(frozen=True)
class FamilyView:
    """One view: its ``name`` (what a family names), the record ``families`` it reads, its ``template`` (under
    ``report/templates``) and ``context``, the template's variables from those records (any order)."""

    name: str
    families: tuple[str, ...]
    template: str
    context: Callable[[Sequence[TestRecord]], dict[str, Any]]


def _parity_context(records: Sequence[TestRecord]) -> dict[str, Any]:
    """``parity``: the digits accuracy and output parity records, as the page orders them."""
    return {"parity": list(records)}


def _ceilings_context(records: Sequence[TestRecord]) -> dict[str, Any]:
    """``ceilings``: every roof measured, the all-reduce among them."""
    return {"ceilings": list(records)}


VIEWS = {view.name: view for view in (
    FamilyView("parity", ("parity", "output-parity"), "_parity.html.j2", _parity_context),
    FamilyView("ceilings", ("ceiling",), "_ceilings.html.j2", _ceilings_context),
    # the all-reduce ceiling's curve is scale-out too
    FamilyView("scaleout", (SCALING_FAMILY, COLOCATED_FAMILY, "ceiling"), "_scaleout.html.j2", scaleout_context),
    FamilyView("spark", (SPARK_FAMILY,), "_spark.html.j2", spark_context),
)}


def names() -> list[str]:
    """The views' names, in the page's order."""
    return list(VIEWS)


def get(name: str) -> FamilyView:
    """The view called ``name``.

    Raises:
        KeyError: no view of that name; the message lists the views.
    """
    try:
        return VIEWS[name]
    except KeyError:
        raise KeyError(f"unknown report view {name!r}; the views: {', '.join(names())}") from None


def views_context(records: Sequence[TestRecord]) -> dict[str, Any]:
    """Every view's template variables from the records of its families, and ``family_views``: the templates the page
    includes, in order."""
    context: dict[str, Any] = {"family_views": [view.template for view in VIEWS.values()]}
    for view in VIEWS.values():
        context.update(view.context([r for r in records if r.family in view.families]))
    return context

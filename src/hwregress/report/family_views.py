"""The report's family views, by name: the section of the page that a family's records get beyond the generic tables
and charts. A family names the view of its records (``view`` of :class:`hwregress.plugin.families.protocol.Family`,
carried by each record as ``TestRecord.view``): one a section here reads, or :data:`MODELS_VIEW` (the page's own
charts over batch size and of the GPU over the CPU); a family without one shows in the generic tables only.
Torch-free, as the rest of the report: the page renders from ``results.json`` alone (``python -m hwregress report
render``), where no family module is loaded, and no family is known here by its name.

Each section reads the records of the views it lists and gives its template's variables; the page includes every
section's template in :data:`VIEWS` order, and each shows nothing without records."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from hwregress.report.scaleout_view import COLOCATION_VIEW, SCALING_VIEW, scaleout_context
from hwregress.report.serving_view import SERVING_VIEW, serving_context
from hwregress.report.spark_view import SPARK_VIEW, spark_context
from hwregress.store.results import TestRecord


@dataclass(frozen=True)
class FamilyView:
    """One section: its ``name``, the record views it ``reads`` (``TestRecord.view``, what a family names), its
    ``template`` (under ``report/templates``) and ``context``, the template's variables from those records (any
    order)."""

    name: str
    reads: tuple[str, ...]
    template: str
    context: Callable[[Sequence[TestRecord]], dict[str, Any]]


def _parity_context(records: Sequence[TestRecord]) -> dict[str, Any]:
    """``parity``: the digits accuracy and output parity records, as the page orders them."""
    return {"parity": list(records)}


def _ceilings_context(records: Sequence[TestRecord]) -> dict[str, Any]:
    """``ceilings``: every roof measured, the all-reduce among them."""
    return {"ceilings": list(records)}


CEILINGS_VIEW = "ceilings"
MODELS_VIEW = "models"
"""The view of a model's window on one device (the throughput family's): the page's own charts over batch size and
of the GPU over the CPU read its records (:mod:`hwregress.report`), no section here."""

VIEWS = {view.name: view for view in (
    FamilyView("parity", ("parity",), "_parity.html.j2", _parity_context),
    FamilyView("ceilings", (CEILINGS_VIEW,), "_ceilings.html.j2", _ceilings_context),
    # the all-reduce ceiling's curve is scale-out too
    FamilyView("scaleout", (SCALING_VIEW, COLOCATION_VIEW, CEILINGS_VIEW), "_scaleout.html.j2", scaleout_context),
    FamilyView("spark", (SPARK_VIEW,), "_spark.html.j2", spark_context),
    FamilyView("serving", (SERVING_VIEW,), "_serving.html.j2", serving_context),
)}


def record_views() -> set[str]:
    """Every record view the page reads: a family may name any of them (:data:`MODELS_VIEW` and each section's)."""
    return {MODELS_VIEW, *(name for view in VIEWS.values() for name in view.reads)}


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
    """Every section's template variables from the records of its views, and ``family_views``: the templates the page
    includes, in order."""
    context: dict[str, Any] = {"family_views": [view.template for view in VIEWS.values()]}
    for view in VIEWS.values():
        context.update(view.context([r for r in records if r.view in view.reads]))
    return context

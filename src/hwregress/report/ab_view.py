"""The report's A/B view: B's throughput against A's in an interleaved A/B session of two software stacks (issue 29,
docs/ab.md).

Records read: every record with an ``ab`` sub-record (:class:`hwregress.store.figures.ABFigures`), whatever its
family (the A/B tests are ``throughput`` records, beside any plain ones). Its ``verdict`` is B against A, ``ab.ratio``
B/A (``record.ratio`` where the sub-record has none) with its one-sided (1 - alpha) bounds ``ratio_low`` and
``ratio_high``, ``ab.threshold`` the fraction the verdict's band is 1 +- (the session's ``meta["ab"]["threshold"]``
where the sub-record has none; never ``record.threshold``, which an A/B test fills with 1 - threshold), ``ab.pairs``
every pair of windows in time order (in the record's unit, a failed window None with its error, a dropped pair with
why), and ``record.reach`` the paired minimum detectable slowdown. The header's stacks come from the session's
``meta["ab"]`` (``{"stacks": {"A": {"python", "env"}, "B": ...}, "threshold", "looks", "seed"}``), else from the first
A/B record.

Any figure may be missing, None, not finite or of another type (a failed test, another version's file, a hand edit):
it is left out of the charts and shown as "–" in the tables, never an error.

The records are read in :mod:`hwregress.report.ab_rows` and drawn in :mod:`hwregress.report.ab_charts`; the page
includes ``templates/_ab.html.j2`` after its summary, and shows nothing of it without A/B records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hwregress.report.ab_charts import forest_plot, pairs_chart
from hwregress.report.ab_rows import ab_row, header, is_ab
from hwregress.report.record_values import mapping, number
from hwregress.store.results import TestRecord


def ab_context(records: Sequence[TestRecord], meta: Mapping[str, Any]) -> dict[str, Any]:
    """The template variables of ``_ab.html.j2`` from a session's records (any order, any families) and its ``meta``:
    ``has_ab``, ``ab_header`` (:class:`hwregress.report.ab_rows.ABHeader`, None without A/B records), ``ab_rows``
    (list of :class:`hwregress.report.ab_rows.ABRow`, in the records' order), ``ab_forest`` (SVG Markup: B/A per
    test with its bounds over the threshold band) and ``ab_pairs`` (per row, ``(row, SVG Markup)``: its pairs in
    time order; empty Markup when no window measured)."""
    session = mapping(meta.get("ab"))
    ab_records = [r for r in records if is_ab(r)]
    rows = [ab_row(r, number(session.get("threshold"))) for r in ab_records]
    return {"has_ab": bool(rows), "ab_header": header(ab_records, session) if rows else None, "ab_rows": rows,
            "ab_forest": forest_plot(rows), "ab_pairs": [(row, pairs_chart(row)) for row in rows]}

"""A bisection's page (hwregress.report.bisect_view): the outcome, the probes against the good endpoint on the line
of candidates with their intervals over the threshold band, each candidate's side and the culprit's boundary, every
probe in a table; a document with figures missing or not finite renders, and one without its lists is an error
naming the list."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.html_checks import svg_charts, svg_legend, table_cells, well_formed

from hwregress.bisect.ladders import Ladder
from hwregress.bisect.search import CandidateSkipped, ProbeOutcome, bisect
from hwregress.bisect.stacks import ProbeSettings
from hwregress.cli.bisect import bisection_json
from hwregress.report.bisect_view import candidate_sides, render_bisection

SHAS = [f"{index:02d}" + "a" * 38 for index in range(8)]


def _document(tmp_path, culprit: int = 5, broken: int | None = 3, undecided: int | None = 4) -> dict:
    def run(candidate: int, reference: int) -> ProbeOutcome:
        if candidate == broken:
            raise CandidateSkipped("its setup failed (exit 1)")
        if candidate == undecided and reference == 0:
            return ProbeOutcome("unstable", 1.03, 0.99, 1.07, pairs=80, seconds=300.0)
        slow = candidate >= culprit
        if reference == 0:
            return ProbeOutcome("regression" if slow else "pass", 0.90 if slow else 1.0, 0.88 if slow else 0.97,
                                0.92 if slow else 1.03, pairs=40, seconds=100.0)
        return ProbeOutcome("pass" if slow else "improvement", 1.0 if slow else 1.11, pairs=20, seconds=80.0)

    found = bisect(len(SHAS), run)
    ladder = Ladder("commits", [f"{sha[:12]} commit {i:02d}" for i, sha in enumerate(SHAS)], SHAS, SHAS.__getitem__)
    return bisection_json(found, ladder, ProbeSettings(("-m", "cpu"), 0.05, (20, 40, 80), tmp_path))


def test_the_page_names_the_culprit_and_draws_each_probe_against_good_on_the_line(tmp_path):
    document = _document(tmp_path)
    html = render_bisection(document)
    assert well_formed(html)
    assert re.search(r'id="outcome"><strong>culprit: <code>05a{10} commit 05</code>', html)
    assert "the last good: <code>04aaaaaaaaaa commit 04</code>" in html
    chart = svg_charts(html)[0]
    probes_against_good = [p for p in document["probes"] if p["reference"] == SHAS[0] and p.get("ratio") is not None]
    assert chart.count('class="probe"') == len(probes_against_good) and "threshold-band" in chart
    assert chart.count('class="culprit-boundary"') == 1
    sides = re.findall(r'class="side side-(\w+)"', chart)
    assert sides == ["good", "good", "good", "skip", "good", "bad", "bad", "bad"]
    assert set(svg_legend(chart)) >= {"good", "bad", "skip", "undecided"}
    rows = table_cells(html, "id", "probes")
    assert len(rows) == len(document["probes"]) and any("its setup failed" in " ".join(r) for r in rows)
    assert [r[3].strip() for r in rows if "(bad)" in r[2]] == ["improvement"]  # the second opinion on commit 04


def test_a_bisection_without_a_regression_says_so_and_marks_no_boundary(tmp_path):
    def run(candidate: int, reference: int) -> ProbeOutcome:
        return ProbeOutcome("pass", 1.0, 0.98, 1.02, pairs=40, seconds=90.0)

    ladder = Ladder("stacks", ["py0", "py1", "py2"], ["/p/py0", "/p/py1", "/p/py2"], str)
    document = bisection_json(bisect(3, run), ladder, ProbeSettings((), 0.05, (20,), tmp_path))
    html = render_bisection(document)
    assert "<strong>no regression between the endpoints</strong>" in html
    assert "culprit-boundary" not in svg_charts(html)[0]
    assert candidate_sides(document, ladder.ids) == ["good", "untested", "good"]


@pytest.mark.parametrize("missing", ["candidates", "labels", "probes"])
def test_a_document_without_its_lists_is_an_error_naming_the_list(tmp_path, missing):
    document = _document(tmp_path)
    del document[missing]
    with pytest.raises(ValueError, match=f"no list '{missing}'"):
        render_bisection(document)


figures = st.one_of(st.none(), st.just(math.nan), st.just(math.inf), st.floats(0.2, 3.0), st.integers(0, 5))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.fixed_dictionaries({"ratio": figures, "ratio_low": figures, "ratio_high": figures,
                                       "pairs": st.one_of(st.none(), st.integers(0, 200)), "seconds": figures,
                                       "side": st.sampled_from(["good", "bad", "undecided", "skip", None, "odd"]),
                                       "candidate": st.sampled_from([*SHAS[:4], "unknown"]),
                                       "reference": st.sampled_from([SHAS[0], SHAS[3], "gone"])}), max_size=6),
       st.sampled_from([None, 0.05, "x"]))
def test_any_figures_missing_or_not_finite_render_as_dashes_never_an_error(probes, threshold):
    document = {"status": "undecided", "exit_code": 3, "kind": "commits", "candidates": SHAS[:4],
                "labels": [f"c{i}" for i in range(4)], "probes": probes, "skipped": {SHAS[2]: "no build"},
                "last_good": SHAS[0], "first_bad": None, "settings": {"threshold": threshold}}
    html = render_bisection(document)
    assert well_formed(html) and "nan" not in svg_charts(html)[0].lower()

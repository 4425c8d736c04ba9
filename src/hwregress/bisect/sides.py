"""What one probe of a bisection says of its candidate: on the good side, on the bad side, undecided, or skipped.

A probe is an interleaved A/B (:mod:`hwregress.ab.session`) of a candidate (stack B) against an endpoint (stack A),
judged at the A/B's planned looks with its three-way rule (:func:`hwregress.ab.paired.paired_decision`): a
``regression`` (B slower beyond the threshold, significantly), ``pass`` (the ratio's interval inside the threshold
both ways: the same), ``improvement``, or undecided after the last look (``unstable``). The more pairs the planned
looks allow, the more probes decide: the looks are the probe's budget, and undecided at the budget is reported, never
guessed (Chromium Pinpoint's compare: different, same, or unknown and add attempts).

Against the good endpoint a candidate is bad when it is slower (``regression``) and good when it is the same or
faster. Against the bad endpoint (the second opinion on a candidate the first left undecided) it is good when it is
faster than bad (``improvement``) and bad when it is the same or slower.
"""

from __future__ import annotations

from enum import Enum

from hwregress.store.verdicts import Verdict


class Side(str, Enum):
    """Where a probe puts its candidate."""

    GOOD = "good"  # before the change: the same as the good endpoint
    BAD = "bad"  # at or after the change: slower than the good endpoint
    UNDECIDED = "undecided"  # the probe's budget of pairs did not decide
    SKIP = "skip"  # the candidate could not be probed (it does not build, or its tests fail)

    def __str__(self) -> str:
        return self.value


# what an A/B verdict of candidate (B) against each endpoint (A) says of the candidate; any other: undecided
SIDES: dict[str, dict[Verdict, Side]] = {
    "good": {Verdict.REGRESSION: Side.BAD, Verdict.PASS: Side.GOOD, Verdict.IMPROVEMENT: Side.GOOD},
    "bad": {Verdict.IMPROVEMENT: Side.GOOD, Verdict.PASS: Side.BAD, Verdict.REGRESSION: Side.BAD},
}


def side_of(verdict: Verdict | str, against: str) -> Side:
    """The candidate's side from the A/B verdict of candidate (B) against the ``against`` endpoint (A: ``good`` or
    ``bad``), as the module doc says.

    Raises:
        KeyError: ``against`` is neither ``good`` nor ``bad``.
        ValueError: ``verdict`` is no verdict.
    """
    return SIDES[against].get(Verdict(verdict), Side.UNDECIDED)

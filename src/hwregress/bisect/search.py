"""The search of a bisection: which candidate of an ordered list (commits, interpreters, environment settings; the
first known good, the last known bad) first made the workload slower, each step decided by a probe with a stated
error and reach (:mod:`hwregress.bisect.sides`), never by one noisy score.

1. The endpoints first: the bad endpoint against the good. Not slower: "no regression between the endpoints"
   (:data:`NO_REGRESSION`, exit 1); undecided: :data:`UNDECIDED` (exit 3), nothing guessed.
2. Then a binary search on ``(last good, first bad)``: the candidate nearest the middle against the good endpoint.
   The same as good moves the good bound up, slower moves the bad bound down. A probe the good endpoint leaves
   undecided is asked again against the bad endpoint (a candidate faster than bad is good, one the same as bad is
   bad); still undecided, the search stops: :data:`UNDECIDED` with the range it had narrowed to (exit 3). Why the
   good endpoint first: a 10% step shows as 0.90 against good on every bad candidate, and as 1.00 on every good
   one, so one reference serves every probe and a probe's figure reads as "how much of the slowdown is here".
3. A candidate that cannot be probed (it does not build, its tests fail) is skipped, as ``git bisect skip``: the
   search tries the untried candidate nearest the middle instead. Where only skipped candidates are left between
   the bounds, the first bad candidate is one of them or the bad bound: :data:`SKIPPED_RANGE` (exit 3).

The probes are the caller's (:data:`ProbeRunner`): real A/B sessions of two stacks, or a simulation of them through the
same decision rule (tests/bisect). Exit codes as ``python -m hwregress bisect`` gives them: 0 culprit found, 1 none,
3 undecided (2 is a usage error, the command line's).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hwregress.bisect.sides import Side, side_of

CULPRIT = "culprit"
NO_REGRESSION = "no regression between the endpoints"
UNDECIDED = "undecided"
SKIPPED_RANGE = "only skipped candidates left"
EXIT_CODES = {CULPRIT: 0, NO_REGRESSION: 1, UNDECIDED: 3, SKIPPED_RANGE: 3}


class CandidateSkipped(Exception):
    """A candidate that cannot be probed: it does not build, or its tests fail; the message says why."""


@dataclass(frozen=True)
class ProbeOutcome:
    """What one A/B of a candidate (stack B) against an endpoint (stack A) found.

    Attributes:
        verdict: the A/B verdict: ``regression``, ``improvement``, ``pass`` or ``unstable`` (undecided at the budget).
        ratio: B's figure over A's (the Hodges-Lehmann estimate: 0.9 is 10% slower); None: too few pairs.
        ratio_low, ratio_high: its one-sided bounds at the last look's level; None: too few pairs.
        pairs: the pairs of windows run.
        seconds: the probe's wall time, s (building the candidate's stack included).
        details: anything the caller keeps of it (the results file, the tests judged).
    """

    verdict: str
    ratio: float | None = None
    ratio_low: float | None = None
    ratio_high: float | None = None
    pairs: int = 0
    seconds: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)


ProbeRunner = Callable[[int, int], ProbeOutcome]
"""``run(candidate, reference)``: the A/B of candidate ``candidate`` (stack B) against the endpoint ``reference``
(stack A; 0 the good, the last the bad), both indices of the ordered candidates; raises :class:`CandidateSkipped`
where the candidate cannot be probed."""


@dataclass(frozen=True)
class Probe:
    """One probe of the search: the candidate, the endpoint it was compared with, its outcome (None: skipped) and
    what that says of the candidate."""

    candidate: int
    reference: int
    side: Side
    outcome: ProbeOutcome | None
    skipped: str | None = None


@dataclass
class Bisection:
    """A search's end.

    Attributes:
        status: :data:`CULPRIT`, :data:`NO_REGRESSION`, :data:`UNDECIDED` or :data:`SKIPPED_RANGE`.
        count: the candidates searched.
        last_good: the highest candidate known to be good (0 at least).
        first_bad: the lowest candidate known to be bad (None where the endpoints did not differ).
        probes: every probe, in the order run.
        skipped: the candidates that could not be probed, with why.
    """

    status: str
    count: int
    last_good: int
    first_bad: int | None
    probes: list[Probe]
    skipped: dict[int, str]

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.status]

    @property
    def culprit(self) -> int | None:
        """The first bad candidate where the search found it, else None."""
        return self.first_bad if self.status == CULPRIT else None

    @property
    def seconds(self) -> float:
        """The probes' wall time in all, s."""
        return sum(p.outcome.seconds for p in self.probes if p.outcome is not None)


def bisect(count: int, run: ProbeRunner) -> Bisection:
    """Search ``count`` ordered candidates (index 0 the known good, ``count - 1`` the known bad) with ``run`` (module
    doc).

    Raises:
        ValueError: fewer than 2 candidates.
    """
    if isinstance(count, bool) or not isinstance(count, int) or count < 2:
        raise ValueError(f"a bisection needs a good and a bad candidate at least, got {count!r} candidates")
    search = _Search(count, run)
    return search.run()


def probes_bound(count: int) -> int:
    """The probes a search of ``count`` candidates takes where every probe decides at once: the endpoints, then
    ``ceil(log2(count - 1))`` midpoints."""
    return 1 + math.ceil(math.log2(count - 1)) if count > 2 else 1


class _Search:
    def __init__(self, count: int, run: ProbeRunner) -> None:
        self.count, self.run_probe = count, run
        self.good, self.bad = 0, count - 1
        self.probes: list[Probe] = []
        self.skipped: dict[int, str] = {}

    def run(self) -> Bisection:
        endpoints = self._probe(self.bad, 0)
        if endpoints.side == Side.SKIP:
            self.skipped[self.bad] = endpoints.skipped or ""
            return self._end(UNDECIDED, found=False)
        if endpoints.side != Side.BAD:
            return self._end(NO_REGRESSION if endpoints.side == Side.GOOD else UNDECIDED, found=False)
        while self.bad - self.good > 1:
            candidate = self._next_candidate()
            if candidate is None:
                return self._end(SKIPPED_RANGE)
            side = self._side_of(candidate)
            if side == Side.SKIP:
                continue
            if side == Side.UNDECIDED:
                return self._end(UNDECIDED)
            if side == Side.GOOD:
                self.good = candidate
            else:
                self.bad = candidate
        return self._end(CULPRIT)

    def _side_of(self, candidate: int) -> Side:
        """Against the good endpoint; undecided there, against the bad one."""
        first = self._probe(candidate, 0)
        if first.side == Side.SKIP:
            self.skipped[candidate] = first.skipped or ""
            return Side.SKIP
        if first.side != Side.UNDECIDED:
            return first.side
        return self._probe(candidate, self.count - 1).side

    def _probe(self, candidate: int, reference: int) -> Probe:
        try:
            outcome = self.run_probe(candidate, reference)
        except CandidateSkipped as skip:
            probe = Probe(candidate, reference, Side.SKIP, None, skipped=str(skip) or "skipped")
        else:
            side = side_of(outcome.verdict, "good" if reference == 0 else "bad")
            probe = Probe(candidate, reference, side, outcome)
        self.probes.append(probe)
        return probe

    def _next_candidate(self) -> int | None:
        """The untried candidate strictly between the bounds nearest their middle (the lower on a tie), or None."""
        middle = (self.good + self.bad) / 2
        open_ = [c for c in range(self.good + 1, self.bad) if c not in self.skipped]
        return min(open_, key=lambda c: (abs(c - middle), c)) if open_ else None

    def _end(self, status: str, found: bool = True) -> Bisection:
        """The search's end; ``found``: the endpoints differed, so the bad bound is known bad."""
        return Bisection(status, self.count, self.good, self.bad if found else None, self.probes, dict(self.skipped))

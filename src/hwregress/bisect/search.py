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

4. Rounds, where there are several devices (``width`` > 1): each round runs up to ``width`` probes at once, one per
   device, as Chromium's Pinpoint looks ahead: the midpoint, then the midpoints of both halves, and so on breadth
   first through the search's tree, so that 3 devices settle two levels a round. The results are then taken as the
   binary search would have asked for them; a probe off the path the search took is kept in the record and changes
   nothing. A probe left undecided asks for its second opinion in the next round, with the lookahead below it. With
   ``width`` 1 a round is one probe: the sequential search above, probe for probe.

The probes are the caller's (:data:`ProbeRunner`, or :data:`RoundRunner` for rounds): real A/B sessions of two
stacks, or a simulation of them through the same decision rule (tests/bisect). Exit codes as ``python -m hwregress
bisect`` gives them: 0 culprit found, 1 none, 3 undecided (2 is a usage error, the command line's).
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

RoundRunner = Callable[[list[tuple[int, int]]], list["ProbeOutcome | CandidateSkipped"]]
"""``run_round(jobs)``: the probes ``(candidate, reference)`` of one round, run at once (one per device); returns each
job's outcome, or the :class:`CandidateSkipped` it raised, in the jobs' order."""


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
        probes: every probe, in the order run (a round's in its jobs' order).
        skipped: the candidates that could not be probed, with why.
        rounds: the indices into ``probes`` of each round's probes, in order (one each, without devices to share).
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

    rounds: list[list[int]] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        """The probes' time in all, s (device time: probes run at once add up)."""
        return sum(p.outcome.seconds for p in self.probes if p.outcome is not None)

    @property
    def wall_seconds(self) -> float:
        """The rounds' wall time, s: each round as long as its longest probe."""
        return sum(max((self.probes[i].outcome.seconds if self.probes[i].outcome else 0.0) for i in members)
                   for members in self.rounds if members)


def bisect(count: int, run: ProbeRunner) -> Bisection:
    """Search ``count`` ordered candidates (index 0 the known good, ``count - 1`` the known bad) with ``run``, one probe
    at a time (module doc).

    Raises:
        ValueError: fewer than 2 candidates.
    """
    return bisect_in_rounds(count, lambda jobs: [_outcome_or_skip(run, *job) for job in jobs], width=1)


def bisect_in_rounds(count: int, run_round: RoundRunner, width: int) -> Bisection:
    """Search ``count`` ordered candidates with up to ``width`` probes a round, run by ``run_round`` (module doc).

    Raises:
        ValueError: fewer than 2 candidates, or a width below 1.
    """
    if isinstance(count, bool) or not isinstance(count, int) or count < 2:
        raise ValueError(f"a bisection needs a good and a bad candidate at least, got {count!r} candidates")
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise ValueError(f"a round runs 1 probe at least, got a width of {width!r}")
    return _Search(count, run_round, width).run()


def _outcome_or_skip(run: ProbeRunner, candidate: int, reference: int) -> ProbeOutcome | CandidateSkipped:
    try:
        return run(candidate, reference)
    except CandidateSkipped as skipped:
        return skipped


def probes_bound(count: int) -> int:
    """The probes a search of ``count`` candidates takes where every probe decides at once: the endpoints, then
    ``ceil(log2(count - 1))`` midpoints."""
    return 1 + math.ceil(math.log2(count - 1)) if count > 2 else 1


class _Search:
    def __init__(self, count: int, run_round: RoundRunner, width: int) -> None:
        self.count, self.run_round, self.width = count, run_round, width
        self.good, self.bad = 0, count - 1
        self.probes: list[Probe] = []
        self.rounds: list[list[int]] = []
        self.skipped: dict[int, str] = {}
        self.against_good: dict[int, Side] = {}  # probes run, not yet taken by the search
        self.against_bad: dict[int, Side] = {}

    def run(self) -> Bisection:
        (endpoints,) = self._round([(self.bad, 0)])
        if endpoints.side == Side.SKIP:
            return self._end(UNDECIDED, found=False)
        if endpoints.side != Side.BAD:
            return self._end(NO_REGRESSION if endpoints.side == Side.GOOD else UNDECIDED, found=False)
        while self.bad - self.good > 1:
            status = self._take_known()
            if status is not None:
                return self._end(status)
            if self.bad - self.good <= 1:
                break
            jobs = self._plan()
            if not jobs:
                return self._end(SKIPPED_RANGE)
            self._round(jobs)
        return self._end(CULPRIT)

    def _take_known(self) -> str | None:
        """Move the bounds as the binary search would, with the results already run; stops at a candidate not yet
        probed, or one waiting for its second opinion. Returns an end's status where the search cannot go on."""
        while self.bad - self.good > 1:
            candidate = self._middle(self.good, self.bad, ())
            if candidate is None:
                return SKIPPED_RANGE
            side = self.against_good.get(candidate)
            if side == Side.UNDECIDED:
                side = self.against_bad.get(candidate)
                if side == Side.UNDECIDED:
                    return UNDECIDED
            if side is None:
                return None
            if side == Side.GOOD:
                self.good = candidate
            else:
                self.bad = candidate
        return None

    def _plan(self) -> list[tuple[int, int]]:
        """This round's probes: the second opinion the middle waits for, or the middle itself, then the lookahead,
        breadth first through the halves, up to the width."""
        jobs: list[tuple[int, int]] = []
        middle = self._middle(self.good, self.bad, ())
        if middle is None:
            return jobs
        if self.against_good.get(middle) == Side.UNDECIDED:
            jobs.append((middle, self.count - 1))
            frontier = [(self.good, middle), (middle, self.bad)]
        else:
            frontier = [(self.good, self.bad)]
        planned: set[int] = {middle} if jobs else set()
        while frontier and len(jobs) < self.width:
            low, high = frontier.pop(0)
            candidate = self._middle(low, high, planned)
            if candidate is None:
                continue
            planned.add(candidate)
            if candidate not in self.against_good:
                jobs.append((candidate, 0))
            frontier += [(low, candidate), (candidate, high)]
        return jobs

    def _round(self, jobs: list[tuple[int, int]]) -> list[Probe]:
        outcomes = self.run_round(jobs)
        first = len(self.probes)
        for (candidate, reference), outcome in zip(jobs, outcomes, strict=True):
            self.probes.append(self._probe(candidate, reference, outcome))
        self.rounds.append(list(range(first, len(self.probes))))
        return self.probes[first:]

    def _probe(self, candidate: int, reference: int, outcome: ProbeOutcome | CandidateSkipped) -> Probe:
        if isinstance(outcome, CandidateSkipped):
            self.skipped[candidate] = str(outcome) or "skipped"
            return Probe(candidate, reference, Side.SKIP, None, skipped=self.skipped[candidate])
        side = side_of(outcome.verdict, "good" if reference == 0 else "bad")
        (self.against_good if reference == 0 else self.against_bad)[candidate] = side
        return Probe(candidate, reference, side, outcome)

    def _middle(self, low: int, high: int, taken: Any) -> int | None:
        """The candidate strictly between ``low`` and ``high`` nearest their middle (the lower on a tie), neither
        skipped nor in ``taken``; None where there is none."""
        middle = (low + high) / 2
        open_ = [c for c in range(low + 1, high) if c not in self.skipped and c not in taken]
        return min(open_, key=lambda c: (abs(c - middle), c)) if open_ else None

    def _end(self, status: str, found: bool = True) -> Bisection:
        """The search's end; ``found``: the endpoints differed, so the bad bound is known bad."""
        return Bisection(status, self.count, self.good, self.bad if found else None, self.probes, dict(self.skipped),
                         [list(members) for members in self.rounds])

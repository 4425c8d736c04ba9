"""The bisection's search (hwregress.bisect.search) with scripted probes: the endpoints first, the binary search on
the good endpoint, the second opinion against the bad endpoint, skipped candidates searched around (as git bisect
skip), and undecided reported with the range, never guessed; each end's exit code."""

from __future__ import annotations

import pytest

from hwregress.bisect.search import (
    CULPRIT,
    NO_REGRESSION,
    SKIPPED_RANGE,
    UNDECIDED,
    CandidateSkipped,
    ProbeOutcome,
    bisect,
    bisect_in_rounds,
    probes_bound,
)
from hwregress.bisect.sides import Side, side_of


def ladder(first_bad: int, skipped: frozenset[int] = frozenset(), undecided: frozenset[int] = frozenset(),
           undecided_against_bad: frozenset[int] = frozenset()):
    """A scripted probe: candidates from ``first_bad`` on are slower (a regression against good, the same as bad)."""
    calls: list[tuple[int, int]] = []

    def run(candidate: int, reference: int) -> ProbeOutcome:
        calls.append((candidate, reference))
        if candidate in skipped:
            raise CandidateSkipped(f"candidate {candidate} does not build")
        bad = candidate >= first_bad
        if reference == 0:
            if candidate in undecided:
                return ProbeOutcome("unstable")
            return ProbeOutcome("regression" if bad else "pass", 0.9 if bad else 1.0)
        if candidate in undecided_against_bad:
            return ProbeOutcome("unstable")
        return ProbeOutcome("pass" if bad else "improvement", 1.0 if bad else 1.11)

    return run, calls


@pytest.mark.parametrize("first_bad", range(1, 16))
def test_every_culprit_of_a_16_candidate_ladder_is_found_within_the_bound(first_bad):
    run, calls = ladder(first_bad)
    found = bisect(16, run)
    assert found.status == CULPRIT and found.culprit == first_bad and found.last_good == first_bad - 1
    assert found.exit_code == 0 and calls[0] == (15, 0)  # the endpoints first
    assert len(found.probes) <= probes_bound(16) == 5


def test_endpoints_that_do_not_differ_stop_the_search_with_no_regression():
    found = bisect(8, lambda candidate, reference: ProbeOutcome("pass", 1.0))
    assert found.status == NO_REGRESSION and found.exit_code == 1 and found.culprit is None
    assert [(p.candidate, p.reference) for p in found.probes] == [(7, 0)]
    faster = bisect(8, lambda candidate, reference: ProbeOutcome("improvement", 1.3))
    assert faster.status == NO_REGRESSION


def test_undecided_endpoints_are_reported_not_guessed():
    found = bisect(8, lambda candidate, reference: ProbeOutcome("unstable"))
    assert found.status == UNDECIDED and found.exit_code == 3 and found.first_bad is None


def test_a_probe_undecided_against_good_is_asked_against_bad_and_decides_there():
    run, calls = ladder(5, undecided=frozenset({4}))
    found = bisect(9, run)
    assert found.culprit == 5
    assert (4, 0) in calls and (4, 8) in calls  # the second opinion
    assert [p.side for p in found.probes if p.candidate == 4] == [Side.UNDECIDED, Side.GOOD]


def test_a_probe_undecided_against_both_endpoints_stops_the_search_with_its_range():
    run, _ = ladder(5, undecided=frozenset({4}), undecided_against_bad=frozenset({4}))
    found = bisect(9, run)
    assert found.status == UNDECIDED and found.exit_code == 3
    assert (found.last_good, found.first_bad) == (0, 8)  # what it had narrowed to: nothing, at its first midpoint


def test_a_candidate_that_does_not_build_is_skipped_and_the_search_goes_on_around_it():
    run, _ = ladder(6, skipped=frozenset({4, 7}))
    found = bisect(9, run)
    assert found.status == CULPRIT and found.culprit == 6
    assert set(found.skipped) == {4} and "does not build" in found.skipped[4]
    assert [p.candidate for p in found.probes] == [8, 4, 3, 5, 6]  # 4 skipped, the nearest untried instead; 7 unneeded


def test_only_skipped_candidates_between_the_bounds_leave_the_culprit_among_them():
    run, _ = ladder(5, skipped=frozenset({3, 4}))
    found = bisect(6, run)
    assert found.status == SKIPPED_RANGE and found.exit_code == 3
    assert (found.last_good, found.first_bad) == (2, 5) and set(found.skipped) == {3, 4}


def test_two_candidates_need_only_the_endpoints():
    run, _ = ladder(1)
    found = bisect(2, run)
    assert found.culprit == 1 and len(found.probes) == 1 == probes_bound(2)
    with pytest.raises(ValueError, match="a good and a bad candidate"):
        bisect(1, run)


@pytest.mark.parametrize(("verdict", "good", "bad"), [
    ("regression", Side.BAD, Side.BAD), ("pass", Side.GOOD, Side.BAD), ("improvement", Side.GOOD, Side.GOOD),
    ("unstable", Side.UNDECIDED, Side.UNDECIDED)])
def test_a_verdict_against_each_endpoint_puts_the_candidate_on_its_side(verdict, good, bad):
    assert side_of(verdict, "good") == good and side_of(verdict, "bad") == bad


def _rounds_of(run):
    """A round runner of ``run``, keeping each round's jobs."""
    rounds: list[list[tuple[int, int]]] = []

    def run_round(jobs):
        rounds.append(list(jobs))
        outcomes = []
        for job in jobs:
            try:
                outcomes.append(run(*job))
            except CandidateSkipped as skipped:
                outcomes.append(skipped)
        return outcomes

    return run_round, rounds


@pytest.mark.parametrize("first_bad", range(1, 16))
def test_three_devices_settle_two_levels_a_round_and_find_every_culprit(first_bad):
    run, _ = ladder(first_bad)
    run_round, rounds = _rounds_of(run)
    found = bisect_in_rounds(16, run_round, width=3)
    assert found.status == CULPRIT and found.culprit == first_bad
    assert rounds[0] == [(15, 0)] and len(rounds) <= 3 and all(len(jobs) <= 3 for jobs in rounds)
    assert rounds[1] == [(7, 0), (3, 0), (11, 0)]  # the midpoint, then both halves' midpoints
    assert [len(members) for members in found.rounds] == [len(jobs) for jobs in rounds]


@pytest.mark.parametrize("first_bad", [2, 5, 6, 8])
def test_one_device_runs_the_sequential_search_probe_for_probe(first_bad):
    sequential, calls = ladder(first_bad, skipped=frozenset({4}), undecided=frozenset({6}))
    bisect(9, sequential)
    in_rounds, _ = ladder(first_bad, skipped=frozenset({4}), undecided=frozenset({6}))
    run_round, rounds = _rounds_of(in_rounds)
    bisect_in_rounds(9, run_round, width=1)
    assert [job for jobs in rounds for job in jobs] == calls and all(len(jobs) == 1 for jobs in rounds)


def test_a_second_opinion_runs_with_the_lookahead_below_it_and_skips_are_searched_around():
    run, _ = ladder(6, skipped=frozenset({3}), undecided=frozenset({4}))
    run_round, rounds = _rounds_of(run)
    found = bisect_in_rounds(9, run_round, width=3)
    assert found.status == CULPRIT and found.culprit == 6 and set(found.skipped) == {3}
    assert rounds[1] == [(4, 0), (2, 0), (6, 0)]
    assert rounds[2][0] == (4, 8)  # the second opinion first, then what lies below it
    with pytest.raises(ValueError, match="a width of 0"):
        bisect_in_rounds(9, run_round, width=0)

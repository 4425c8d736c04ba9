"""Trend analysis of the session history: change points and their first bad session, what changed there, and
the status (regression, drift, improvement, accepted, steady, short) on synthetic histories of known shape."""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
import ruptures
from hypothesis import given, settings
from hypothesis import strategies as st
from ruptures.costs import CostL1

from hwregress.hardware.facts import PERFORMANCE_FIELDS
from hwregress.judge import trends
from hwregress.judge.changepoints import L1Cost, change_points, last_change_index
from hwregress.judge.session_diff import MAX_PACKAGE_LINES, differences
from hwregress.judge.trends import STATUSES, analyze, analyze_all

START = dt.datetime(2026, 1, 1, 2, 0, tzinfo=dt.timezone.utc)
LEVEL = 1000.0  # samples/s

PerSession = Callable[[int], Any]


def session_time(index: int) -> str:
    """Session ``index``'s start: one day apart, UTC ISO 8601."""
    return (START + dt.timedelta(days=index)).isoformat()


def history(medians: Sequence[float], *, verdict: PerSession = lambda i: "pass", environment: PerSession = lambda i: {},
            baseline: PerSession = lambda i: None, recorded_at: PerSession = lambda i: None, test_id: str = "t",
            hardware_key: str = "cpu-key") -> list[dict[str, Any]]:
    """History rows of one test, session ``i`` holding ``medians[i]`` and the per-session fields given."""
    return [{"v": 1, "session": f"s{i}", "time": session_time(i), "test_id": test_id, "hardware_key": hardware_key,
             "unit": "samples/s", "median": float(median), "verdict": verdict(i), "environment": environment(i),
             "hwregress_version": "0.1", "packages": "p0", "identity": {}, "device_name": "CPU",
             "baseline_median": baseline(i), "baseline_recorded_at": recorded_at(i)}
            for i, median in enumerate(medians)]


def noisy(seed: int, shape: np.ndarray, noise: float) -> np.ndarray:
    """``LEVEL * shape`` with relative normal noise ``noise`` (seeded)."""
    rng = np.random.default_rng(seed)
    return LEVEL * shape * (1.0 + noise * rng.standard_normal(shape.size))


def step_series(seed: int, sessions: int = 40, at: int = 20, step: float = -0.10, noise: float = 0.02) -> np.ndarray:
    return noisy(seed, np.where(np.arange(sessions) < at, 1.0, 1.0 + step), noise)


ORIGINAL_BASELINE = {"baseline": lambda i: LEVEL, "recorded_at": lambda i: session_time(0)}
TORCH_UPGRADE_AT_20 = {"environment": lambda i: {"torch": "2.4.0" if i < 20 else "2.5.0"}}


# steps


@pytest.mark.parametrize("seed", range(20))
def test_a_ten_percent_step_is_one_change_at_its_session(seed):
    medians = step_series(seed)
    found = change_points(medians)
    assert len(found) == 1 and abs(found[0].index - 20) <= 1, [c.index for c in found]

    flagged = analyze(history(medians, verdict=lambda i: "regression" if i >= 20 else "pass",
                              **ORIGINAL_BASELINE, **TORCH_UPGRADE_AT_20))
    assert flagged.status == "regression", flagged.summary
    assert [item.change.index for item in flagged.changes] == [found[0].index]
    missed = analyze(history(medians, **ORIGINAL_BASELINE, **TORCH_UPGRADE_AT_20))
    assert missed.status == "drift", missed.summary  # the per-run threshold passed every session
    assert "no single session flagged it" in missed.summary
    assert missed.drift < -0.05

    first_bad = missed.changes[0]
    index = first_bad.change.index
    assert first_bad.first_bad is missed.rows[index] and first_bad.last_good is missed.rows[index - 1]
    assert first_bad.change.significant and first_bad.change.change == pytest.approx(-0.10, abs=0.03)
    if index == 20:  # the step's own session: the upgrade is what changed there
        assert first_bad.differences == ["torch 2.4.0 -> 2.5.0"]


def test_steps_are_placed_exactly_for_most_seeds():
    """The placement checks of the test above name the upgrade only at an exact hit: most seeds must be exact."""
    exact = sum(change_points(step_series(seed))[0].index == 20 for seed in range(20))
    assert exact >= 18


def test_step_without_baseline_is_judged_against_the_first_segment():
    trend = analyze(history(step_series(3)))
    assert trend.reference_source == "first segment"
    assert trend.status == "drift"
    assert trend.drift == pytest.approx(-0.10, abs=0.03)


def test_a_step_up_is_an_improvement():
    trend = analyze(history(step_series(4, step=0.10), **ORIGINAL_BASELINE))
    assert trend.status == "improvement", trend.summary
    assert trend.drift == pytest.approx(0.10, abs=0.03)


def test_pure_noise_has_no_change_and_is_steady(capsys):
    """The module doc of changepoints claims a change in 0% of 40-session series of pure 3% noise."""
    series = 200
    with_change, not_steady = [], []
    for seed in range(series):
        trend = analyze(history(noisy(seed, np.ones(40), 0.03), **ORIGINAL_BASELINE))
        if trend.changes:
            with_change.append(seed)
        if trend.status != "steady":
            not_steady.append((seed, trend.status))
    with capsys.disabled():
        print(f"\npure 3% noise, 40 sessions: a change in {len(with_change)}/{series} series, "
              f"not steady in {len(not_steady)}/{series}")
    assert with_change == []
    assert not_steady == []


# slow drift


@pytest.mark.parametrize("seed", range(20))
def test_a_slow_drift_no_run_flagged_is_drift(seed):
    medians = noisy(seed, 0.99 ** np.arange(15), 0.01)
    trend = analyze(history(medians, **ORIGINAL_BASELINE))
    assert trend.status == "drift", trend.summary
    assert -0.20 < trend.drift < -0.05
    assert trend.reference == LEVEL and trend.reference_source == "baseline"


# accepted


def reset_after_step(seed: int, reset_at: int = 25, reset: bool = True) -> list[dict[str, Any]]:
    """A 10% step at session 20 flagged until session ``reset_at``, where the baseline was re-recorded at the new
    level (``--update-baselines=reset``); without ``reset`` the original baseline stays."""
    medians = step_series(seed)
    new_level = float(np.median(medians[20:max(reset_at, 21)]))
    reset_from = reset_at if reset else len(medians)
    return history(medians, verdict=lambda i: "regression" if 20 <= i < reset_at else "pass",
                   baseline=lambda i: LEVEL if i < reset_from else new_level,
                   recorded_at=lambda i: session_time(0 if i < reset_from else reset_at))


def test_the_last_change_is_found_anew_when_a_history_changes_in_place():
    history = [100.0] * 6 + [80.0] * 6
    assert last_change_index(history) == 6
    history[6:] = [100.0] * 6  # the same list object, now without a shift: the kept answer must not come back
    assert last_change_index(history) == 0
    assert last_change_index(np.array([100.0] * 4 + [60.0] * 4)) == 4
    with pytest.raises(ValueError, match="finite and > 0"):
        last_change_index([100.0, -1.0, 100.0])


@pytest.mark.parametrize("seed", range(5))
def test_a_step_with_the_baseline_re_recorded_after_it_is_accepted(seed):
    accepted = analyze(reset_after_step(seed))
    assert accepted.status == "accepted", accepted.summary
    assert accepted.reference_source == "baseline"
    assert "re-recorded" in accepted.summary

    kept = analyze(reset_after_step(seed, reset=False))
    assert kept.status == "regression", kept.summary


def test_re_recording_in_the_first_bad_session_itself_is_accepted():
    trend = analyze(reset_after_step(0, reset_at=20))
    assert trend.changes[-1].first_bad["time"] == trend.rows[-1]["baseline_recorded_at"]
    assert trend.status == "accepted", trend.summary


def test_a_step_below_tolerance_does_not_count_as_accepted():
    medians = step_series(0, step=-0.03, noise=0.003)
    rows = history(medians, baseline=lambda i: LEVEL if i < 25 else float(np.median(medians[20:25])),
                   recorded_at=lambda i: session_time(0 if i < 25 else 25))
    trend = analyze(rows)
    assert trend.changes and abs(trend.changes[-1].change.change) < trends.DEFAULT_TOLERANCE
    assert trend.status == "steady", trend.summary


# differences


def row(**fields: Any) -> dict[str, Any]:
    return {"environment": {"torch": "2.4.0", "python": "3.11"}, "hwregress_version": "0.1", "packages": "aaaa",
            "identity": {"cpu_family": 25, "memory_gib": 64}, "device_name": "AMD EPYC 7B13",
            "telemetry": {"power_w": 250.0, "sm_clock_mhz": 1800.0}, **fields}


PACKAGE_LISTS = {"aaaa": ["gone==1.0", "numpy==1.26.4", "torch==2.4.0"],
                 "bbbb": ["New==0.1", "numpy==1.26.4", "torch==2.5.0"]}


def test_differences_name_changed_packages_by_version():
    lines = differences(row(), row(packages="bbbb"), PACKAGE_LISTS.get)
    assert lines == ["gone 1.0 -> (removed)", "New (absent) -> 0.1", "torch 2.4.0 -> 2.5.0"]


@pytest.mark.parametrize("lookup", [None, PACKAGE_LISTS.get, {}.get], ids=["no-lookup", "known", "unknown-hashes"])
def test_differences_name_a_package_hash_when_the_lists_are_unknown(lookup):
    lines = differences(row(packages="aaaa"), row(packages="cccc"), lookup)
    assert lines == ["installed packages changed (hash aaaa -> cccc)"]


def test_differences_cap_the_package_lines():
    old = [f"pkg{i:02d}==1.0" for i in range(20)]
    new = [f"pkg{i:02d}==2.0" for i in range(20)]
    lines = differences(row(packages="old"), row(packages="new"), {"old": old, "new": new}.get)
    assert len(lines) == MAX_PACKAGE_LINES + 1
    assert lines[0] == "pkg00 1.0 -> 2.0"
    assert lines[-1] == f"and {20 - MAX_PACKAGE_LINES} more package changes"


def test_differences_name_telemetry_beyond_five_percent_only():
    after = row(telemetry={"power_w": 200.0, "sm_clock_mhz": 1850.0})  # -20% power, +2.8% clock
    assert differences(row(), after) == ["mean power 250 -> 200 W"]


def test_differences_name_performance_identity_fields_only():
    assert "cpu_family" in PERFORMANCE_FIELDS and "memory_gib" not in PERFORMANCE_FIELDS
    after = row(identity={"cpu_family": 26, "memory_gib": 128})
    assert differences(row(), after) == ["cpu_family: 25 -> 26"]


def test_differences_name_software_version_and_device():
    after = row(environment={"torch": "2.5.0", "cuda": "12.4"}, hwregress_version="0.2", device_name="AMD EPYC 9B14")
    assert differences(row(), after) == ["cuda None -> 12.4", "python 3.11 -> None", "torch 2.4.0 -> 2.5.0",
                                         "hwregress 0.1 -> 0.2", "device AMD EPYC 7B13 -> AMD EPYC 9B14"]


def test_differences_leave_out_a_version_one_session_did_not_record():
    unknown = {key: value for key, value in row().items() if key != "hwregress_version"}  # a recovered old journal's
    assert differences(row(), unknown) == differences(unknown, row(hwregress_version="0.2")) == [
        "nothing recorded changed (software, packages, hardware identity, telemetry, CPU health): look at what "
        "hwregress does not see (firmware, BIOS, the code under test)"]


def test_differences_name_cpu_contention_and_the_first_bad_sessions_own_diagnosis():
    before = row(health={"other_cpu_fraction": 0.02, "steal_fraction": 0.0})
    after = row(health={"other_cpu_fraction": 0.39, "steal_fraction": 0.03},
                diagnosis=["CPU contention: other processes used 39% of the 2 cores' time", "operators slower"])
    assert differences(before, after) == ["other processes' share of the cores 2% -> 39%",
                                          "diagnosed in the first bad session: CPU contention: other processes used "
                                          "39% of the 2 cores' time"]


def test_differences_say_when_nothing_recorded_changed():
    lines = differences(row(), row(), PACKAGE_LISTS.get)
    assert len(lines) == 1 and lines[0].startswith("nothing recorded changed")


# short histories and bad arguments


@pytest.mark.parametrize("sessions", [1, 2])
def test_fewer_than_three_sessions_is_short(sessions):
    trend = analyze(history([LEVEL * 0.5] * sessions, **ORIGINAL_BASELINE))
    assert trend.status == "short"
    assert trend.level_now is None and trend.drift is None
    assert "too few" in trend.summary


def test_no_rows_is_an_error():
    with pytest.raises(ValueError, match="no history rows"):
        analyze([])


@pytest.mark.parametrize("tolerance", [0.0, 1.0, -0.1, 1.5, float("nan")])
def test_tolerance_outside_zero_one_is_an_error(tolerance):
    with pytest.raises(ValueError, match="tolerance"):
        analyze(history([LEVEL] * 5), tolerance=tolerance)


# analyze_all


def test_analyze_all_groups_by_key_and_test_and_puts_the_worst_first():
    groups = {
        ("cpu-a", "steady-b"): history(noisy(1, np.ones(20), 0.01), **ORIGINAL_BASELINE),
        ("cpu-b", "step"): history(step_series(2), verdict=lambda i: "regression" if i >= 20 else "pass",
                                   **ORIGINAL_BASELINE),
        ("cpu-a", "short"): history([LEVEL, LEVEL]),
        ("cpu-b", "drift"): history(noisy(3, 0.99 ** np.arange(15), 0.01), **ORIGINAL_BASELINE),
        ("cpu-b", "steady-a"): history(noisy(4, np.ones(20), 0.01), **ORIGINAL_BASELINE),
    }
    rows = []
    for (key, test_id), group in groups.items():
        rows += [{**r, "hardware_key": key, "test_id": test_id} for r in group]
    shuffled = [rows[i] for i in np.random.default_rng(0).permutation(len(rows))]

    found = analyze_all(shuffled)
    assert [(t.hardware_key, t.test_id, t.status) for t in found] == [
        ("cpu-b", "step", "regression"), ("cpu-b", "drift", "drift"), ("cpu-a", "steady-b", "steady"),
        ("cpu-b", "steady-a", "steady"), ("cpu-a", "short", "short")]
    for trend in found:
        expected = [{**r, "hardware_key": trend.hardware_key, "test_id": trend.test_id}
                    for r in groups[(trend.hardware_key, trend.test_id)]]
        assert trend.rows == expected  # back in time order


# any history


positive_medians = st.floats(min_value=0, exclude_min=True, allow_nan=False, allow_infinity=False)
realistic_medians = st.floats(min_value=1e-6, max_value=1e12)


def drawn_history(data: st.DataObject, medians: list[float]) -> list[dict[str, Any]]:
    sessions = len(medians)
    verdicts = data.draw(st.lists(st.sampled_from(["pass", "regression", "improvement", "new"]),
                                  min_size=sessions, max_size=sessions))
    baseline = data.draw(st.none() | realistic_medians)
    recorded = data.draw(st.none() | st.integers(0, sessions))
    return history(medians, verdict=verdicts.__getitem__, baseline=lambda i: baseline,
                   recorded_at=lambda i: None if recorded is None else session_time(recorded))


def check_invariants(trend: trends.Trend, sessions: int) -> None:
    assert trend.status in STATUSES
    indices = [item.change.index for item in trend.changes]
    assert all(a < b for a, b in itertools.pairwise(indices))
    assert all(0 < index < sessions for index in indices)
    assert (trend.status == "short") == (sessions < trends.MIN_SESSIONS)
    assert trend.summary


@settings(max_examples=80)
@given(medians=st.lists(positive_medians, min_size=1, max_size=60), data=st.data())
def test_any_positive_medians_analyse(medians, data):
    check_invariants(analyze(drawn_history(data, medians)), len(medians))


@settings(max_examples=80)
@given(medians=st.lists(realistic_medians, min_size=3, max_size=60), data=st.data())
def test_realistic_medians_give_a_finite_level(medians, data):
    trend = analyze(drawn_history(data, medians))
    check_invariants(trend, len(medians))
    assert trend.level_now is not None and 0 < trend.level_now < float("inf")
    assert trend.drift is not None and np.isfinite(trend.drift)


def test_a_latest_session_judged_a_regression_is_never_steady():
    """Found on the 2-core VM's dashboard: eight quiet sessions then one under two busy loops at 0.24 of the
    baseline, judged `regression` by the session itself, read "steady": one session makes no change point."""
    medians = [LEVEL * f for f in (1.0, 1.01, 0.99, 1.0, 1.02, 0.98, 1.0, 1.01, 0.24)]
    rows = history(medians, verdict=lambda i: "regression" if i == 8 else "pass", **ORIGINAL_BASELINE)
    rows[-1]["ratio"] = 0.24
    trend = analyze(rows)
    assert trend.status == "regression" and trends.has_changed(trend)
    assert "latest session" in trend.summary and "0.24" in trend.summary


def test_a_latest_session_that_passed_keeps_the_series_status():
    medians = [LEVEL * f for f in (1.0, 1.01, 0.99, 1.0, 1.02, 0.98, 1.0, 1.01, 0.995)]
    assert analyze(history(medians, **ORIGINAL_BASELINE)).status == "steady"


# the L1 cost PELT runs on: ruptures' numbers, faster

def assert_same_costs_and_changes(values: np.ndarray, segments: Sequence[tuple[int, int]], penalty: float) -> None:
    signal = values.reshape(-1, 1)
    ours, theirs = L1Cost().fit(signal), CostL1().fit(signal)
    for start, end in segments:
        assert ours.error(start, end) == theirs.error(start, end), (start, end)  # bit for bit, not approximately
    assert (ruptures.Pelt(custom_cost=L1Cost(), min_size=2, jump=1).fit(signal).predict(pen=penalty)
            == ruptures.Pelt(model="l1", min_size=2, jump=1).fit(signal).predict(pen=penalty))


@settings(max_examples=60)
@given(values=st.lists(st.floats(-3, 3, allow_nan=False) | st.sampled_from([0.0, 0.5, -0.5]), min_size=3,
                       max_size=30),
       penalty=st.floats(0.0, 2.0))
def test_the_l1_cost_is_ruptures_own_for_every_segment(values, penalty):
    segments = [(start, end) for start in range(len(values)) for end in range(start + 2, len(values) + 1)]
    assert_same_costs_and_changes(np.array(values), segments, penalty)


def test_the_l1_cost_is_ruptures_own_on_a_long_history():
    step = np.r_[np.ones(150), 0.9 * np.ones(150)]  # 300 sessions, 10% down at the middle, 1% noise
    values = np.log(100 * (1 + 0.01 * np.random.default_rng(1).standard_normal(300)) * step)
    segments = [(start, end) for start in range(0, 300, 7) for end in range(start + 2, 301, 11)]
    assert_same_costs_and_changes(values, segments, 0.1)


# the analysed window
def test_a_long_history_is_analysed_over_its_latest_window():
    """500 sessions, a 20% step at session 60 and another at 470: the default window (365) sees only the second."""
    medians = noisy(7, np.select([np.arange(500) < 60, np.arange(500) < 470], [1.0, 0.8], 0.64), 0.01)
    windowed = analyze(history(medians))
    assert (len(windowed.rows), windowed.earlier_sessions) == (trends.TREND_WINDOW, 500 - trends.TREND_WINDOW)
    assert [item.first_bad["session"] for item in windowed.changes] == ["s470"]
    assert windowed.summary.endswith(f"; analysed the latest {trends.TREND_WINDOW} of 500 sessions")
    whole = analyze(history(medians), window=None)
    assert [item.first_bad["session"] for item in whole.changes] == ["s60", "s470"]
    assert whole.earlier_sessions == 0 and "analysed the latest" not in whole.summary
    assert analyze(history(medians[:300])).earlier_sessions == 0


@pytest.mark.parametrize("window", [0, -5, trends.MIN_SESSIONS - 1])
def test_a_window_too_short_for_a_trend_is_refused(window):
    with pytest.raises(ValueError, match=f"window {window} must be a number of sessions >= {trends.MIN_SESSIONS}"):
        analyze(history([LEVEL] * 5), window=window)

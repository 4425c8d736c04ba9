"""Timing discipline with a deterministic timer: warmup excluded, calibration, noise extension."""

from __future__ import annotations

import pytest

from hwregress.measure.timing import HostClockTimer, TimingPlan, measure


class ScriptedTimer:
    """Reports scripted seconds per step for each successive round."""

    def __init__(self, per_step: list[float]) -> None:
        self.per_step = list(per_step)
        self.calls: list[int] = []

    def time_round(self, run_steps, steps):
        run_steps()
        self.calls.append(steps)
        return steps * self.per_step.pop(0)


def test_warmup_is_excluded_and_rounds_calibrated():
    executed = []
    timer = ScriptedTimer([0.5] + [0.01] * 10)  # the first (warmup) step is slow: compilation
    timing = measure(lambda: executed.append(1), timer, TimingPlan(warmup_steps=3, rounds=10, min_round_s=0.2))
    assert timing.steps_per_round == 1  # calibrated on the slow last warmup step
    assert timing.round_seconds == pytest.approx([0.01] * 10)
    assert len(executed) == 2 + 1 + 10


def test_steps_per_round_reach_min_round_time():
    timer = ScriptedTimer([0.01] * 11)
    timing = measure(lambda: None, timer, TimingPlan(warmup_steps=1, rounds=10, min_round_s=0.1))
    assert timing.steps_per_round == 10
    assert timing.step_seconds == pytest.approx([0.01] * 10)


def test_noisy_window_is_extended_until_stable():
    noisy = [0.01, 0.01, 0.02, 0.01, 0.03, 0.01, 0.02, 0.01]
    timer = ScriptedTimer([0.01] + noisy + [0.01] * 40)
    timing = measure(lambda: None, timer, TimingPlan(warmup_steps=1, rounds=8, min_round_s=0.001, max_rel_iqr=0.1))
    assert timing.extended_rounds > 0 and timing.stable


def test_budget_caps_extension_and_marks_unstable():
    pattern = [0.01, 0.03] * 200
    timer = ScriptedTimer([0.01, *pattern])
    timing = measure(lambda: None, timer, TimingPlan(warmup_steps=1, rounds=4, min_round_s=0.001, budget_s=0.5))
    assert not timing.stable and sum(timing.round_seconds) < 0.55


def test_host_clock_timer_uses_its_clock():
    ticks = iter([1.0, 1.25])
    assert HostClockTimer("cpu", clock=lambda: next(ticks)).time_round(lambda: None, 1) == 0.25


@pytest.mark.parametrize("kwargs", [{"rounds": 2}, {"warmup_steps": 0}, {"min_round_s": 0}])
def test_bad_plans_are_refused(kwargs):
    with pytest.raises(ValueError):
        TimingPlan(**kwargs)

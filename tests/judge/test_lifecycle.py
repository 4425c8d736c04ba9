"""The baseline lifecycle: which update mode writes what."""

from __future__ import annotations

import pytest

from hwregress.judge.lifecycle import HISTORY_LENGTH, make_entry, update_action
from hwregress.store.figures import CompileFigures
from hwregress.store.results import TestRecord


@pytest.mark.parametrize(("mode", "verdict", "has_entry", "action"), [
    (None, "regression", True, "none"),
    ("all", "pass", True, "recorded"),
    ("all", "new", False, "recorded"),
    ("all", "regression", True, "kept-regression"),
    ("force", "regression", True, "recorded"),
    ("missing", "pass", True, "kept-existing"),
    ("missing", "new", False, "recorded"),
    ("all", "oom", False, "none"),
    ("all", "unstable", True, "kept-unstable"),  # a noisy window would widen every later threshold
    ("all", "unstable", False, "kept-unstable"),
    ("force", "unstable", True, "recorded"),
    ("all", "invalid", True, "none"),
])
def test_update_action(mode, verdict, has_entry, action):
    assert update_action(mode, verdict, has_entry) == action


def test_bad_mode_is_an_error():
    with pytest.raises(ValueError, match="use one of all, missing, force"):
        update_action("sometimes", "pass", True)


def record(median: float, torch_version: str = "2.13.0") -> TestRecord:
    return TestRecord("t", samples=[median] * 5, environment={"torch": torch_version}, verdict="pass")


def test_entry_records_when_and_with_what_and_keeps_history():
    entry = make_entry(record(10.0))
    assert entry["environment"] == {"torch": "2.13.0"} and entry["recorded_at"] and entry["hwregress_version"]
    assert entry["history"] == [10.0]
    for value in range(HISTORY_LENGTH + 5):
        entry = make_entry(record(float(value)), entry)
    assert len(entry["history"]) == HISTORY_LENGTH and entry["history"][-1] == HISTORY_LENGTH + 4


def test_history_restarts_on_a_new_software_stack():
    entry = make_entry(record(10.0), make_entry(record(9.0)))
    assert entry["history"] == [9.0, 10.0]
    assert make_entry(record(11.0, "2.14.0"), entry)["history"] == [11.0]


def test_entry_pools_the_last_sessions_and_starts_afresh_on_a_new_stack_or_reset():
    from hwregress.judge.lifecycle import POOLED_SESSIONS

    entry = None
    for median in range(1, POOLED_SESSIONS + 3):
        entry = make_entry(record(float(median)), entry)
    assert len(entry["session_samples"]) == POOLED_SESSIONS
    assert entry["samples"] == [s for session in entry["session_samples"] for s in session]
    assert entry["session_samples"][0] == [3.0] * 5  # the oldest sessions left the pool
    assert entry["n"] == 5 * POOLED_SESSIONS and len(entry["history"]) == POOLED_SESSIONS + 2
    moved = make_entry(record(50.0, torch_version="2.14.0"), entry)
    assert moved["session_samples"] == [[50.0] * 5] and moved["history"] == [50.0]
    assert make_entry(record(60.0), entry, fresh=True)["history"] == [60.0]


def test_reset_mode_accepts_a_regression_at_once():
    assert update_action("reset", "regression", True) == "recorded"
    assert update_action("reset", "unstable", True) == "recorded"


def test_a_session_that_extended_its_rounds_weighs_as_much_as_any_other():
    entry = None
    for _ in range(3):
        entry = make_entry(record(30.0), entry)
    noisy = TestRecord("t", samples=[10.0 + i % 3 for i in range(200)], environment={"torch": "2.13.0"}, verdict="pass")
    entry = make_entry(noisy, entry)
    assert [len(session) for session in entry["session_samples"]] == [5, 5, 5, 10]
    assert entry["median"] == 30.0  # three quiet sessions outvote one noisy session of 200 rounds


def compiled_record(compile_s: float, cache: str, torch_version: str = "2.13.0") -> TestRecord:
    return TestRecord("t", samples=[10.0] * 5, environment={"torch": torch_version}, verdict="pass",
                      compile=CompileFigures(compile_s=compile_s, cache=cache))


def test_entry_keeps_the_compile_time_with_its_cache_state_and_restarts_when_the_state_changes():
    entry = make_entry(compiled_record(2.0, "cold"))
    entry = make_entry(compiled_record(4.0, "cold"), entry)
    entry = make_entry(compiled_record(3.0, "cold"), entry)
    assert (entry["compile_s"], entry["compile_cache"], entry["compile_history"]) == (3.0, "cold", [2.0, 4.0, 3.0])
    warm = make_entry(compiled_record(0.1, "warm"), entry)  # a warm compile never joins the cold ones' history
    assert (warm["compile_s"], warm["compile_cache"], warm["compile_history"]) == (0.1, "warm", [0.1])
    assert make_entry(compiled_record(5.0, "cold", "2.14.0"), entry)["compile_history"] == [5.0]
    assert "compile_s" not in make_entry(record(10.0))


def _with_peak(peak: int | None, torch_version: str = "2.13.0") -> TestRecord:
    measured = record(100.0, torch_version)
    measured.peak_memory_bytes = peak
    return measured


MIB = 2**20


def test_the_memory_ceiling_is_based_on_the_largest_peak_of_the_last_sessions():
    # alexnet train bs8 on the 2-core VM, unchanged code: RSS peaks of 922, 771, 782 MiB, then a quiet 921 MiB
    # session failed the ceiling of the latest session's 772 MiB x 1.1 + 64 MiB = 913 MiB
    entry = None
    for peak in (922 * MIB, 771 * MIB, 772 * MIB):
        entry = make_entry(_with_peak(peak), entry)
    assert entry["peak_memory_bytes"] == 922 * MIB
    assert entry["peak_memory_history"] == [922 * MIB, 771 * MIB, 772 * MIB]


def test_the_peak_memory_history_keeps_the_pooled_sessions_and_restarts_on_a_new_stack():
    from hwregress.judge.lifecycle import POOLED_SESSIONS

    entry = None
    for peak in range(1, POOLED_SESSIONS + 3):
        entry = make_entry(_with_peak(peak * MIB), entry)
    assert entry["peak_memory_history"] == [peak * MIB for peak in range(3, POOLED_SESSIONS + 3)]
    fresh = make_entry(_with_peak(5 * MIB, torch_version="2.14.0"), entry)
    assert fresh["peak_memory_history"] == [5 * MIB] and fresh["peak_memory_bytes"] == 5 * MIB


@pytest.mark.parametrize("history", [["900"], [None], [-1], [float("nan")], [True], "oops"])
def test_an_entry_of_before_or_a_hand_edited_history_starts_the_peak_history_with_what_it_can_read(history):
    old = make_entry(_with_peak(800 * MIB))
    del old["peak_memory_history"]
    assert make_entry(_with_peak(700 * MIB), old)["peak_memory_history"] == [800 * MIB, 700 * MIB]
    old["peak_memory_history"] = history
    assert make_entry(_with_peak(700 * MIB), old)["peak_memory_history"] == [800 * MIB, 700 * MIB]


def test_a_record_without_a_peak_keeps_no_memory_history():
    assert "peak_memory_history" not in make_entry(_with_peak(None))

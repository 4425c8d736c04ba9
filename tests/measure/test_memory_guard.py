"""The CPU memory guard: extrapolation, cgroup headroom, and the refusal of a batch that cannot fit."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hwregress.measure.memory_guard import GUARDED_BATCH, Headroom, extrapolate, host_headroom, refusal

MIB = 2**20


def test_linear_extrapolation_from_two_probes():
    assert extrapolate({1: 110 * MIB, 2: 120 * MIB}, 4000) == 110 * MIB + 3999 * 10 * MIB


@given(st.integers(0, 2**34), st.integers(0, 2**34), st.integers(3, 10**6))
def test_extrapolation_never_predicts_less_than_the_first_probe(f1, f2, batch):
    assert extrapolate({1: f1, 2: f2}, batch) >= f1


def test_a_batch_that_would_not_fit_is_refused_before_it_runs():
    probed = []

    def footprint(batch: int) -> int:
        probed.append(batch)
        return 100 * MIB + batch * 2 * MIB

    why = refusal(footprint, 4000, Headroom(3 * 2**30, "memory cgroup headroom (/sys/fs/cgroup/memory.max)"))
    assert probed == [1, 2]
    assert why is not None and "batch 4000" in why and "memory cgroup headroom" in why and "7.91 GiB" in why
    assert refusal(footprint, 64, Headroom(3 * 2**30, "x")) is None


def test_small_batches_are_not_probed():
    assert refusal(lambda b: pytest.fail("probed"), GUARDED_BATCH, Headroom(1, "x")) is None


def test_cgroup_v2_limit_below_system_memory_wins(tmp_path):
    (tmp_path / "memory.max").write_text(f"{3 * 2**30}\n")
    (tmp_path / "memory.current").write_text(f"{2**30}\n")
    headroom = host_headroom(tmp_path)
    assert headroom.available_bytes == 2 * 2**30 and "memory.max" in headroom.source


@pytest.mark.parametrize("limit", ["max", "garbage", str(2**63 - 4096)])
def test_no_cgroup_limit_falls_back_to_system_memory(tmp_path, limit):
    (tmp_path / "memory.max").write_text(limit)
    (tmp_path / "memory.current").write_text("1000")
    assert host_headroom(tmp_path).source == "available system memory"

"""The distributed families' arithmetic and bookkeeping, without launching anything: topology and world sizes,
the job's figures (global throughput, efficiency, interference), the communication share of profiler events,
bus bandwidth, the watchdog's stalled ranks, failure descriptions and the efficiency verdict."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hwregress.judge.compare import Measured, judge
from hwregress.judge.tolerances import Tolerances
from hwregress.scaleout import figures
from hwregress.scaleout.collectives import bus_bandwidth_gbps, message_sizes
from hwregress.scaleout.comm_profile import communication_share, is_communication, union_us
from hwregress.scaleout.failure_text import describe_failures
from hwregress.scaleout.job import JobSpec, read_statuses, write_status
from hwregress.scaleout.launch import stalled_ranks
from hwregress.scaleout.topology import (
    Topology,
    default_world_sizes,
    oversubscription,
    parse_endpoint,
    ranks_per_node,
    threads_per_rank,
)
from hwregress.store.verdicts import Verdict


# -- topology ----------------------------------------------------------------------------------------
def test_oversubscription_names_the_first_world_size_beyond_the_node_and_its_limit():
    assert oversubscription([1, 2], 1, "cuda", 2) is None
    assert oversubscription([1, 2, 4, 8], 1, "cuda", 2) == (
        "world size 4 needs 4 ranks on this node, beyond its 2 selected GPUs (NCCL: one rank per GPU); use world "
        "sizes up to 2, select more GPUs with --devices, or --oversubscribe (ini: hwregress_oversubscribe = true) to "
        "keep them (skipped as unsupported)")
    assert oversubscription([2, 4], 2, "cpu", 2) is None  # two ranks on each of two nodes
    assert oversubscription([2, 6], 2, "cpu", 2) == (
        "world size 6 needs 3 ranks on each of 2 nodes, beyond this node's 2 usable CPU cores (gloo); use world "
        "sizes up to 4, or --oversubscribe (ini: hwregress_oversubscribe = true) to run them anyway")
    assert "beyond its 1 usable CPU core (gloo)" in oversubscription([2], 1, "cpu", 1)


def test_default_world_sizes_are_powers_of_two_up_to_the_ranks_of_every_node():
    assert default_world_sizes("cuda", 8) == [1, 2, 4, 8]
    assert default_world_sizes("cuda", 6) == [1, 2, 4, 6]
    assert default_world_sizes("cuda", 1) == [1]
    assert default_world_sizes("cpu", 0) == [1, 2]
    assert default_world_sizes("cuda", 4, nnodes=2) == [2, 4, 8]  # W=1 cannot span two nodes
    assert default_world_sizes("cuda", 8, nnodes=3) == [3, 6, 12, 24]  # every size splits over the nodes
    assert default_world_sizes("cpu", 0, nnodes=2) == [2, 4]


def test_ranks_split_evenly_over_nodes_or_the_error_says_how():
    assert ranks_per_node(8, 2) == 4
    with pytest.raises(ValueError, match="world size 3 does not split evenly over 2 nodes"):
        ranks_per_node(3, 2)


def test_cpu_ranks_share_the_cores():
    assert threads_per_rank(1, cores=2) == 2
    assert threads_per_rank(2, cores=2) == 1
    assert threads_per_rank(4, cores=2) == 1


@pytest.mark.parametrize(("text", "expected"),
                         [("10.0.0.1:29500", ("10.0.0.1", 29500)), ("[::1]:29400", ("::1", 29400)),
                                                ("node0.cluster:1", ("node0.cluster", 1))])
def test_endpoints_parse(text, expected):
    assert parse_endpoint(text, "--rdzv-endpoint") == expected


@pytest.mark.parametrize("text", ["10.0.0.1", ":29500", "host:0", "host:65535", "host:port"])
def test_bad_endpoints_name_the_option_and_the_value(text):
    with pytest.raises(ValueError, match=f"--rdzv-endpoint={text!r}"):
        parse_endpoint(text, "--rdzv-endpoint")


def test_a_topology_checks_itself_and_puts_jobs_on_the_next_port():
    with pytest.raises(ValueError, match="--nnodes 2 needs --rdzv-endpoint"):
        Topology(2, 0, None)
    with pytest.raises(ValueError, match=r"--node-rank must be in 0\.\.1"):
        Topology(2, 2, "h:1")
    two = Topology(2, 1, "10.0.0.1:29500")
    assert two.multi_node and not two.writes_records and two.job_endpoint() == "10.0.0.1:29501"
    assert Topology().job_endpoint() == "127.0.0.1:0" and Topology().writes_records


def test_a_job_spec_round_trips_and_checks_its_world():
    spec = JobSpec("scaling", "cpu", 4, 2, 2, "id", "/tmp/x", models=["m", "m"])
    assert spec.backend == "gloo"
    assert JobSpec("scaling", "cuda", 1, 1, 1, "id", "/tmp/x", devices=["cuda:0"]).backend == "nccl"
    with pytest.raises(ValueError, match="2 ranks on this node need as many GPUs"):
        JobSpec("scaling", "cuda", 2, 1, 2, "id", "/tmp/x", devices=["cuda:0"])
    assert JobSpec("colocated", "cuda", 2, 1, 2, "id", "/tmp/x").backend == "gloo"  # they only meet at a barrier
    with pytest.raises(ValueError, match="world size 3 != 2 nodes x 2 ranks per node"):
        JobSpec("scaling", "cpu", 3, 2, 2, "id", "/tmp/x")
    with pytest.raises(ValueError, match="unknown job kind 'train'"):
        JobSpec("train", "cpu", 1, 1, 1, "id", "/tmp/x")


def test_a_job_spec_file_round_trips(tmp_path):
    spec = JobSpec("allreduce", "cpu", 2, 1, 2, "id", str(tmp_path), message_sizes=[1024, 4096], plan={"rounds": 5})
    assert JobSpec.read(spec.write()) == spec
    (tmp_path / "bad.json").write_text('{"kind": "scaling", "colour": 1}')
    with pytest.raises(ValueError, match=r"bad\.json: not a hwregress job spec"):
        JobSpec.read(tmp_path / "bad.json")


# -- figures -----------------------------------------------------------------------------------------
def _rank(rank, seconds, steps=2, work=8, **extra):
    return {"rank": rank, "round_seconds": seconds, "steps_per_round": steps, "work_per_step": work, **extra}


def test_global_throughput_waits_for_the_slowest_rank_each_round():
    ranks = [_rank(0, [1.0, 2.0, 1.0]), _rank(1, [2.0, 1.0, 1.0])]
    # 2 ranks x 8 samples x 2 steps = 32 samples per round, over the slower rank's seconds
    assert figures.global_throughput_samples(ranks) == [16.0, 16.0, 32.0]


def test_ranks_that_timed_different_windows_are_a_defect():
    with pytest.raises(ValueError, match="different windows"):
        figures.global_throughput_samples([_rank(0, [1.0, 1.0]), _rank(1, [1.0])])
    with pytest.raises(ValueError, match="without ranks"):
        figures.global_throughput_samples([])


def test_efficiency_is_throughput_over_world_times_single_rank():
    assert figures.efficiency(180.0, 2, 100.0) == pytest.approx(0.9)
    assert figures.efficiency(100.0, 1, 100.0) == 1.0
    with pytest.raises(ValueError, match="T\\(1\\) > 0"):
        figures.efficiency(1.0, 2, 0.0)


def test_scaling_details_average_the_communication_share_and_list_every_rank():
    ranks = [_rank(0, [0.2, 0.2], comm_share=0.1, comm_ms_per_step=10.0, buckets=3, allreduce_bytes_per_step=400,
                   node_rank=0, host="a", device="cpu", peak_memory_bytes=5, threads=1),
             _rank(1, [0.4, 0.4], comm_share=0.3, comm_ms_per_step=30.0, buckets=3, allreduce_bytes_per_step=400,
                   node_rank=1, host="b", device="cpu", peak_memory_bytes=7, threads=1)]
    details = figures.scaling_details(ranks, nodes=2, backend="gloo")
    assert details["world_size"] == 2 and details["nodes"] == 2 and details["ranks_per_node"] == 1
    assert details["comm_share"] == pytest.approx(0.2) and details["comm_ms_per_step"] == pytest.approx(20.0)
    assert details["buckets"] == 3 and details["allreduce_bytes_per_step"] == 400
    assert [r["host"] for r in details["ranks"]] == ["a", "b"]
    assert details["ranks"][1]["median_step_ms"] == pytest.approx(200.0)


def test_interference_is_each_process_beside_the_others_over_alone():
    solo = {"m": _rank(0, [1.0, 1.0, 1.0], steps=1, work=10, model="m", peak_memory_bytes=100)}
    together = [_rank(0, [2.0, 2.0, 2.0], steps=1, work=10, model="m", peak_memory_bytes=110),
                _rank(1, [1.25, 1.25, 1.25], steps=1, work=10, model="m", peak_memory_bytes=120)]
    lines = figures.colocation_members(together, solo)
    assert [line["interference"] for line in lines] == [pytest.approx(0.5), pytest.approx(0.8)]
    assert lines[0]["solo_throughput"] == 10.0 and lines[1]["colocated_throughput"] == 8.0
    assert lines[1]["solo_peak_memory_bytes"] == 100 and lines[1]["peak_memory_bytes"] == 120
    assert figures.aggregate_samples(together) == [13.0, 13.0, 13.0]


# -- communication share, bus bandwidth ----------------------------------------------------------------
def _event(name, start, end):
    return SimpleNamespace(name=name, time_range=SimpleNamespace(start=start, end=end))


def test_the_communication_share_counts_overlapping_collectives_once():
    events = [_event("ProfilerStep#1", 0, 100), _event("aten::conv2d", 0, 60),
              _event("gloo:all_reduce", 40, 70), _event("gloo:all_reduce", 50, 90), _event("c10d::allreduce_", 40, 41)]
    share = communication_share(events, "cpu")
    assert share == {"comm_share": pytest.approx(0.5), "comm_us": 50, "window_us": 100}


def test_on_cuda_only_nccl_kernels_are_communication():
    assert is_communication("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "cuda")
    assert is_communication("ncclKernel_AllReduce_RING_LL_Sum_float", "cuda")
    assert not is_communication("nccl:all_reduce", "cuda")  # the CPU-side launch, not the transfer
    assert not is_communication("gloo:all_reduce", "cuda")
    assert is_communication("gloo:all_reduce", "cpu") and not is_communication("aten::mm", "cpu")
    with pytest.raises(ValueError, match="no events"):
        communication_share([], "cpu")


@given(st.lists(st.tuples(st.floats(0, 1e6), st.floats(0, 1e4)), max_size=30))
def test_the_union_of_intervals_lies_between_the_longest_and_the_sum(pairs):
    intervals = [(start, start + length) for start, length in pairs]
    total = union_us(intervals)
    lengths = [end - start for start, end in intervals]
    assert max(lengths, default=0.0) <= total + 1e-6
    assert total <= sum(lengths) + 1e-6
    assert union_us(list(reversed(intervals))) == pytest.approx(total)


def test_bus_bandwidth_follows_nccl_tests():
    algbw, busbw = bus_bandwidth_gbps(1e9, 0.01, 8)
    assert algbw == pytest.approx(100.0) and busbw == pytest.approx(175.0)  # x 2 (8 - 1) / 8
    assert bus_bandwidth_gbps(1e9, 1.0, 2) == (pytest.approx(1.0), pytest.approx(1.0))
    with pytest.raises(ValueError, match="positive time"):
        bus_bandwidth_gbps(1e9, 0.0, 2)
    assert message_sizes("cuda")[-1] == 2**30 and message_sizes("cpu")[-1] == 16 * 2**20


# -- watchdog and failure descriptions -----------------------------------------------------------------
def test_a_rank_is_stalled_when_its_heartbeat_is_older_than_the_timeout_and_it_has_not_finished():
    now = 1000.0
    statuses = {0: {"phase": "timed round 2", "time": now - 5}, 1: {"phase": "timed round 2", "time": now - 31},
                2: {"phase": "done", "time": now - 100}, 3: {"phase": "oom", "time": now - 100}}
    assert stalled_ranks(statuses, now, 30) == [1]


def test_statuses_are_written_and_read_back_per_rank(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "1")
    write_status(tmp_path, 3, "timed round 1 of 10", device="cpu")
    write_status(tmp_path, 3, "timed round 2 of 10", device="cpu")
    (tmp_path / "rank-4.status.json").write_text("{torn")
    (status,) = read_statuses(tmp_path).values()
    assert status["rank"] == 3 and status["local_rank"] == 1 and status["phase"] == "timed round 2 of 10"
    assert abs(status["time"] - time.time()) < 60


def test_the_killed_rank_is_named_first_with_its_signal_and_last_lines(tmp_path):
    spec = JobSpec("scaling", "cpu", 2, 1, 2, "run", str(tmp_path))
    log = tmp_path / "logs" / "run_x" / "attempt_0" / "1"
    log.mkdir(parents=True)
    (log / "stderr.log").write_text("loading\nstep 7 ok\n")
    failures = [{"rank": 0, "local_rank": 0, "exitcode": 1, "signal": None, "message": "peer closed"},
                {"rank": 1, "local_rank": 1, "exitcode": -9, "signal": "SIGKILL", "message": ""}]
    statuses = {0: {"phase": "failed", "node_rank": 0, "error": "RuntimeError: Connection closed by peer"},
                1: {"phase": "timed round 2 of 10", "node_rank": 0}}
    text = describe_failures(spec, failures, statuses)
    first, _ = text.split("\nrank 0", 1)
    assert first.startswith("rank 1 (node 0, local rank 1) exited with exit code -9 (SIGKILL) during "
                            "'timed round 2 of 10'")
    assert "step 7 ok" in first
    assert "Connection closed by peer" in text


# -- the efficiency verdict ----------------------------------------------------------------------------
def _measured(efficiency, reference=()):
    return Measured("t", [100.0] * 6, "samples/s", True, {}, efficiency=efficiency, reference_samples=reference)


BASELINE = {"samples": [100.0] * 6, "history": [100.0, 100.0, 100.0], "efficiency": 0.9, "environment": {}}


def test_a_drop_in_scaling_efficiency_is_a_regression_even_at_unchanged_throughput():
    judgement = judge(_measured(0.6), BASELINE, Tolerances())
    assert judgement.verdict == Verdict.REGRESSION
    assert "efficiency 0.600 < baseline 0.900" in judgement.failures[0]
    assert judgement.figures.baseline_efficiency == 0.9


def test_efficiency_within_the_threshold_passes_and_a_noisy_reference_widens_it():
    assert judge(_measured(0.88), BASELINE, Tolerances()).verdict == Verdict.PASS
    noisy = [100.0, 80.0, 120.0, 90.0, 110.0, 100.0]
    assert judge(_measured(0.8, noisy), BASELINE, Tolerances()).verdict == Verdict.PASS
    assert judge(_measured(0.8), BASELINE, Tolerances()).verdict == Verdict.REGRESSION


def test_an_entry_judges_against_the_median_efficiency_of_its_sessions_and_learns_their_drift():
    from hwregress.judge.lifecycle import make_entry
    from hwregress.store.results import TestRecord

    entry = None
    for efficiency in (0.66, 0.61, 0.70):
        record = TestRecord("t", family="scaling", samples=[80.0] * 6, efficiency=efficiency)
        entry = make_entry(record, entry)
    assert entry["efficiency_history"] == [0.66, 0.61, 0.70] and entry["efficiency"] == 0.66
    steady = {**BASELINE, "efficiency": 0.66, "efficiency_history": [0.66, 0.66, 0.66]}
    drifting = {**BASELINE, "efficiency": 0.66, "efficiency_history": [0.66, 0.56, 0.76, 0.60, 0.70]}
    assert judge(_measured(0.56), steady, Tolerances()).verdict == Verdict.REGRESSION
    assert judge(_measured(0.56), drifting, Tolerances()).verdict == Verdict.PASS  # within what sessions moved
    assert judge(_measured(0.33), drifting, Tolerances()).verdict == Verdict.REGRESSION  # halved: never green


def test_a_step_that_spends_more_of_its_time_in_collectives_is_named_as_the_cause():
    from hwregress.judge.diagnosis import Evidence, diagnose

    slower = diagnose(Evidence(comm_share=0.23, baseline_comm_share=0.13))
    assert slower == ["communication took 23% of the step, 13% at the baseline: the collectives or the interconnect "
                      "under them slowed"]
    assert diagnose(Evidence(comm_share=0.15, baseline_comm_share=0.13)) == []  # within the session-to-session move
    assert diagnose(Evidence(comm_share=0.23)) == []  # no baseline figure: nothing to compare


def test_the_energy_per_sample_counts_each_device_once():
    from hwregress.plugin.families.jobs import rank_telemetry

    def rank(device, energy):
        return {"device": device, "telemetry": {"energy_j": energy}, "health": {"other_cpu_fraction": 0.0},
                "work_per_step": 8, "steps_per_round": 2, "round_seconds": [1.0] * 5, "work_per_sample": 1}

    data_parallel = rank_telemetry([rank("cuda:0", 100.0), rank("cuda:1", 60.0)])
    assert data_parallel.energy_j_per_sample == pytest.approx(160.0 / 160)  # 2 ranks x 8 x 2 steps x 5 rounds
    colocated = rank_telemetry([rank("cuda:0", 100.0), rank("cuda:0", 100.0)])  # one device, read by both
    assert colocated.energy_j_per_sample == pytest.approx(100.0 / 160)
    unknown = rank_telemetry([rank("cpu", None), rank("cpu", None)])
    assert unknown.energy_j_per_sample is None and unknown.health == {"other_cpu_fraction": 0.0}


def test_a_cpu_job_whose_rank_was_noisy_is_not_stable():
    # the window facts were written after the energy figures, which a CPU job (no energy counter) returned before:
    # a CPU scaling or co-located record was then judged as stable however noisy its ranks were
    from hwregress.plugin.families.jobs import rank_figures

    def rank(stable, extended):
        return {"device": "cpu", "telemetry": {}, "health": {}, "stable": stable, "extended_rounds": extended,
                "warmup_steps": 3, "steps_per_round": 2, "peak_memory_bytes": 100}

    record = rank_figures([10.0, 11.0, 9.0], [rank(True, 0), rank(False, 4)])
    assert record.stable is False
    assert record.details["extended_rounds"] == 4 and record.details["warmup_steps"] == 3

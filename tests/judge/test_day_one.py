"""Day-one verdicts: a test with no baseline of its own, on a hardware key whose other hosts the fleet store knows, is
judged against that fleet; the host itself is never part of its own fleet; a store that cannot be read leaves it
``new`` and says why. End to end: a fleet built from a real session of this machine's suite, then a new host."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from support.judging import conclude_onto
from support.store_results import push_as_other_hosts, results_document

from hwregress.judge.day_one import FleetJudge
from hwregress.judge.session import BenchSession, Policy
from hwregress.judge.tolerances import Tolerances, memory_limits
from hwregress.store.baselines import BaselineStore
from hwregress.store.database import open_store
from hwregress.store.fleet_queries import latest_medians
from hwregress.store.results import TestRecord
from hwregress.store.store_errors import StoreUnavailable
from hwregress.store.verdicts import Verdict

TEST = "bench_tests/test_models.py::test_throughput[cpu-resnet18-train-bs0]"  # results_document's first test
FLEET_SPEEDS = {"host-a": 0.99, "host-b": 1.0, "host-c": 1.01, "host-d": 1.02}


def _fleet_store(tmp_path, speeds=FLEET_SPEEDS):
    """A real SQLite store with one session per host, each host's throughput ``speed`` x 10 samples/s."""
    store = open_store(f"sqlite:///{tmp_path / 'fleet.sqlite'}")
    for index, (host, speed) in enumerate(speeds.items()):
        document = results_document(f"{host}-1-20261127T0{index}2215Z", tests=1, hostname=host)
        record = document["records"][0]
        record["throughput"], record["samples"] = 10.0 * speed, [10.0 * speed] * 3
        store.push(document)
    return store


def _record(throughput, hostname_gpu=None):
    return TestRecord(TEST, family="throughput", device="cpu", hardware_key="amd-epyc-f26m2-2t", model="resnet18",
                      mode="train", batch_size=1, dtype="fp32", unit="samples/s", throughput=throughput,
                      samples=[throughput] * 5, identity={"gpu_uuid": hostname_gpu} if hostname_gpu else {})


def test_the_store_gives_each_hosts_latest_median_per_test(tmp_path):
    store = _fleet_store(tmp_path)
    later = results_document("host-a-2-20261128T012215Z", tests=1, hostname="host-a",
                             started="2026-11-28T01:22:15+00:00")
    later["records"][0]["throughput"], later["records"][0]["samples"] = 7.0, [7.0] * 3
    store.push(later)
    medians = latest_medians(store, "amd-epyc-f26m2-2t")[TEST]
    assert medians == pytest.approx({"host-a": 7.0, "host-b": 10.0, "host-c": 10.1, "host-d": 10.2})


def test_a_new_host_is_judged_against_its_fleet_without_itself(tmp_path):
    store = _fleet_store(tmp_path)
    judge = FleetJudge(lambda key: latest_medians(store, key), {"machine_id": "host-d", "hostname": "new"})
    slow = judge.judge(_record(8.0))
    assert slow.verdict == Verdict.REGRESSION and slow.n_hosts == 3  # host-d is this host: not in its fleet
    assert "against a fleet of 3 hosts" in slow.message
    assert judge.judge(_record(10.05)).verdict == Verdict.PASS
    gpu_host = FleetJudge(lambda key: {TEST: {"GPU-1,GPU-2": 5.0, "b": 10.0, "c": 10.0, "d": 10.0}}, {})
    assert gpu_host.judge(_record(5.0, hostname_gpu="GPU-2")).n_hosts == 3  # one GPU of that host's set: itself


def test_a_fleet_too_small_or_unreadable_gives_no_verdict_and_says_why():
    small = FleetJudge(lambda key: {TEST: {"a": 10.0, "b": 10.0}}, {})
    assert small.judge(_record(5.0)).verdict == Verdict.NEW
    assert FleetJudge(lambda key: {}, {}).judge(_record(5.0)) is None

    def unreadable(key):
        raise StoreUnavailable("sqlite:///x", "the file cannot be opened", "fix it")

    said = FleetJudge(unreadable, {}).judge(_record(5.0))
    assert said.startswith("no day-one verdict: the fleet store could not be read (sqlite:///x: ")


def test_the_session_gives_a_test_without_an_entry_its_fleet_verdict(tmp_path):
    store = _fleet_store(tmp_path)
    fleet = FleetJudge(lambda key: latest_medians(store, key), {"machine_id": "new-host"})
    session = BenchSession(BaselineStore(tmp_path / "baselines"), Policy(Tolerances()), fleet)
    slow = _record(6.0)
    failures = conclude_onto(session, slow, "throughput/resnet18/train/bs1/fp32")
    assert slow.verdict == Verdict.REGRESSION and slow.ratio == pytest.approx(6.0 / 10.05)
    assert slow.baseline_throughput == pytest.approx(10.05)
    assert failures == [slow.message.split(" | ")[0]] and "day one, no baseline of its own" in failures[0]
    assert "record one with --update-baselines" not in slow.message  # judged after all: not "no baseline"
    healthy = _record(10.0)
    assert conclude_onto(session, healthy, "throughput/resnet18/train/bs1/fp32") == []
    assert healthy.verdict == Verdict.PASS
    alone = BenchSession(BaselineStore(tmp_path / "baselines"), Policy(Tolerances()))
    lonely = _record(6.0)
    conclude_onto(alone, lonely, "throughput/resnet18/train/bs1/fp32")
    assert lonely.verdict == Verdict.NEW  # without a store: new, as before


@pytest.mark.slow
def test_a_new_host_of_a_known_key_gets_day_one_verdicts_end_to_end(hw_project):
    """A real session of the suite, its results pushed four times as four other hosts (0.98-1.03 of it), then this
    machine, with no baselines of its own, judged against them: a known 2x slowdown is a regression "against a fleet
    of 4 hosts", an unchanged session passes."""
    store_url = f"sqlite:///{hw_project.path / 'fleet.sqlite'}"
    hw_project.run(f"--store={store_url}", "--update-baselines", "--baseline-dir=recorded").assert_outcomes(passed=2)
    real = hw_project.results
    push_as_other_hosts(open_store(f"sqlite:///{hw_project.path / 'others.sqlite'}"), real)
    (hw_project.path / "none").mkdir()
    others = f"--store=sqlite:///{hw_project.path / 'others.sqlite'}"
    slow = hw_project.run(others, "--baseline-dir=none", env={"HWREGRESS_SELFTEST_SLOWDOWN": "2"})
    slow.assert_outcomes(failed=2)
    for record in hw_project.results["records"]:
        assert record["verdict"] == "regression" and record["ratio"] == pytest.approx(0.5, rel=0.1)
        assert "day one, no baseline of its own" in record["message"] and "against a fleet of 4 hosts" in record[
            "message"]
    unchanged = hw_project.run(others, "--baseline-dir=none")
    unchanged.assert_outcomes(passed=2)
    assert {r["verdict"] for r in hw_project.results["records"]} == {"pass"}


def _ceiling(model, dtype, unit, value):
    return TestRecord(f"bench_tests/test_ceilings.py::test_ceiling[cpu-{model}-{dtype}]", family="ceiling",
                      measures_roof=True, device="cpu", hardware_key="amd-epyc-f26m2-2t", model=model, mode="roof",
                      dtype=dtype, unit=unit, throughput=value)


def _model(model, value):
    return TestRecord(f"bench_tests/test_throughput.py::test_throughput[cpu-{model}-infer-bs8-fp32]",
                      family="throughput", device="cpu", hardware_key="amd-epyc-f26m2-2t", model=model,
                      mode="infer", batch_size=8, dtype="fp32", unit="samples/s", throughput=value)


def _fleet_of(records_by_host):
    """test id -> host -> throughput, as the store's latest medians give it."""
    fleet: dict[str, dict[str, float]] = {}
    for host, records in records_by_host.items():
        for record in records:
            fleet.setdefault(record.test_id, {})[host] = record.throughput
    return fleet


def test_a_host_whose_gemm_and_copy_fall_below_its_fleet_is_defective_with_its_evidence():
    from hwregress.plugin.host_check import alert_findings, host_check, terminal_lines
    from hwregress.report.alerts import defective_host_alert

    def host(speed, copy_speed):
        return [_ceiling("gemm", "fp32", "TFLOP/s", 0.2 * speed), _ceiling("copy", "fp32", "GB/s", 40 * copy_speed),
                _model("resnet18", 80 * speed), _model("alexnet", 150 * speed)]

    fleet = _fleet_of({f"h{i}": host(1 + 0.01 * i, 1 - 0.01 * i) for i in range(5)})
    judge = FleetJudge(lambda key: fleet, {"machine_id": "new", "hostname": "vm"})
    [check] = host_check(judge, host(0.85, 0.80))
    assert check["defective"] and check["host"] == "new" and check["hardware_key"] == "amd-epyc-f26m2-2t"
    assert check["components"] == ["GEMM", "device memory"] and check["models"] == ["alexnet", "resnet18"]
    assert {e["figure"] for e in check["evidence"]} >= {"gemm_fp32_tflops", "copy_gbs"}
    assert terminal_lines([check])[0].startswith("defective host new (amd-epyc-f26m2-2t): ")
    [finding] = alert_findings([check], "s-1", "2026-11-27T10:00:00+00:00")
    assert defective_host_alert(finding).kind == "defective-host"
    [healthy] = host_check(judge, host(1.0, 1.0))
    assert not healthy["defective"] and terminal_lines([healthy]) == []
    [one_part] = host_check(judge, [_ceiling("gemm", "fp32", "TFLOP/s", 0.1), *host(1.0, 1.0)[1:]])
    assert not one_part["defective"] and one_part["components"] == ["GEMM"]  # GEMM alone: one component
    assert host_check(None, host(0.5, 0.5)) == []


def test_a_key_no_other_host_has_measured_gets_a_provisional_expectation_from_the_nearest_known_key():
    gemm = "bench_tests/test_ceilings.py::test_ceiling[cuda:0-copy-fp32]"
    fleets = {"nvidia-h100-80gb-hbm3": {gemm: {"a": 3000.0, "b": 3010.0, "c": 3020.0}},
              "nvidia-h200": {gemm: {"this-host": 1.0}}}  # the new key's only sessions are this host's own
    judge = FleetJudge(lambda key: fleets.get(key, {}), {"machine_id": "this-host"}, lambda: sorted(fleets))

    def copy_on_h200(value):
        return TestRecord(gemm, family="ceiling", measures_roof=True, device="cuda:0", hardware_key="nvidia-h200",
                          model="copy", mode="roof", dtype="fp32", unit="GB/s", throughput=value)

    low = judge.judge(copy_on_h200(3000.0))  # an H200 copying no faster than an H100: far below 4.8 / 3.35
    assert low.startswith("below prediction: ") and "nvidia-h100-80gb-hbm3's 3010" in low
    assert judge.judge(copy_on_h200(4240.0)).startswith("within or above prediction: ")
    session = BenchSession(BaselineStore(Path("/nonexistent-baselines")), Policy(Tolerances()), judge)
    record = copy_on_h200(3000.0)
    conclude_onto(session, record, "ceiling/copy/roof/bs1/fp32")
    assert record.verdict == Verdict.NEW and "below prediction" in record.message
    no_keys = FleetJudge(lambda key: fleets.get(key, {}), {"machine_id": "this-host"})
    assert no_keys.judge(copy_on_h200(3000.0)) is None


def test_a_gpu_hosts_own_cpu_figures_are_not_its_fleet_and_a_cpu_test_keeps_the_cpus_tolerance(tmp_path):
    # the review of this change: a GPU host's store id is its GPUs' UUIDs, which its CPU tests do not carry
    fleet = {TEST: {"GPU-1,GPU-2": 6.0, "b": 10.0, "c": 10.0, "d": 10.1}}
    judge = FleetJudge(lambda key: fleet, {"machine_id": "m-1", "hostname": "gpu-box"}, None,
                       lambda: {"GPU-1,GPU-2": ["gpu-box", "m-1"], "b": ["b"], "c": ["c"], "d": ["d"]})
    assert judge.judge(_record(6.0)).n_hosts == 3  # its own 6.0 left out
    session = BenchSession(BaselineStore(tmp_path / "baselines"), Policy(Tolerances()), judge)
    within_cpu_tolerance = _record(9.0)  # 0.9 x the fleet: beyond 5%, within the CPU's 15%
    assert conclude_onto(session, within_cpu_tolerance, "throughput/resnet18/train/bs1/fp32") == []
    assert within_cpu_tolerance.verdict == Verdict.PASS and within_cpu_tolerance.threshold >= 0.15


def test_require_baselines_still_fails_a_test_the_fleet_passes(tmp_path):
    fleet = {TEST: {"b": 10.0, "c": 10.0, "d": 10.1}}
    policy = Policy(Tolerances(), require_baselines=True)
    session = BenchSession(BaselineStore(tmp_path / "baselines"), policy, FleetJudge(lambda key: fleet, {}))
    record = _record(10.0)
    failures = conclude_onto(session, record, "throughput/resnet18/train/bs1/fp32")
    assert record.verdict == Verdict.PASS and any("--require-baselines is set" in f for f in failures)


def test_a_hosts_earlier_checks_in_the_store_make_only_its_first_defective_session_alert(tmp_path):
    """The host's states per session, from each pushed session's meta.host_check: a session that checked nothing of
    the key says nothing, another host's checks are not this host's, this session is left out; a host that was
    defective, then healthy, then defective again alerts again."""
    from hwregress.plugin.host_check import alert_findings
    from hwregress.report.alerts import session_alerts
    from hwregress.store.fleet_queries import FleetReader

    key = "nvidia-h100"
    store = open_store(f"sqlite:///{tmp_path / 'fleet.sqlite'}")

    def push(name, day, hostname, checks, gpu_uuid=None):
        document = results_document(name, tests=1, hostname=hostname, started=f"2026-11-{day:02d}T01:00:00+00:00",
                                    gpu_uuid=gpu_uuid)
        document["meta"]["machine_id"] = "m-9" if gpu_uuid else None  # the GPU box's sessions record its machine id
        document["meta"]["host_check"] = [{"hardware_key": k, "host": hostname, "defective": bad, "message": ""}
                                          for k, bad in checks]
        store.push(document)

    push("gpu-box-1", 1, "gpu-box", [(key, True)], gpu_uuid="GPU-7")
    push("other-1", 2, "other", [(key, False)])  # another host's healthy check: not this host's
    push("gpu-box-2", 3, "gpu-box", [("amd-epyc", False)], gpu_uuid="GPU-7")  # checked another key only
    push("gpu-box-3", 4, "renamed", [], gpu_uuid="GPU-7")  # no check at all
    reader = FleetReader(store)
    judge = FleetJudge(reader.latest_medians, {"machine_id": "m-9", "hostname": "gpu-box"}, reader.hardware_keys,
                       reader.host_names, reader.sessions)
    records = [_record(5.0, hostname_gpu="GPU-7")]
    records[0].hardware_key = key
    assert judge.host_states(key, records, "gpu-box-4") == ["defective"]
    assert judge.host_states("amd-epyc", records, "gpu-box-4") == ["healthy"]
    assert judge.host_states(key, records, "gpu-box-1") == []  # this session itself is not its own past
    check = {"hardware_key": key, "host": "GPU-7", "defective": True, "message": "GPU-7 is defective",
             "evidence": [{"figure": TEST, "value": 5.0, "fleet_value": 10.0, "ratio": 0.5, "threshold": 0.05,
                           "n_hosts": 3}]}
    assert session_alerts([], [], "gpu-box-4", None, alert_findings([check], "gpu-box-4", "t", judge, records)) == []
    push("gpu-box-4", 5, "gpu-box", [(key, False)], gpu_uuid="GPU-7")
    recovered = FleetReader(store)  # a later process reads the store again
    again = FleetJudge(recovered.latest_medians, {"machine_id": "m-9", "hostname": "gpu-box"}, None,
                       recovered.host_names, recovered.sessions)
    assert again.host_states(key, records, "gpu-box-5") == ["defective", "healthy"]
    [alert] = session_alerts([], [], "gpu-box-5", None, alert_findings([check], "gpu-box-5", "t", again, records))
    assert alert.kind == "defective-host" and alert.host == "GPU-7"
    assert alert_findings([check], "gpu-box-5", "t")[0]["previous"] == []  # without a store: nothing known before


GIB = 2**30


def _memory_fleet_store(tmp_path, peaks):
    """A real SQLite store with one session per host, each host's peak memory of TEST as given (bytes)."""
    store = open_store(f"sqlite:///{tmp_path / 'fleet.sqlite'}")
    for index, (host, peak) in enumerate(peaks.items()):
        document = results_document(f"{host}-1-20261127T0{index}2215Z", tests=1, hostname=host)
        document["records"][0].update(throughput=10.0, samples=[10.0] * 3, peak_memory_bytes=round(peak))
        store.push(document)
    store.close()
    return f"sqlite:///{tmp_path / 'fleet.sqlite'}"


def test_a_new_hosts_peak_memory_is_held_under_its_fleets_ceiling_on_day_one(tmp_path):
    from hwregress.plugin.store_push import fleet_judge

    url = _memory_fleet_store(tmp_path, {"host-a": 1.00 * GIB, "host-b": 1.02 * GIB, "host-c": 1.01 * GIB,
                                         "host-d": 9 * GIB})  # host-d: a wild reading, dropped, never the base
    session = BenchSession(BaselineStore(tmp_path / "baselines"), Policy(Tolerances()), fleet_judge(url))
    doubled = _record(10.0)
    doubled.peak_memory_bytes = round(2.04 * GIB)
    failures = conclude_onto(session, doubled, "throughput/resnet18/train/bs1/fp32")
    assert doubled.verdict == Verdict.REGRESSION and len(failures) == 1  # the throughput passed; the memory did not
    assert failures[0].startswith(f"{TEST}: day one, no baseline of its own: peak memory 2089.0 MiB")
    assert "exceeds the fleet's ceiling 1369.6 MiB" in failures[0] and "a fleet of 3 hosts" in failures[0]
    assert doubled.baseline_peak_memory_bytes == round(1.02 * GIB) and doubled.memory_ratio == pytest.approx(2.0)
    as_its_fleet = _record(10.0)
    as_its_fleet.peak_memory_bytes = round(1.05 * GIB)
    assert conclude_onto(session, as_its_fleet, "throughput/resnet18/train/bs1/fp32") == []
    assert as_its_fleet.verdict == Verdict.PASS and "exceeds" not in as_its_fleet.message


def test_a_fleet_too_small_for_a_memory_ceiling_gives_none():
    from hwregress.judge.fleet import fleet_memory_ceiling

    assert fleet_memory_ceiling({"a": GIB, "b": GIB}, TEST, 0.10) is None
    assert fleet_memory_ceiling({"a": GIB, "b": GIB, "c": float("nan"), "d": 0.0}, TEST, 0.10) is None
    assert fleet_memory_ceiling({"a": GIB, "b": GIB, "c": GIB}, TEST, 0.10).ceiling_bytes == pytest.approx(1.1 * GIB)


@given(base=st.floats(1e8, 1e11), jitters=st.lists(st.floats(1.0, 1.05), min_size=3, max_size=12),
       wild=st.sampled_from([None, 0.1, 10.0]), exact=st.booleans())
@example(base=112704919.0, jitters=[1.0, 1.05, 1.05], wild=None, exact=False)  # one host exactly at the 5% floor
def test_a_doubled_peak_is_never_under_a_fleets_ceiling(base, jitters, wild, exact):
    from hwregress.judge.fleet import fleet_memory_ceiling

    peaks = {f"host-{i}": base * jitter for i, jitter in enumerate(jitters)}
    healthiest = max(peaks.values())
    if wild is not None:
        peaks["wild"] = base * wild
    ceiling = fleet_memory_ceiling(peaks, TEST, *memory_limits(exact, Tolerances()))
    assert ceiling is not None and ceiling.base_bytes == healthiest  # the wild host is dropped, never the base
    assert ceiling.exceeded_by(2 * healthiest) is not None and ceiling.exceeded_by(healthiest) is None


def test_two_machines_of_one_hostname_keep_their_own_alert_memory_and_fleets(tmp_path):
    """Containers share hostnames, never machine ids: a machine whose id is known is not the other machine of its
    hostname, whose defective check it must not inherit and whose figures are its fleet."""
    from hwregress.store.fleet_queries import FleetReader

    key = "amd-epyc-f26m2-2t"
    store = open_store(f"sqlite:///{tmp_path / 'fleet.sqlite'}")
    for index, (hostname, machine) in enumerate((("ci", "m-1"), ("b", "m-b"), ("c", "m-c"), ("d", "m-d"))):
        document = results_document(f"{hostname}-{index}-20261127T0{index}2215Z", tests=1, hostname=hostname)
        document["meta"].update(machine_id=machine, host_check=[{"hardware_key": key, "host": machine,
                                                                  "defective": hostname == "ci", "message": ""}])
        document["records"][0].update(throughput=10.0, samples=[10.0] * 3)
        store.push(document)
    reader = FleetReader(store)
    other = FleetJudge(reader.latest_medians, {"machine_id": "m-2", "hostname": "ci"}, reader.hardware_keys,
                       reader.host_names, reader.sessions)
    assert other.host_states(key, [_record(10.0)], "ci-9-20261128T012215Z") == []  # m-1's check is not m-2's
    assert other.judge(_record(10.0)).n_hosts == 4  # m-1 is in m-2's fleet
    same = FleetJudge(reader.latest_medians, {"machine_id": "m-1", "hostname": "ci"}, reader.hardware_keys,
                      reader.host_names, reader.sessions)
    assert same.host_states(key, [_record(10.0)], "ci-9-20261128T012215Z") == ["defective"]
    assert same.judge(_record(10.0)).n_hosts == 3
    unknown = FleetJudge(reader.latest_medians, {"machine_id": None, "hostname": "ci"}, reader.hardware_keys,
                         reader.host_names, reader.sessions)
    assert unknown.judge(_record(10.0)).n_hosts == 3  # without its id, a machine is known by its hostname

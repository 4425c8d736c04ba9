"""Synthetic sessions and histories for the report self-tests: results of 120 tests with known injected slowdowns,
and history folders of 30 sessions on 3 hardware keys with a known step, drift and improvement. Seeded: every call
with the same arguments gives the same figures."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from hwregress.store.figures import migrate_legacy_details
from hwregress.store.history import HistoryStore
from hwregress.store.history_row import HISTORY_ROW_VERSION
from hwregress.store.results import SessionResults, TestRecord, record_problem
from hwregress.store.sub_records import SUB_RECORDS
from hwregress.store.verdicts import Verdict

MODELS = ("resnet18", "mobilenet_v3_small", "vit_b_16", "bert", "gpt2")
MODES = ("train", "infer")
BATCH_SIZES = (1, 4, 16, 64)
DTYPES = ("fp32", "bf16", "fp16")
ROUNDS = 10
SAMPLE_NOISE = 0.01  # relative sd of one round's throughput
START = _dt.datetime(2026, 3, 1, 2, 0, tzinfo=_dt.timezone.utc)

# (hardware key, device, device name, identity): the history's three machines; the keys are long on purpose (legends)
MACHINES = (
    ("amd-epyc-7b13-f25m1-2t", "cpu", "AMD EPYC 7B13", {"cpu_brand": "AMD EPYC 7B13", "cpu_family": 25}),
    ("nvidia-h100-80gb-hbm3-sm90-132sm-700w", "cuda:0", "NVIDIA H100 80GB HBM3", {"gpu_name": "NVIDIA H100 80GB HBM3"}),
    ("nvidia-h200-141gb-hbm3e-sm90-132sm-700w", "cuda:0", "NVIDIA H200", {"gpu_name": "NVIDIA H200"}),
)
STEP_TEST, DRIFT_TEST, IMPROVED_TEST = 0, 1, 2  # the moved tests of a synthetic history (indexes into its tests)
STEP_AT = 20  # the first slow session of the step
HISTORY_SESSIONS = 30


def case(index: int) -> dict[str, Any]:
    """The identity of synthetic test ``index`` (model, mode, batch size, dtype), distinct for 0..119."""
    return {"model": MODELS[index % len(MODELS)], "mode": MODES[(index // len(MODELS)) % len(MODES)],
            "batch_size": BATCH_SIZES[(index // (len(MODELS) * len(MODES))) % len(BATCH_SIZES)],
            "dtype": DTYPES[(index // (len(MODELS) * len(MODES) * len(BATCH_SIZES))) % len(DTYPES)]}


def synthetic_test_id(index: int, device: str = "cpu") -> str:
    c = case(index)
    return (f"bench_tests/test_throughput.py::test_throughput"
            f"[{device}-{c['model']}-{c['mode']}-bs{c['batch_size']}-{c['dtype']}]")


def level_of(index: int) -> float:
    """The throughput level of test ``index`` (samples/s): different per test, 20 to ~4,000."""
    return 20.0 * (1.0 + index % 7) * (1.0 + index // 7 % 4) * (1.0 + index % 3)


def synthetic_session(tests: int = 120, seed: int = 0, slowdowns: Mapping[int, float] | None = None,
                      machine: int = 0, torch: str = "2.4.0", memory_growth: Mapping[int, float] | None = None,
                      power_w: float = 250.0) -> SessionResults:
    """One session of ``tests`` throughput tests on MACHINES[machine]: ROUNDS samples per test around its level with
    SAMPLE_NOISE, each test's throughput divided by ``slowdowns[index]`` (2.0: twice as slow) and its peak memory
    multiplied by ``memory_growth[index]``."""
    rng = np.random.default_rng(seed)
    key, device, name, identity = MACHINES[machine]
    records = []
    for index in range(tests):
        level = level_of(index) / (slowdowns or {}).get(index, 1.0)
        samples = [float(level * (1.0 + SAMPLE_NOISE * rng.standard_normal())) for _ in range(ROUNDS)]
        peak = int(2**30 * (1 + index % 5) * (memory_growth or {}).get(index, 1.0))
        records.append(TestRecord(
            synthetic_test_id(index, device), hardware_key=key, device=device, device_name=name, **case(index),
            throughput=float(np.median(samples)), samples=samples, rounds=ROUNDS, peak_memory_bytes=peak,
            latency_ms=1000.0 / level, verdict=Verdict.PASS, environment={"torch": torch, "python": "3.11.9"},
            energy_j_per_sample=power_w / level,
            telemetry={"metrics": {"power_w": {"mean": power_w}, "cpu_util_pct": {"mean": 95.0}}},
            identity=dict(identity), stable=True))
    meta = {"hostname": f"host-{machine}", "finished_at": f"2026-03-0{1 + seed % 9}T03:00:00+00:00", "python": "3.11.9",
            "hardware": [{"device": device, "name": name, "hardware_key": key, "environment": {"torch": torch},
                          "facts": {}, "total_memory_bytes": 2**36}]}
    return SessionResults(meta, records)


def write_session(path: Path, session: SessionResults) -> Path:
    import json

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(session.to_json()), encoding="utf-8")
    return path


def history_row(machine: int, test: int, session: int, median: float, baseline: float | None, verdict: str,
                torch: str) -> dict[str, Any]:
    """One valid history row (quartiles +-0.5% around ``median``)."""
    key, device, name, identity = MACHINES[machine]
    return {
        "v": HISTORY_ROW_VERSION, "session": f"{key}-{session:02d}",
        "time": (START + _dt.timedelta(days=session, minutes=machine)).isoformat(),
        "test_id": synthetic_test_id(test, device),
        "hardware_key": key, "device": device, "device_name": name, "family": "throughput", **case(test),
        "identity": identity, "hwregress_version": "0.1.0", "environment": {"torch": torch, "python": "3.11.9"},
        "packages": "0123456789abcdef", "unit": "samples/s", "median": median, "q1": median * 0.995,
        "q3": median * 1.005, "iqr": median * 0.01, "n": ROUNDS, "verdict": verdict,
        "ratio": median / baseline if baseline else None, "threshold": 0.05, "baseline_median": baseline,
        "baseline_recorded_at": (START - _dt.timedelta(days=1)).isoformat(), "telemetry": {}, "health": {},
        "diagnosis": [],
    }


def synthetic_history(directory: Path, tests: int = 40, sessions: int = HISTORY_SESSIONS, noise: float = 0.004) -> Path:
    """A history folder: ``sessions`` sessions of ``tests`` tests on each of the three MACHINES. On the first machine
    test STEP_TEST drops 15% from session STEP_AT on (torch 2.4.0 -> 2.5.0, each slow session's own verdict a
    regression); on the second DRIFT_TEST loses 1% per session from session 15 on (every verdict pass); on the third
    IMPROVED_TEST gains 20% from session STEP_AT on; everything else holds its level with ``noise``."""
    store = HistoryStore(directory)
    rng = np.random.default_rng(7)
    for machine in range(len(MACHINES)):
        rows = []
        for test in range(tests):
            base = level_of(test) * (1.0 + machine)
            for session in range(sessions):
                factor, verdict, torch = 1.0, "pass", "2.4.0"
                if machine == 0 and test == STEP_TEST and session >= STEP_AT:
                    factor, verdict, torch = 0.85, "regression", "2.5.0"
                if machine == 1 and test == DRIFT_TEST and session >= 15:
                    factor = 0.99 ** (session - 14)
                if machine == 2 and test == IMPROVED_TEST and session >= STEP_AT:
                    factor, verdict = 1.2, "improvement"
                median = base * factor * (1.0 + noise * float(rng.standard_normal()))
                rows.append(history_row(machine, test, session, median, base, verdict, torch))
        store.append(MACHINES[machine][0], rows)
    return directory


JUDGED_VERDICTS = {3: "regression", 17: "regression", 42: "regression", 5: "unstable", 64: "invalid", 99: "improvement"}
NEW_TESTS = (7, 88)  # no baseline: not on the "what regressed" chart


def judged_session(tests: int = 120, seed: int = 0) -> SessionResults:
    """:func:`synthetic_session` judged against a baseline at each test's level: ratios around 1 with 5% thresholds,
    the verdicts of JUDGED_VERDICTS (the regressions 20 to 40% slow, each with a two-line diagnosis, the invalid one
    50x fast, the improvement 30% fast), NEW_TESTS without a baseline, every other test a pass."""
    slowdowns = {index: 1.2 + 0.1 * n
                 for n, index in enumerate(i for i, v in JUDGED_VERDICTS.items() if v == "regression")}
    slowdowns.update({64: 1 / 50, 99: 1 / 1.3})
    session = synthetic_session(tests, seed, slowdowns=slowdowns)
    for index, record in enumerate(session.records):
        if index in NEW_TESTS:
            record.verdict = Verdict.NEW
            continue
        record.baseline_throughput = level_of(index)
        record.ratio = record.throughput / record.baseline_throughput
        record.threshold = 0.05
        record.verdict = Verdict(JUDGED_VERDICTS.get(index, "pass"))
        if record.verdict == Verdict.REGRESSION:
            record.diagnosis = [f"CPU contention during test {index}", "the machine itself is slower: gemm 0.1 vs 0.3"]
    return session


def as_loaded(record: TestRecord) -> TestRecord:
    """``record`` as a results file of schema version 2 reads back: its ``details["scaling"]``, ``["spark"]``, ...
    moved into the typed sub-records, and a sub-record field whose value has the wrong type left out (the loader
    refuses such a file; a view only ever sees typed sub-records). Other fields are kept as they are."""
    data = migrate_legacy_details(record.to_json())
    for name in SUB_RECORDS:
        if isinstance(data.get(name), dict):
            data[name] = {key: value for key, value in data[name].items()
                          if record_problem({name: {key: value}}) is None}
        elif data.get(name) is not None:
            data[name] = None
    return TestRecord.from_json(data)


# --- A/B sessions: B against A, pairs of windows (hwregress.store.figures.ABFigures) --------------------------

NIGHTLY = "/opt/nightly/bin/python"
AB_META = {"stacks": {"A": {"python": "/usr/bin/python3", "env": {}},
                      "B": {"python": NIGHTLY, "env": {"OMP_NUM_THREADS": "1"}}},
           "threshold": 0.05, "looks": [10, 20, 40], "seed": 7}
AB_DIFFERENCE = ["torch 2.13.0 -> 2.11.0", "env OMP_NUM_THREADS: unset -> 1"]


def ab_test_id(model: str = "resnet18", batch: int = 32) -> str:
    return f"bench_tests/test_throughput.py::test_throughput[cpu-{model}-train-bs{batch}-fp32]"


def ab_pairs(count: int = 20, slower: float = 0.9) -> list[dict[str, Any]]:
    """``count`` pairs as results.json holds them, in balanced blocks (AB BA, BA AB, ...), on a host that speeds up
    1 samples/s a pair from 100; B ``slower`` times A."""
    orders = [("AB", "BA") if block % 2 == 0 else ("BA", "AB") for block in range(count // 2 + 1)]
    return [{"index": i, "order": orders[i // 2][i % 2], "a": 100.0 + i, "b": slower * (100.0 + i), "a_error": None,
             "b_error": None, "dropped": None} for i in range(count)]


def ab_record(verdict: str = "regression", ratio: float | None = 0.9, low: float | None = 0.88,
              high: float | None = 0.92, pair_list: list[dict[str, Any]] | None = None, model: str = "resnet18",
              message: str = "B/A 0.900 [0.880, 0.920] on 20 of 20 pairs at alpha 0.005: B slower beyond -5%",
              **ab: Any) -> TestRecord:
    """An A/B test's record as results.json reads back: B/A ``ratio`` in [``low``, ``high``] at α 0.005, a 5%
    threshold, the pairs (:func:`ab_pairs` by default), both stacks of :data:`AB_META`; ``ab`` overrides figures."""
    found = ab_pairs() if pair_list is None else pair_list
    figures = {"ratio": ratio, "ratio_low": low, "ratio_high": high, "alpha": 0.005, "threshold": 0.05,
               "pairs_kept": sum(p["dropped"] is None for p in found), "looks_planned": [10, 20, 40],
               "looks_taken": [10, 20], "seed": 7, "a_throughput": 100.0, "b_throughput": 90.0, "pairs": found,
               "stacks": AB_META["stacks"], "difference": AB_DIFFERENCE, "memory": "both", **ab}
    return TestRecord.from_json({
        "test_id": ab_test_id(model), "family": "throughput", "device": "cpu", "model": model, "mode": "train",
        "batch_size": 32, "dtype": "fp32", "unit": "samples/s", "verdict": verdict, "ratio": ratio,
        "threshold": 0.95, "throughput": 90.0, "message": message,
        "reach": {"figure": "throughput", "mds": 0.061, "power": 0.9, "alpha": 0.005, "threshold": 0.05},
        "ab": figures})


def ab_session() -> SessionResults:
    """An A/B session of every kind of A/B test beside a plain one: a regression whose pair 3 lost A's window and
    pair 6 was dropped for balance, a pass, an improvement, one undecided on 2 pairs, one whose stack B failed, and a
    long model name."""
    dropped = ab_pairs()
    dropped[3].update(a=None, a_error="RuntimeError: worker A died", dropped="A's window failed")
    dropped[6].update(dropped="balance: a surplus BA pair, the latest first")
    records = [
        ab_record(pair_list=dropped),
        ab_record("pass", 0.995, 0.975, 1.012, ab_pairs(20, 0.995), model="mobilenet_v3_small"),
        ab_record("improvement", 1.12, 1.09, 1.15, ab_pairs(10, 1.12), model="vit_b_16"),
        ab_record("unstable", None, None, None, ab_pairs(2), model="gpt2",
                  message="B against A undecided: 2 of 2 pairs kept, too few to judge"),
        ab_record("failed", None, None, None, [], model="bert",
                  message=f"stack B: {NIGHTLY} cannot import torch (No module named 'torch'); install torch there"),
        ab_record("pass", 1.01, 0.99, 1.03, ab_pairs(40, 1.01), model="a_model_with_a_rather_long_name_v2_large"),
        TestRecord(ab_test_id("vgg11"), family="throughput", device="cpu", model="vgg11", mode="train", batch_size=32,
                   dtype="fp32", unit="samples/s", throughput=50.0, baseline_throughput=50.0, ratio=1.0,
                   threshold=0.05, verdict="pass")]
    meta = {"hostname": "box", "started_at": START.isoformat(), "finished_at": START.isoformat(), "duration_s": 60.0,
            "args": ["-m", "cpu", "--ab-python", NIGHTLY], "hardware": [], "baseline_dir": "baselines", "ab": AB_META}
    return SessionResults(meta, records)

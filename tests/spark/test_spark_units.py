"""The spark family without a Spark session: Java detection and the skip reason, ``--spark-conf`` parsing, the batch
arithmetic (aligned rows, passes, agreement with plain torch), the stream's bookkeeping (atomic images, the resume
point, the producer, micro-batch times and rates, latency percentiles), the latency verdict and its baseline pool,
the family's matrix, its options and its settings. The real Spark runs are in test_spark_e2e.py."""

from __future__ import annotations

import datetime
import json
import os
import shutil
import sys
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from fakes import cuda as fake_cuda
from fakes import spark as fake_spark
from fakes.spark import FakeTaskContext
from hypothesis import given
from hypothesis import strategies as st
from support.project import REPO

from hwregress import workloads
from hwregress.judge.compare import Measured, judge
from hwregress.judge.lifecycle import HISTORY_LENGTH, make_entry
from hwregress.judge.session import _measured
from hwregress.judge.tolerances import Tolerances
from hwregress.measure import out_of_memory as hw_oom
from hwregress.measure.timing import TimingPlan
from hwregress.plugin import progress
from hwregress.plugin.families import registry
from hwregress.plugin.families.protocol import FamilyTraits
from hwregress.plugin.families.registry import cases
from hwregress.plugin.matrix import Selection, case_id
from hwregress.plugin.record import HwFail, HwSkip
from hwregress.spark import batch, engine, predictor, stream
from hwregress.spark import master as spark_master
from hwregress.spark.settings import DEFAULT_STREAM_SECONDS, SparkSettings
from hwregress.store.results import TestRecord
from hwregress.store.verdicts import Verdict


# -- engine: Java ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "major"), [
    ('openjdk version "17.0.15" 2025-04-15\nOpenJDK Runtime Environment (build 17.0.15+6-Debian-1deb12u1)\n'
     "OpenJDK 64-Bit Server VM (build 17.0.15+6-Debian-1deb12u1, mixed mode, sharing)\n", 17),
    ('openjdk version "21" 2023-09-19\nOpenJDK Runtime Environment (build 21+35-2513)\n', 21),
    ('java version "1.8.0_392"\nJava(TM) SE Runtime Environment (build 1.8.0_392-b08)\n', 8),
    ('openjdk version "25-ea" 2025-09-16\nOpenJDK Runtime Environment (build 25-ea+20-2380)\n', 25),
    ('Picked up JAVA_TOOL_OPTIONS: -Xmx2g\nopenjdk version "11.0.2" 2019-01-15\n', 11),
    ('openjdk version "17.0.8.1" 2023-08-24\nIBM Semeru Runtime Open Edition 17.0.8.1\n', 17),
])
def test_java_major_reads_the_version_of_real_java_version_output(text, major):
    assert engine.java_major(text) == major


@pytest.mark.parametrize("text", ["", "bash: java: command not found", "Error: could not find libjava.so",
                                  "openjdk version unknown", 'version "beta"'])
def test_java_major_is_none_without_a_version(text):
    assert engine.java_major(text) is None


def _fake_java(folder, version_line: str):
    """A ``java`` script in ``folder/bin`` that prints ``version_line`` to stderr, as ``java -version`` does."""
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True)
    java = bin_dir / "java"
    java.write_text(f"#!/bin/sh\necho '{version_line}' >&2\necho 'OpenJDK Runtime Environment' >&2\n")
    java.chmod(0o755)
    return java


def test_java_home_that_points_nowhere_is_named_with_the_install_command(tmp_path, monkeypatch):
    home = tmp_path / "no-jdk"
    monkeypatch.setenv("JAVA_HOME", str(home))
    assert engine.java_command() == (None, f"JAVA_HOME={home}")
    reason = engine.java_problem()
    assert f"JAVA_HOME={home} has no bin/java" in reason
    assert f"Java {engine.MIN_JAVA}+" in reason and engine.INSTALL_JAVA in reason


def test_java_home_wins_over_java_on_path(tmp_path, monkeypatch):
    on_path = _fake_java(tmp_path / "path-jdk", 'openjdk version "11.0.2" 2019-01-15')
    at_home = _fake_java(tmp_path / "home-jdk", 'openjdk version "17.0.15" 2025-04-15')
    monkeypatch.setenv("PATH", str(on_path.parent))
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "home-jdk"))
    assert engine.java_command() == (str(at_home), f"JAVA_HOME={tmp_path / 'home-jdk'}")
    assert engine.java_problem() is None


def test_no_java_on_path_and_no_java_home_is_named(tmp_path, monkeypatch):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder
    assert engine.java_command() == (None, "java on PATH")
    reason = engine.java_problem()
    assert "no java on PATH" in reason and "JAVA_HOME unset" in reason and engine.INSTALL_JAVA in reason


def test_a_java_older_than_17_is_named_with_its_version(tmp_path, monkeypatch):
    java = _fake_java(tmp_path / "jdk11", 'openjdk version "11.0.2" 2019-01-15')
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(java.parent))
    assert engine.java_command() == (str(java), "java on PATH")
    reason = engine.java_problem()
    assert f"{java} (java on PATH) is version 11" in reason and engine.INSTALL_JAVA in reason


def test_a_java_8_in_the_old_version_scheme_is_too_old(tmp_path, monkeypatch):
    _fake_java(tmp_path / "jdk8", 'java version "1.8.0_392"')
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk8"))
    assert "is version 8;" in engine.java_problem()


def test_a_java_without_a_readable_version_is_unknown(tmp_path, monkeypatch):
    _fake_java(tmp_path / "odd", "Error occurred during initialization of VM")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "odd"))
    assert "is version unknown" in engine.java_problem()


def test_a_java_that_cannot_start_is_named(tmp_path, monkeypatch):
    java = tmp_path / "broken" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/no/such/interpreter\n")
    java.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "broken"))
    reason = engine.java_problem()
    assert f"{java} (JAVA_HOME={tmp_path / 'broken'}) did not run" in reason and engine.INSTALL_JAVA in reason


@pytest.mark.parametrize("version", ['openjdk version "17.0.15" 2025-04-15', 'openjdk version "21" 2023-09-19',
                                     'openjdk version "25-ea" 2025-09-16'])
def test_a_java_17_or_newer_on_path_can_run_spark(tmp_path, monkeypatch, version):
    java = _fake_java(tmp_path / "jdk", version)
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(java.parent))
    assert engine.java_problem() is None


@pytest.mark.parametrize("missing", ["pyspark", "pyarrow", "pandas"])
def test_a_missing_pyspark_or_arrow_is_named_with_the_pip_command(monkeypatch, missing):
    monkeypatch.setitem(sys.modules, missing, None)  # import raises ImportError
    reason = engine.unavailable_reason()
    assert reason.startswith("PySpark is not installed") and missing in reason
    assert reason.endswith('pip install "hwregress[spark]"')


def test_pyspark_is_checked_before_java(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyspark", None)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    assert "JAVA_HOME" not in engine.unavailable_reason()


def test_start_session_raises_the_reason_without_starting_anything(tmp_path, monkeypatch):
    monkeypatch.setattr(engine, "pyspark_problem", lambda: None)  # as where the spark extra is installed
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    with pytest.raises(engine.SparkUnavailable, match="has no bin/java"):
        engine.start_session(engine.EngineConfig("local[1]"))


# -- engine: master, conf, description -------------------------------------------------------------------------------
def test_the_default_master_has_one_task_per_core_this_process_may_use(monkeypatch):
    expected = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert engine.host_cores() == expected
    monkeypatch.setattr(engine, "host_cores", lambda: 3)
    assert engine.default_master() == "local[3]"


@pytest.mark.parametrize(("entries", "pairs"), [
    ([], ()),
    (["spark.executor.memory=4g"], (("spark.executor.memory", "4g"),)),
    (["spark.driver.extraJavaOptions=-Dlog4j.level=WARN -Dfoo=bar"],
     (("spark.driver.extraJavaOptions", "-Dlog4j.level=WARN -Dfoo=bar"),)),
    ([" spark.task.cpus = 2 ", "spark.x="], (("spark.task.cpus", "2"), ("spark.x", ""))),
    (["a=1", "b=2", "a=3"], (("a", "1"), ("b", "2"), ("a", "3"))),  # in order: the last one wins in Spark
])
def test_parse_conf_splits_at_the_first_equals_sign_and_keeps_the_order(entries, pairs):
    assert engine.parse_conf(entries, "--spark-conf") == pairs


@pytest.mark.parametrize("entry", ["novalue", "=4g", "  =4g", ""])
def test_parse_conf_errors_name_the_entry_and_its_source(entry):
    with pytest.raises(ValueError) as error:
        engine.parse_conf(["spark.ok=1", entry], "ini option hwregress_spark_conf")
    assert str(error.value).startswith(f"ini option hwregress_spark_conf {entry!r}: write key=value")


_KEYS = st.text(min_size=1, max_size=30).filter(lambda s: "=" not in s and s.strip() == s and s != "")
_VALUES = st.text(max_size=30).filter(lambda s: "=" not in s and s.strip() == s)


@given(st.lists(st.tuples(_KEYS, _VALUES), max_size=8))
def test_parse_conf_round_trips_key_value_pairs(pairs):
    assert engine.parse_conf([f"{k}={v}" for k, v in pairs], "--spark-conf") == tuple(pairs)


def _context(master: str, conf: dict[str, str] | None = None):
    return SimpleNamespace(master=master, applicationId="app-1", defaultParallelism=4, uiWebUrl="http://127.0.0.1:4040",
                           getConf=lambda: SimpleNamespace(get=lambda key,
                                                           default=None: (conf or {}).get(key, default)))


def test_describe_in_local_mode_counts_the_driver_as_the_one_executor(monkeypatch):
    monkeypatch.setattr(engine, "_rest", lambda context, what: [
        {"id": "driver", "hostPort": "host:40000", "totalCores": 2, "maxMemory": 1000, "resources": {}}])
    session = SimpleNamespace(version="4.0.0", sparkContext=_context("local[2]"))
    description = engine.describe(session)
    assert description["layout"] == "1 executor x 2 cores, 1 CPU per task"
    assert description["executors"] == [{"id": "driver", "host": "host:40000", "cores": 2, "memory_bytes": 1000,
                                         "resources": {}}]
    assert description["total_cores"] == 2 and description["default_parallelism"] == 4
    assert engine.fingerprint(description) == {"spark": "4.0.0", "spark_master": "local[2]",
                                               "spark_layout": "1 executor x 2 cores, 1 CPU per task"}


def test_describe_on_a_cluster_leaves_the_driver_out_and_lists_gpu_addresses(monkeypatch):
    executors = [{"id": "driver", "hostPort": "d:1", "totalCores": 0},
                 {"id": "0", "hostPort": "a:1", "totalCores": 4,
                  "resources": {"gpu": {"name": "gpu", "addresses": ["0"]}}},
                 {"id": "1", "hostPort": "b:1", "totalCores": 4,
                  "resources": {"gpu": {"name": "gpu", "addresses": ["1"]}}}]
    monkeypatch.setattr(engine, "_rest", lambda context, what: executors)
    conf = {"spark.task.cpus": "2", "spark.executor.resource.gpu.amount": "1"}
    description = engine.describe(SimpleNamespace(version="4.0.0", sparkContext=_context("spark://m:7077", conf)), 2)
    assert description["layout"] == "2 executors x 4 cores, 2 CPU per task"
    assert [e["resources"] for e in description["executors"]] == [{"gpu": ["0"]}, {"gpu": ["1"]}]
    assert description["total_cores"] == 8 and description["gpu_per_executor"] == "1"


# -- settings --------------------------------------------------------------------------------------------------------
def test_settings_default_per_device_kind():
    settings = SparkSettings()
    assert [settings.rows_for(d) for d in ("cpu", "cuda:0", "mps")] == [2048, 16384, 4096]
    assert [settings.rate_for(d) for d in ("cpu", "cuda:1", "mps")] == [20.0, 200.0, 100.0]
    assert settings.images_for("cpu") == int(20.0 * DEFAULT_STREAM_SECONDS) == 300
    assert settings.images_for("cuda:0") == 3000


def test_settings_overrides_win_and_the_images_follow_the_rate():
    settings = SparkSettings(rows=100, stream_rate=2.5)
    assert settings.rows_for("cuda:0") == 100 and settings.rate_for("cpu") == 2.5
    assert settings.images_for("cuda:0") == int(2.5 * DEFAULT_STREAM_SECONDS)
    assert SparkSettings(stream_rate=2.5, stream_images=7).images_for("cpu") == 7


def test_the_engine_config_is_the_given_master_or_local_cores(monkeypatch):
    monkeypatch.setattr(engine, "host_cores", lambda: 5)
    conf = (("spark.task.cpus", "1"),)
    assert SparkSettings(conf=conf).engine() == engine.EngineConfig("local[5]", conf)
    assert SparkSettings(master="spark://m:7077").engine() == engine.EngineConfig("spark://m:7077", ())


# -- batch -----------------------------------------------------------------------------------------------------------
@given(st.integers(1, 1_000_000), st.integers(1, 64), st.integers(1, 1024))
def test_aligned_rows_are_the_fewest_whole_batches_per_partition_that_hold_the_rows(rows, partitions, batch_size):
    unit = partitions * batch_size
    aligned = batch.aligned_rows(rows, partitions, batch_size)
    assert aligned % unit == 0 and aligned >= rows and aligned >= unit
    assert aligned < rows + unit


def test_aligned_rows_examples():
    assert batch.aligned_rows(128, 2, 16) == 128
    assert batch.aligned_rows(129, 2, 16) == 160
    assert batch.aligned_rows(10, 4, 16) == 64  # every partition gets one whole batch
    assert batch.aligned_rows(0, 2, 16) == 32


@pytest.mark.parametrize(("rounds", "budget_s", "first_pass_s", "passes"), [
    (10, 30.0, 1.0, 10),  # the plan's rounds fit
    (10, 30.0, 5.0, 6),  # the budget cuts them
    (10, 30.0, 20.0, batch.MIN_PASSES),  # never fewer than five
    (3, 30.0, 0.1, batch.MIN_PASSES),  # even when the plan asks for fewer
    (50, 30.0, 0.0, 50),  # an instantaneous first pass
    (40, 1.0, 0.01, 40),
])
def test_passes_follow_the_plan_and_budget_with_a_floor(rounds, budget_s, first_pass_s, passes):
    assert batch._passes(TimingPlan(rounds=rounds, budget_s=budget_s), first_pass_s) == passes


@given(st.integers(3, 200), st.floats(0.01, 100.0), st.floats(0.0, 50.0))
def test_passes_stay_within_their_bounds(rounds, budget_s, first_pass_s):
    passes = batch._passes(TimingPlan(rounds=rounds, budget_s=budget_s), first_pass_s)
    assert batch.MIN_PASSES <= passes <= max(batch.MIN_PASSES, rounds)
    if passes > batch.MIN_PASSES:
        assert passes * max(first_pass_s, 1e-3) <= budget_s * (1 + 1e-9)


def test_identical_predictions_agree_fully():
    classes = np.array([3, 1, 4, 1, 5, 9, 2, 6], dtype=np.int32)
    logits = np.linspace(1.0, 2.0, 8).astype(np.float32)
    result = batch.agreement((classes, logits), (classes.copy(), logits.copy()))
    assert result == {"agreement": 1.0, "max_logit_difference": 0.0, "disagreements": [], "distinct_classes": 7,
                      "logit_scale": pytest.approx(float(np.abs(logits).max()))}


def test_a_flipped_class_is_listed_with_both_classes_and_left_out_of_the_logit_difference():
    reference = (np.array([0, 1, 2, 3], dtype=np.int32), np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32))
    spark = (np.array([0, 1, 7, 3], dtype=np.int32), np.array([1.0, 2.25, 30.0, 4.0], dtype=np.float32))
    result = batch.agreement(spark, reference)
    assert result["agreement"] == 0.75
    assert result["max_logit_difference"] == pytest.approx(0.25)  # row 2's logits differ by 27, but its class differs
    assert result["disagreements"] == [{"id": 2, "spark": 7, "torch": 2, "spark_logit": 30.0, "torch_logit": 3.0}]
    assert result["distinct_classes"] == 4


def test_disagreements_list_the_first_five_and_no_agreement_has_no_logit_difference():
    reference = (np.arange(8, dtype=np.int32), np.zeros(8, dtype=np.float32))
    spark = (np.arange(8, dtype=np.int32) + 1, np.zeros(8, dtype=np.float32))
    result = batch.agreement(spark, reference)
    assert result["agreement"] == 0.0 and np.isnan(result["max_logit_difference"])
    assert [d["id"] for d in result["disagreements"]] == [0, 1, 2, 3, 4]


def test_by_id_orders_collected_rows_by_id():
    rows = [{"id": 2, "prediction": 5, "logit": 0.5}, {"id": 0, "prediction": 3, "logit": 0.25},
            {"id": 1, "prediction": 4, "logit": 1.5}]
    classes, logits = batch._by_id(rows, 3)
    assert classes.tolist() == [3, 4, 5] and logits.tolist() == [0.25, 1.5, 0.5]


@pytest.mark.parametrize(("ids", "message"), [([0, 2], r"1 rows never, 0 rows more than once and 0 ids outside"),
                                              ([0, 1, 1, 2], r"0 rows never, 1 rows more than once and 0 ids outside"),
                                              ([0, 0, 1], r"1 rows never, 1 rows more than once and 0 ids outside"),
                                              ([0, 1, 2, 7, -1],
                                               r"0 rows never, 0 rows more than once and 2 ids outside "
                                                                 r"0\.\.2 \(\[7, -1\]\)")])
def test_by_id_raises_on_a_missing_or_repeated_row(ids, message):
    rows = [{"id": i, "prediction": 1, "logit": 0.0} for i in ids]
    with pytest.raises(RuntimeError, match=message):
        batch._by_id(rows, 3)


# -- stream: images, resume point, producer --------------------------------------------------------------------------
def _row(identifier: int):
    return (identifier, identifier % 10, [0.0, 0.5, 1.0], None)


def test_write_image_leaves_one_complete_json_file_and_no_hidden_one(tmp_path):
    before = time.time()
    written_at = stream.write_image(tmp_path, _row(42))
    assert written_at >= before
    assert [p.name for p in tmp_path.iterdir()] == ["digit-000000042.json"]
    text = (tmp_path / "digit-000000042.json").read_text()
    assert text.endswith("\n") and text.count("\n") == 1  # one JSON line, as Spark's JSON source reads it
    assert json.loads(text) == {"id": 42, "label": 2, "pixels": [0.0, 0.5, 1.0]}


def test_write_image_replaces_a_hidden_file_left_by_a_stopped_producer(tmp_path):
    (tmp_path / ".digit-000000007.json.tmp").write_text('{"id": 7, "lab')
    stream.write_image(tmp_path, _row(7))
    assert [p.name for p in tmp_path.iterdir()] == ["digit-000000007.json"]


def test_resume_point_is_one_past_the_highest_visible_image(tmp_path):
    assert stream.resume_point(tmp_path) == 0
    for identifier in (0, 1, 2, 10):
        stream.write_image(tmp_path, _row(identifier))
    (tmp_path / ".digit-000000011.json.tmp").write_text("{")  # half written: rewritten on resume
    (tmp_path / ".digit-000000099.json.tmp").write_text("{")
    assert stream.resume_point(tmp_path) == 11


def test_resume_point_ignores_hidden_files_alone(tmp_path):
    (tmp_path / ".digit-000000000.json.tmp").write_text("{")
    assert stream.resume_point(tmp_path) == 0


def _wait_until(condition, limit_s: float = 60.0) -> None:
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, "gave up waiting"
        time.sleep(0.01)


def _visible_ids(folder) -> list[int]:
    return sorted(int(p.name[len(stream.FILE_PREFIX):-5]) for p in folder.glob("digit-*.json"))


def test_the_producer_writes_each_image_of_its_range_once_in_order(tmp_path):
    written: dict[int, float] = {}
    producer = stream.Producer(tmp_path, 3, 12, rate=2000.0, written=written).start()
    producer.join(60)
    assert not producer.running and producer.error is None
    assert sorted(written) == list(range(3, 12)) == _visible_ids(tmp_path)
    times = [written[i] for i in range(3, 12)]
    assert times == sorted(times)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    first = json.loads((tmp_path / "digit-000000003.json").read_text())
    assert first["id"] == 3 and len(first["pixels"]) == 64  # a real digit row


def test_a_stopped_producer_has_written_a_prefix_of_its_range(tmp_path):
    written: dict[int, float] = {}
    producer = stream.Producer(tmp_path, 5, 5000, rate=50.0, written=written).start()
    _wait_until(lambda: len(written) >= 3)
    producer.stop()
    assert not producer.running and producer.error is None
    count = len(written)
    assert 3 <= count < 5000 - 5
    assert sorted(written) == list(range(5, 5 + count)) == _visible_ids(tmp_path)
    assert stream.resume_point(tmp_path) == 5 + count


def test_a_producer_halts_itself_at_exactly_halt_at_images_in_all_those_written_before_counted(tmp_path):
    written: dict[int, float] = {i: 0.0 for i in range(5)}  # the warm-up's images, written by an earlier producer
    producer = stream.Producer(tmp_path, 5, 5000, rate=5000.0, written=written, halt_at=12).start()
    producer.join(60)
    assert not producer.running and producer.error is None
    assert len(written) == 12 and _visible_ids(tmp_path) == list(range(5, 12)) and stream.resume_point(tmp_path) == 12


def test_waiting_on_an_ended_producer_still_waits_between_polls(tmp_path):
    producer = stream.Producer(tmp_path, 0, 2, rate=1000.0, written={}).start()
    producer.join(60)
    started = time.monotonic()
    producer.wait(0.2)
    assert time.monotonic() - started >= 0.2  # not a busy loop of Py4J calls while the query warms up


def test_a_producer_that_fails_keeps_its_error_for_the_caller(tmp_path):
    producer = stream.Producer(tmp_path / "missing", 0, 3, rate=1000.0, written={}).start()
    producer.join(60)
    assert not producer.running and isinstance(producer.error, FileNotFoundError)


# -- stream: micro-batch times, rates, latencies ---------------------------------------------------------------------
_EPOCH = datetime.datetime(2025, 5, 1, 10, 0, 0, tzinfo=datetime.timezone.utc).timestamp()


@pytest.mark.parametrize("timestamp", ["2025-05-01T10:00:00.000Z", "2025-05-01T10:00:00.000+00:00",
                                       "2025-05-01T12:00:00.000+02:00"])
def test_a_micro_batch_ends_at_its_trigger_plus_its_trigger_execution(timestamp):
    assert stream._ended_at(timestamp, {"triggerExecution": 1500, "addBatch": 1200}) == pytest.approx(_EPOCH + 1.5)
    assert stream._ended_at(timestamp, {}) == pytest.approx(_EPOCH)


def test_micro_batch_milliseconds_count():
    assert stream._ended_at("2025-05-01T10:00:00.250Z", {"triggerExecution": 125}) == pytest.approx(_EPOCH + 0.375)


def _progress(batch_id: int, rows: int, started_s: float, duration_ms: int, run_id: str = "run-1"):
    stamp = datetime.datetime.fromtimestamp(_EPOCH + started_s, datetime.timezone.utc)
    return SimpleNamespace(batchId=batch_id, numInputRows=rows, processedRowsPerSecond=rows * 10.0, runId=run_id,
                           timestamp=stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                           durationMs={"triggerExecution": duration_ms})


def test_progress_rates_are_rows_over_the_time_since_the_micro_batch_before_ended():
    progress = stream._Progress()
    progress.add(_progress(0, 16, 0.0, 1000))  # warm-up, ends at 1 s
    progress.add(_progress(1, 0, 1.0, 10))  # an empty micro-batch: no rate, not a reference
    warm = 2
    progress.add(_progress(2, 10, 2.0, 1000))  # ends at 3 s: 10 rows in 2 s
    progress.add(_progress(3, 20, 3.0, 1000))  # ends at 4 s: 20 rows in 1 s
    progress.add(_progress(4, 0, 4.0, 10))
    assert progress.rows() == 46
    measured = progress.since(warm)
    assert [b["batch_id"] for b in measured] == [2, 3]
    assert [b["output_rate"] for b in measured] == [pytest.approx(5.0), pytest.approx(20.0)]
    assert [b["process_rate"] for b in measured] == [100.0, 200.0] and measured[0]["run_id"] == "run-1"
    assert "output_rate" not in progress.batches[2]  # since() works on copies


def test_the_drain_ends_when_the_sink_holds_every_image_though_a_restart_lost_a_progress_event():
    # a query stopped between its sink commit and its progress event never reports that micro-batch: the listener
    # counts 87 of 88 rows for ever, while the sink has all 88 (CI: "fell behind: 87 of 88 images read 120 s after")
    progress = stream._Progress()
    progress.add(_progress(0, 87, 0.0, 100))
    query = fake_spark.FakeStreamingQuery(None)
    reads = []
    stream._drain(query, progress, 88, timeout_s=5.0, sink_ids=lambda: reads.append(1) or 88, sink_every_s=0.0)
    assert reads and query.drained


class _CountedQuery(fake_spark.FakeStreamingQuery):
    """A running query that counts the driver's calls into it (each one a Py4J call into Spark's JVM)."""

    def __init__(self) -> None:
        super().__init__(None)
        self.calls = 0

    def exception(self) -> BaseException | None:
        self.calls += 1
        return None


def test_the_warm_up_wait_asks_the_query_once_a_poll_not_in_a_busy_loop(tmp_path):
    # the producer's 2 images are written at once; the query reads them 1 s later (workers starting): the loop waits
    # on, and before the fix asked the JVM about 50 times a second (join on an ended thread returns at once)
    progress, query = stream._Progress(), _CountedQuery()
    timer = threading.Timer(1.0, progress.add, [_progress(0, 2, 0.0, 100)])
    spec = SimpleNamespace(rate=1000.0, timeout_s=30.0)
    timer.start()
    started = time.monotonic()
    try:
        stream._produce(spec, tmp_path, 0, 2, {}, query, progress, wait_for_rows=2)
    finally:
        timer.cancel()
    waited = time.monotonic() - started
    assert progress.rows() == 2 and waited >= 1.0
    assert query.calls <= waited / stream.QUERY_POLL_S + 2, (query.calls, waited)


def test_the_drain_still_fails_when_the_sink_misses_an_image():
    progress = stream._Progress()
    progress.add(_progress(0, 87, 0.0, 100))
    with pytest.raises(stream.StreamFailed,
                       match=r"87 of 88 images read 0 s after the last was written \(87 in the sink\)"):
        stream._drain(fake_spark.FakeStreamingQuery(None), progress, 88, timeout_s=0.3, sink_ids=lambda: 87,
                      sink_every_s=0.0)


def test_the_first_micro_batch_has_no_rate_and_a_restart_keeps_the_reference():
    progress = stream._Progress()
    progress.add(_progress(0, 4, 0.0, 500))
    progress.add(_progress(1, 6, 10.0, 2000, run_id="run-2"))  # a restarted query: its batch ids start again
    progress.add(_progress(0, 3, 5.0, 1000, run_id="run-2"))  # reported late, ended at 6 s
    rates = {(b["run_id"], b["batch_id"]): b["output_rate"] for b in progress.since(0)}
    assert rates[("run-1", 0)] is None
    assert rates[("run-2", 0)] == pytest.approx(3 / 5.5)
    assert rates[("run-2", 1)] == pytest.approx(6 / 6.0)  # ends at 12 s, the one before at 6 s


def _result(latencies=(), lost=(), duplicated=(), unexpected=()) -> stream.StreamResult:
    return stream.StreamResult(produced=10, predicted=10, lost=list(lost), duplicated=list(duplicated),
                               unexpected=list(unexpected), offered_rate=20.0, sustained_rate=20.0, output_rates=[],
                               process_rates=[], latencies_ms=sorted(latencies), micro_batches=1, restarts=0,
                               warmup_s=1.0)


def test_percentiles_of_no_latencies_are_none():
    assert _result().latency_percentiles() == {"p50": None, "p90": None, "p99": None}
    assert _result().latency_quantiles() == []


def test_percentiles_of_known_latencies():
    percentiles = _result(latencies=[float(v) for v in range(1, 101)]).latency_percentiles()
    assert percentiles == {"p50": pytest.approx(50.5), "p90": pytest.approx(90.1), "p99": pytest.approx(99.01)}


_LATENCIES = st.lists(st.floats(0.0, 1e6, allow_nan=False), min_size=1, max_size=400)


@given(_LATENCIES)
def test_percentiles_are_ordered_and_within_the_latencies(latencies):
    p = _result(latencies=latencies).latency_percentiles()
    assert min(latencies) <= p["p50"] <= p["p90"] <= p["p99"] <= max(latencies)


@given(_LATENCIES, st.integers(2, 150))
def test_quantiles_are_at_most_the_points_sorted_and_span_the_latencies(latencies, points):
    quantiles = _result(latencies=latencies).latency_quantiles(points)
    assert 1 <= len(quantiles) <= points and quantiles == sorted(quantiles)
    assert quantiles[0] == min(latencies) and quantiles[-1] == max(latencies)
    assert len(_result(latencies=latencies).latency_quantiles()) <= stream.LATENCY_POINTS


@pytest.mark.parametrize(("counts", "once"), [({}, True), ({"lost": [3]}, False), ({"duplicated": [4]}, False),
                                              ({"unexpected": [99]}, False)])
def test_exactly_once_means_nothing_lost_repeated_or_unexpected(counts, once):
    assert _result(**counts).exactly_once is once


# -- a noisy batch pipeline ------------------------------------------------------------------------------------------

def test_a_batch_pipeline_whose_passes_stayed_noisy_is_unstable_when_no_direction_is_found():
    from hwregress.plugin.families.spark import batch_stable
    from hwregress.store.results import TestRecord

    quiet, noisy = [100.0, 101.0, 99.0, 100.5, 99.5], [100.0, 70.0, 130.0, 85.0, 115.0]
    assert batch_stable(quiet, 0.10) and not batch_stable(noisy, 0.10)
    record = TestRecord("spark/tiny/batch", hardware_key="k", device="cpu", model="tiny", mode="infer", batch_size=8,
                        dtype="fp32", samples=noisy, environment=ENV)
    record.stable = batch_stable(noisy, 0.10)
    baseline = {"samples": [100.0] * 10, "history": [100.0] * 4, "environment": ENV}
    assert judge(_measured(record), baseline, Tolerances()).verdict == Verdict.UNSTABLE


# -- latency verdict and baseline ------------------------------------------------------------------------------------
ENV = {"torch": "2.13.0", "spark": "4.0.0"}


def _stream_measured(latency_ms: float, samples=(20.0,) * 6) -> Measured:
    return Measured("spark/tiny/stream", list(samples), "samples/s", True, ENV, on_cpu=True, latency_ms=latency_ms)


def _stream_baseline(latency_ms: float = 100.0, history=(100.0, 100.0, 100.0, 100.0)) -> dict:
    return {"samples": [20.0] * 6, "history": [20.0] * 4, "latency_ms": latency_ms, "latency_history": list(history),
            "environment": ENV}


def test_the_same_stream_latency_passes_and_is_reported():
    judgement = judge(_stream_measured(100.0), _stream_baseline(), Tolerances())
    assert judgement.verdict == Verdict.PASS and not judgement.failures
    assert judgement.figures.baseline_latency_ms == 100.0


def test_a_lower_latency_passes():
    assert judge(_stream_measured(40.0), _stream_baseline(), Tolerances()).verdict == Verdict.PASS


def test_a_doubled_stream_latency_is_a_regression_even_at_the_same_throughput():
    judgement = judge(_stream_measured(200.0), _stream_baseline(), Tolerances())
    assert judgement.verdict == Verdict.REGRESSION
    assert judgement.failures == ("spark/tiny/stream: latency p50 200.0 ms > baseline 100.0 ms x (1 + 15.0%)",)


def test_a_noisy_latency_history_widens_the_threshold_up_to_the_cap():
    quiet = _stream_baseline(history=[100.0] * 8)
    noisy = _stream_baseline(history=[60.0, 100.0, 140.0, 80.0, 120.0, 100.0, 70.0, 130.0])
    assert judge(_stream_measured(120.0), quiet, Tolerances()).verdict == Verdict.REGRESSION  # beyond 15%
    assert judge(_stream_measured(120.0), noisy, Tolerances()).verdict == Verdict.PASS  # within the drift
    capped = judge(_stream_measured(130.0), noisy, Tolerances())
    assert capped.failures == ("spark/tiny/stream: latency p50 130.0 ms > baseline 100.0 ms x (1 + 25.0%)",)
    assert judge(_stream_measured(200.0), noisy, Tolerances(max_threshold=0.5)).verdict == Verdict.REGRESSION


@given(st.lists(st.floats(1.0, 1e4), min_size=0, max_size=20), st.floats(0.15, 0.99))
def test_a_doubled_latency_is_always_red_whatever_the_history(history, max_threshold):
    baseline = _stream_baseline(history=history)
    judgement = judge(_stream_measured(200.0), baseline, Tolerances(max_threshold=max_threshold))
    assert judgement.verdict == Verdict.REGRESSION
    assert any("latency p50 200.0 ms" in failure for failure in judgement.failures)


def test_a_stream_without_throughput_samples_is_still_latency_judged():
    judgement = judge(_stream_measured(200.0, samples=()), _stream_baseline(history=[]), Tolerances())
    assert (judgement.verdict == Verdict.REGRESSION
            and "latency p50 200.0 ms > baseline 100.0 ms" in judgement.failures[0])
    assert (judge(_stream_measured(100.0, samples=()), _stream_baseline(history=[]), Tolerances()).verdict
            == Verdict.PASS)


def test_the_spark_family_declares_a_streams_latency_judged_and_nothing_else():
    assert registry.traits("spark").judged_latency_modes == frozenset({"stream"})
    assert registry.traits("scaling").judged_latency_modes == frozenset() and registry.traits(None) == FamilyTraits()


@pytest.mark.parametrize(("family", "mode", "judged"), [("spark", "stream", True), ("spark", "batch", False),
                                                         ("throughput", "infer", False), ("scaling", "train", False)])
def test_a_results_file_of_schema_5_reads_a_streams_latency_as_judged(family, mode, judged):
    record = TestRecord.from_json({"test_id": "t", "family": family, "mode": mode})
    assert record.latency_judged is judged and record.measures_roof is False


@pytest.mark.parametrize("judged", [True, False])
def test_a_record_hands_its_latency_to_the_judge_only_where_it_is_judged(judged):
    record = TestRecord("t", family="spark", mode="stream", device="cpu", samples=[20.0] * 6, latency_ms=300.0,
                        environment=ENV, latency_judged=judged)
    measured = _measured(record)
    assert measured.latency_ms == (300.0 if judged else None)
    verdict = judge(measured, _stream_baseline(), Tolerances()).verdict
    assert verdict == (Verdict.REGRESSION if judged else Verdict.PASS)


def _stream_record(latency_ms: float, judged: bool = True, torch: str = "2.13.0") -> TestRecord:
    return TestRecord("spark/tiny/stream", family="spark", mode="stream", samples=[20.0] * 6, latency_ms=latency_ms,
                      latency_judged=judged, environment={**ENV, "torch": torch}, verdict="pass")


def test_a_stream_entry_pools_its_latency_history_and_judges_against_the_median():
    entry = make_entry(_stream_record(100.0))
    assert entry["latency_ms"] == 100.0 and entry["latency_history"] == [100.0]
    entry = make_entry(_stream_record(300.0), entry)
    entry = make_entry(_stream_record(110.0), entry)
    assert entry["latency_history"] == [100.0, 300.0, 110.0] and entry["latency_ms"] == 110.0
    for value in range(HISTORY_LENGTH + 5):
        entry = make_entry(_stream_record(float(value)), entry)
    assert entry["latency_history"] == [float(v) for v in range(5, HISTORY_LENGTH + 5)]
    assert entry["latency_ms"] == float(np.median(range(5, HISTORY_LENGTH + 5)))


def test_a_stream_latency_history_restarts_on_a_new_stack_or_a_reset():
    entry = make_entry(_stream_record(110.0), make_entry(_stream_record(100.0)))
    assert make_entry(_stream_record(150.0, torch="2.14.0"), entry)["latency_history"] == [150.0]
    assert make_entry(_stream_record(160.0), entry, fresh=True)["latency_history"] == [160.0]


def test_records_whose_latency_is_not_judged_keep_no_latency_history():
    entry = make_entry(_stream_record(7.0, judged=False), make_entry(_stream_record(5.0, judged=False)))
    assert "latency_history" not in entry and entry["latency_ms"] == 7.0


# -- matrix ----------------------------------------------------------------------------------------------------------
SPARK = frozenset({"spark"})


def test_the_spark_family_runs_only_when_asked_for():
    assert cases(Selection(["cpu", "cuda:0"]), "spark") == []
    assert cases(Selection(["cpu"], opted_in=frozenset({"scaling"})), "spark") == []
    assert cases(Selection(["cpu"], opted_in=SPARK), "spark")


def test_the_spark_family_runs_batch_and_stream_per_device_with_its_model_and_batch():
    ids = sorted(case_id(c) for c in cases(Selection(["cpu", "cuda:0"], opted_in=SPARK), "spark"))
    assert ids == ["cpu-mobilenet_v3_small-batch-bs16-fp32", "cpu-mobilenet_v3_small-stream-bs16-fp32",
                   "cuda:0-resnet50-batch-bs256-fp32", "cuda:0-resnet50-stream-bs256-fp32"]


def test_spark_models_are_the_selected_image_models():
    assert workloads.get("gpt2").input_kind != "images"
    selection = Selection(["cpu"], models=["resnet18", "gpt2", "alexnet"], opted_in=SPARK)
    assert {c["workload"] for c in cases(selection, "spark")} == {"resnet18", "alexnet"}
    assert cases(Selection(["cpu"], models=["gpt2"], opted_in=SPARK), "spark") == []


def test_spark_batches_follow_the_numeric_batch_sizes():
    selection = Selection(["cuda:0"], batch_sizes=[8, "max", 64], opted_in=SPARK)
    assert sorted({c["batch_size"] for c in cases(selection, "spark")}) == [8, 64]
    assert cases(Selection(["cpu"], batch_sizes=["max"], opted_in=SPARK), "spark") == []


def test_spark_runs_only_the_autocast_dtypes():
    selection = Selection(["cpu"], dtypes=["fp32", "int8", "bf16", "fp8", "fp16", "tf32"], opted_in=SPARK)
    assert [c["dtype"] for c in cases(selection, "spark") if c["mode"] == "batch"] == ["fp32", "bf16", "fp16", "tf32"]


# -- options ---------------------------------------------------------------------------------------------------------
@pytest.fixture
def spark_project(hw_project):
    shutil.copy(REPO / "bench_tests" / "test_spark.py", hw_project.path / "bench_tests")
    return hw_project


@pytest.mark.parametrize(("args", "expected"), [
    (["--spark-conf", "spark.executor.memory=4g", "--spark-conf", "novalue"],
     "--spark-conf 'novalue': write key=value"),
    (["--spark-rows", "0"], "--spark-rows='0' is out of range"),
    (["--spark-rows", "many"], "--spark-rows='many' is not a whole number; use one in [1, 10000000]"),
    (["--spark-stream-rate", "0"], "--spark-stream-rate='0' is out of range"),
    (["--spark-stream-images", "-5"], "--spark-stream-images='-5' is out of range"),
    (["--spark-master", ""], "--spark-master is empty"),
    (["--spark-master", "   "], "--spark-master is empty"),
])
def test_bad_spark_options_are_usage_errors_naming_the_option(spark_project, args, expected):
    result = spark_project.run(*args, inprocess=True)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert expected in result.stderr.str()


@pytest.mark.parametrize("master", ["bogus://x", "local[0]", "local[two]", "LOCAL[2]", "local[2", "spark://head",
                                    "spark://head:7077/path", "spark://,head:7077", "k8s://", "k8s://ftp://api:6443",
                                    "yarn-client", "local-cluster[2,1]"])
def test_a_master_url_spark_would_refuse_is_a_usage_error_at_configure(spark_project, master):
    result = spark_project.run("--collect-only", "--spark-master", master, inprocess=True)  # no Spark starts
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    error = result.stderr.str()
    assert f"--spark-master={master!r} is not a master URL Spark accepts" in error
    assert ("use local, local[N], local[*], local[N,F], local-cluster[N,C,M], spark://HOST:PORT[,HOST:PORT...], yarn "
            "or k8s://[https://]HOST[:PORT]") in error


def test_an_ini_spark_master_spark_would_refuse_names_the_ini_key(spark_project):
    pyproject = spark_project.path / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace(
        "[tool.pytest.ini_options]\n", '[tool.pytest.ini_options]\nhwregress_spark_master = "bogus://x"\n'))
    result = spark_project.run("--collect-only", inprocess=True)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "ini option hwregress_spark_master='bogus://x' is not a master URL Spark accepts" in result.stderr.str()


def test_a_local_master_of_several_slots_on_a_gpu_warns_at_configure_naming_the_value(spark_project, monkeypatch):
    # Spark's local mode gives tasks no GPU: local[4] runs 4 Python workers, each with a model, on the one GPU
    fake_cuda.install(monkeypatch, {0: fake_cuda.fake_properties()})
    result = spark_project.run("--collect-only", "-q", "--devices", "cuda:0", "--spark-master", "local[4]",
                               inprocess=True)
    assert result.ret == pytest.ExitCode.OK
    output = result.stdout.str()
    assert "PytestConfigWarning: --spark-master=local[4] on a GPU (cuda:0): 4 task slots" in output
    assert "4 Python workers, each with its own model and CUDA context, share the one GPU a test runs on" in output
    assert "leave --spark-master out for local[1] on GPU tests" in output


@pytest.mark.parametrize(("devices", "master"), [("cuda:0", "local[1]"), ("cuda:0", "local"), ("cpu", "local[4]"),
                                                 ("cuda:0", "spark://head:7077")])
def test_one_slot_per_gpu_a_cpu_run_or_a_cluster_master_does_not_warn(spark_project, monkeypatch, devices, master):
    fake_cuda.install(monkeypatch, {0: fake_cuda.fake_properties()})
    result = spark_project.run("--collect-only", "-q", "--devices", devices, "--spark-master", master, inprocess=True)
    assert result.ret == pytest.ExitCode.OK
    assert "task slots" not in result.stdout.str()


@pytest.mark.parametrize(("master", "slots"), [("local", 1), ("local[4]", 4), ("local[*]", 6), ("local[3,2]", 3),
                                               ("local[*, 4]", 6), ("local-cluster[2, 3, 1024]", 6),
                                               ("spark://head:7077", None), ("yarn", None)])
def test_local_slots_of_each_master_form(master, slots):
    assert spark_master.local_slots(master, cores=6) == slots


@pytest.mark.parametrize("master", ["local", "local[4]", "local[*]", "local[2,3]", "local[*, 4]",
                                    "local-cluster[2, 1, 1024]", "spark://head:7077", "spark://a:7077,b:7078,",
                                    "spark://[::1]:7077", "yarn", "k8s://https://api:6443", "k8s://api:6443",
                                    "k8s://http://api"])
def test_every_master_url_form_spark_accepts_passes(master):
    assert spark_master.problem(master, spark_major=4) is None


def test_mesos_masters_pass_for_spark_3_only():
    assert spark_master.problem("mesos://zk:2181", spark_major=3) is None
    assert "Spark 4 has no Mesos support" in spark_master.problem("mesos://zk:2181", spark_major=4)


def test_a_bad_ini_spark_conf_names_the_ini_key(spark_project):
    pyproject = spark_project.path / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace(
        "[tool.pytest.ini_options]\n", '[tool.pytest.ini_options]\nhwregress_spark_conf = ["spark.a=1", "novalue"]\n'))
    result = spark_project.run(inprocess=True)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "ini option hwregress_spark_conf 'novalue'" in result.stderr.str()


def _collected(project, *args: str) -> str:
    result = project.run("--collect-only", "-q", *args, fast=False, inprocess=True)
    assert result.ret == pytest.ExitCode.OK, result.stderr.str()
    return result.stdout.str()


def test_the_spark_marker_collects_the_cpu_batch_and_stream(spark_project):
    out = _collected(spark_project, "-m", "spark", "--devices", "cpu")
    tests = [line for line in out.splitlines() if "::" in line]
    assert tests == ["bench_tests/test_spark.py::test_spark[cpu-mobilenet_v3_small-batch-bs16-fp32]",
                     "bench_tests/test_spark.py::test_spark[cpu-mobilenet_v3_small-stream-bs16-fp32]"]


def test_a_spark_master_alone_opts_the_family_in(spark_project):
    assert "test_spark[cpu-" not in _collected(spark_project, "--devices", "cpu", "--models", "tiny")
    out = _collected(spark_project, "--devices", "cpu", "--models", "tiny", "--spark-master", "local[1]")
    assert "test_spark[cpu-tiny-batch-bs16-fp32]" in out and "test_spark[cpu-tiny-stream-bs16-fp32]" in out
    assert "test_throughput[cpu-tiny-" in out  # the other families still run


@pytest.mark.parametrize(("rates", "steady"), [([1.0, 15.0, 20.0, 21.0, 6.0], [15.0, 20.0, 21.0]),
                                               ([None, 1.0, 20.0, 19.0, 21.0, 5.0], [20.0, 19.0, 21.0]),
                                               ([2.0, 20.0, 3.0], [2.0, 20.0, 3.0]), ([], [])])
def test_steady_rates_drop_the_filling_and_draining_micro_batches_when_enough_remain(rates, steady):
    assert stream.steady_rates(rates) == steady


# -- GPUs: one Python worker per GPU, a worker's out-of-memory is oom -------------------------------------------------
@pytest.mark.parametrize("gpus", [1, 4])
def test_a_gpu_test_gets_one_task_slot_per_gpu_whatever_the_cores_and_gpus(monkeypatch, gpus):
    fake_cuda.install(monkeypatch, {i: fake_cuda.fake_properties(bus=0x18 + i) for i in range(gpus)})
    monkeypatch.setattr(engine, "host_cores", lambda: 16)
    settings = SparkSettings(conf=(("spark.executor.memory", "8g"),))
    # local mode gives tasks no GPU address, so each of N task slots would run its own Python worker on the one
    # device under test: one slot per GPU the test runs on
    for index in range(torch.cuda.device_count()):
        assert settings.engine(f"cuda:{index}") == engine.EngineConfig("local[1]", (("spark.executor.memory", "8g"),))
    assert settings.engine("cpu").master == "local[16]"  # the CPU keeps one task per core
    assert SparkSettings(master="local[4]").engine("cuda:0").master == "local[4]"  # asked for: kept


@pytest.mark.needs_extra
def test_the_predictor_takes_the_gpu_spark_gave_the_task_else_the_device_under_test(monkeypatch):
    pyspark = pytest.importorskip("pyspark")
    spec = predictor.PredictSpec("mobilenet_v3_small", "cuda:0", "fp32")
    for context, device in [(FakeTaskContext(gpus=["2"]), "cuda:2"), (FakeTaskContext(gpus=None), "cuda:0"),
                            (FakeTaskContext(gpus=[]), "cuda:0"), (None, "cuda:0")]:
        monkeypatch.setattr(pyspark.TaskContext, "get", classmethod(lambda cls, context=context: context))
        assert predictor.executor_device(spec) == device
    assert predictor.executor_device(predictor.PredictSpec("tiny", "cpu", "fp32")) == "cpu"


@pytest.mark.needs_extra
def test_the_predict_function_builds_its_model_on_the_tasks_gpu_with_the_tasks_cpus(monkeypatch):
    pyspark = pytest.importorskip("pyspark")
    built = []
    monkeypatch.setattr(pyspark.TaskContext, "get", classmethod(lambda cls: FakeTaskContext(gpus=["2"], task_cpus=3)))
    monkeypatch.setattr(predictor, "Predictor", lambda spec, device, threads: built.append((device, threads)))
    predictor.make_predict_fn(predictor.PredictSpec("mobilenet_v3_small", "cuda:0", "fp32"))()
    assert built == [("cuda:2", 3)]


@pytest.mark.parametrize(("text", "line"), [
    (fake_spark.WORKER_CUDA_OOM, f"torch.OutOfMemoryError: {fake_spark.CUDA_OOM_MESSAGE}"),
    (fake_spark.STREAM_CUDA_OOM, f"torch.OutOfMemoryError: {fake_spark.CUDA_OOM_MESSAGE}"),
    (fake_spark.WORKER_CUDA_OOM.replace("torch.OutOfMemoryError", "torch.cuda.OutOfMemoryError"),  # torch < 2.5
     f"torch.cuda.OutOfMemoryError: {fake_spark.CUDA_OOM_MESSAGE}"),
    ("Traceback (most recent call last):\nRuntimeError: MPS backend out of memory (MPS allocated: 17.00 GB)",
     "RuntimeError: MPS backend out of memory (MPS allocated: 17.00 GB)"),
    ("Traceback (most recent call last):\nRuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
     "RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED"),
    (fake_spark.WORKER_VALUE_ERROR, None), (fake_spark.JVM_HEAP_OOM, None),
    ("Traceback (most recent call last):\nRuntimeError: CUDA error: an illegal memory access was encountered", None),
])
def test_a_worker_traceback_is_out_of_memory_by_its_exception_line(text, line):
    assert hw_oom.out_of_memory_in_traceback(text) == line


def _spark_bench(monkeypatch, tmp_path, master: str | None = None):
    """A SparkBench whose Spark session is a fake: ``started`` lists the masters started, ``stopped`` those stopped."""
    from hwregress.plugin.families import spark as plugin_spark

    started, stopped = [], []

    class Session:
        def __init__(self, config):
            self.master = config.master
            self.sparkContext = SimpleNamespace(defaultParallelism=1, master=config.master)
            started.append(config.master)

        def stop(self):
            stopped.append(self.master)

    monkeypatch.setattr(engine, "unavailable_reason", lambda: None)
    monkeypatch.setattr(engine, "start_session", Session)
    monkeypatch.setattr(engine, "describe", lambda session: {"spark_version": "4.3.0", "master": session.master,
                                                             "layout": "1 executor x 1 cores, 1 CPU per task"})
    monkeypatch.setattr(plugin_spark, "session_temp", lambda request: tmp_path)
    bench = SimpleNamespace(config=SimpleNamespace(stash=pytest.Stash()), request=None,
                            settings=SimpleNamespace(spark=SparkSettings(master=master), workload_modules=(),
                                                     plan=TimingPlan(rounds=5), telemetry_interval_s=0.1))
    return plugin_spark.SparkBench(bench), started, stopped


def test_the_session_follows_the_device_kind_under_test_unless_a_master_is_given(monkeypatch, tmp_path):
    monkeypatch.setattr(engine, "host_cores", lambda: 16)
    bench, started, stopped = _spark_bench(monkeypatch, tmp_path)
    for device in ("cpu", "cpu", "cuda:0", "cuda:1", "cpu"):
        assert bench._engine(device).session.master == ("local[16]" if device == "cpu" else "local[1]")
    assert started == ["local[16]", "local[1]", "local[16]"] and stopped == ["local[16]", "local[1]"]
    given, started, stopped = _spark_bench(monkeypatch, tmp_path, master="spark://head:7077")
    for device in ("cpu", "cuda:0", "cuda:1"):
        given._engine(device)
    assert started == ["spark://head:7077"] and stopped == []


def _record(device: str, pipeline: str) -> TestRecord:
    return TestRecord(test_id=f"test_spark[{device}-mobilenet_v3_small-{pipeline}-bs256-fp32]", family="spark",
                      device=device, model="mobilenet_v3_small", mode=pipeline, batch_size=256, dtype="fp32")


def test_a_cuda_out_of_memory_in_a_batch_worker_is_an_oom_naming_the_batch_and_device(monkeypatch, tmp_path):
    bench, _, _ = _spark_bench(monkeypatch, tmp_path)

    def worker_runs_out_of_memory(session, spec, on_timed=None):
        raise fake_spark.PythonException(fake_spark.WORKER_CUDA_OOM)

    monkeypatch.setattr(batch, "run_batch", worker_runs_out_of_memory)
    record = _record("cuda:1", "batch")
    with pytest.raises(HwSkip) as skipped:
        bench.measure(record, "cuda:1", "mobilenet_v3_small", "batch", 256, "fp32")
    assert skipped.value.verdict == Verdict.OOM
    message = skipped.value.msg  # the record's message (plugin/record.py: finish)
    assert message.startswith("out of memory at batch 256 on cuda:1 in a Spark Python worker (master local[1])")
    assert "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB" in message


def test_a_cuda_out_of_memory_in_a_stream_worker_is_an_oom(monkeypatch, tmp_path):
    bench, _, _ = _spark_bench(monkeypatch, tmp_path)
    # the query's error reaches the family through stream._check, as in a real run; a long traceback (a deep
    # stack of the worker's frames) puts the out-of-memory line past what the StreamFailed message keeps
    frames = '  File "/venv/lib/python3.11/site-packages/pyspark/worker.py", line 1, in main\n    process()\n' * 40
    text = fake_spark.STREAM_CUDA_OOM.replace("Traceback (most recent call last):\n",
                                              "Traceback (most recent call last):\n" + frames)
    monkeypatch.setattr(stream, "run_stream", lambda session, spec: stream._check(
        fake_spark.FakeStreamingQuery(fake_spark.PythonException(text)), None))
    record = _record("cuda:0", "stream")
    with pytest.raises(HwSkip) as skipped:
        bench.measure(record, "cuda:0", "mobilenet_v3_small", "stream", 256, "fp32")
    assert skipped.value.verdict == Verdict.OOM
    assert skipped.value.msg.startswith("out of memory at batch 256 on cuda:0 in a Spark Python worker (master "
                                        "local[1])")


def test_a_query_that_fails_while_the_driver_polls_it_is_reported_with_its_error_not_as_stopped_by_itself():
    # the OOM of a stream's first micro-batch can land between the two reads of a poll (seen on a loaded 2-core VM:
    # "the streaming query stopped by itself" instead of the out-of-memory)
    query = fake_spark.QueryFailingBetweenReads(fake_spark.PythonException(fake_spark.STREAM_CUDA_OOM))
    with pytest.raises(stream.StreamFailed) as failed:
        for _ in range(2):  # the poll during which it fails, then the next one
            stream._check(query, None)
    assert "stopped by itself" not in str(failed.value)
    assert failed.value.__cause__ is query.pending


def test_the_stream_gets_the_sessions_live_lines_through_its_spec_and_none_without_a_terminal(monkeypatch, tmp_path):
    bench, _, _ = _spark_bench(monkeypatch, tmp_path)
    seen: list = []

    def run_stream(session, spec):  # the real call's shape: (session, spec), the watcher rides in the spec
        seen.append(spec.watch)
        raise stream.StreamFailed("stopped by the self-test")

    monkeypatch.setattr(stream, "run_stream", run_stream)
    for written in (None, []):  # no writer stashed (quiet, xdist worker, no terminal), then the session's writer
        if written is not None:
            bench.bench.config.stash[progress.WRITER_KEY] = written.append
        with pytest.raises(pytest.fail.Exception, match="stopped by the self-test"):
            bench.measure(_record("cpu", "stream"), "cpu", "mobilenet_v3_small", "stream", 256, "fp32")
    assert seen[0] is None and callable(seen[1])
    seen[1](40, 30, 528)  # a first poll: inside the first 10 s, so no line yet (the throttle: test_progress.py)
    assert written == []


@pytest.mark.parametrize("text", [fake_spark.WORKER_VALUE_ERROR, fake_spark.JVM_HEAP_OOM])
def test_a_worker_bug_or_a_driver_heap_exhaustion_still_fails(monkeypatch, tmp_path, text):
    bench, _, _ = _spark_bench(monkeypatch, tmp_path)

    def worker_fails(session, spec, on_timed=None):
        raise fake_spark.PythonException(text)

    monkeypatch.setattr(batch, "run_batch", worker_fails)
    record = _record("cuda:0", "batch")
    with pytest.raises(HwFail) as failed:
        bench.measure(record, "cuda:0", "mobilenet_v3_small", "batch", 256, "fp32")
    assert failed.value.msg.startswith("Spark batch inference failed: PythonException")


def test_an_out_of_memory_of_the_plain_torch_reference_in_the_driver_is_an_oom(monkeypatch, tmp_path):
    bench, _, _ = _spark_bench(monkeypatch, tmp_path)

    def reference_runs_out_of_memory(session, spec, on_timed=None):
        raise torch.OutOfMemoryError(fake_spark.CUDA_OOM_MESSAGE)

    monkeypatch.setattr(batch, "run_batch", reference_runs_out_of_memory)
    record = _record("cuda:0", "batch")
    with pytest.raises(HwSkip) as skipped:
        bench.measure(record, "cuda:0", "mobilenet_v3_small", "batch", 256, "fp32")
    assert skipped.value.verdict == Verdict.OOM
    assert skipped.value.msg.startswith("out of memory at batch 256 on cuda:0 in the driver process: "
                                        "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")

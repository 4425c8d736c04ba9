"""How the day-one judge reads the fleet store: the sessions once per process, in one SELECT of the columns it needs
(not every JSON column), each hardware key's figures once, filtered in SQL; a store already at the newest schema is
looked at without building Alembic's migration scripts again, and a newer schema is still refused. The statements
are those SQLAlchemy's engines really execute on a real SQLite store (``before_cursor_execute``)."""

from __future__ import annotations

import datetime as dt
import math
import re
from typing import Any

import pytest
import sqlalchemy
from alembic.script import ScriptDirectory
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, event
from support.store_results import results_document

from hwregress.judge.fleet import FleetVerdict
from hwregress.plugin.store_push import fleet_judge
from hwregress.store.database import open_store
from hwregress.store.fleet_queries import FleetReader, judged_sessions, latest_figures, latest_measured
from hwregress.store.results import TestRecord
from hwregress.store.store_errors import StoreUnavailable
from hwregress.store.tables import figures, hosts, sessions

KEY = "amd-epyc-f26m2-2t"  # results_document's key
TEST = "bench_tests/test_models.py::test_throughput[cpu-resnet18-train-bs{}]"


@pytest.fixture
def statements():
    """Every SQL statement any engine executes while the test runs."""
    seen: list[str] = []

    def record(connection, cursor, statement, parameters, context, executemany):
        seen.append(statement)

    event.listen(Engine, "before_cursor_execute", record)
    yield seen
    event.remove(Engine, "before_cursor_execute", record)


def _fleet_url(tmp_path) -> str:
    """A real SQLite store of three other hosts' sessions (two tests each, at 10 and 11 samples/s) and one interrupted
    session of a fourth."""
    url = f"sqlite:///{tmp_path / 'fleet.sqlite'}"
    store = open_store(url)
    for index, host in enumerate(("host-a", "host-b", "host-c", "host-d")):
        document = results_document(f"{host}-1-2026112{index}T012215Z", tests=2, hostname=host,
                                    started=f"2026-11-2{index}T01:22:15+00:00")
        document["meta"]["interrupted"] = host == "host-d"
        store.push(document)
    store.close()
    return url


def _record(index: int, throughput: float, hardware_key: str = KEY) -> TestRecord:
    return TestRecord(TEST.format(index), family="throughput", device="cpu", hardware_key=hardware_key,
                      model="resnet18", mode="train", batch_size=index + 1, dtype="fp32", unit="samples/s",
                      throughput=throughput, samples=[throughput] * 5)


def test_a_sessions_judging_reads_the_sessions_once_without_their_json_columns(tmp_path, statements):
    url = _fleet_url(tmp_path)
    statements.clear()
    judge = fleet_judge(url)
    records = [_record(0, 10.0), _record(1, 8.0), _record(0, 10.0, hardware_key="amd-epyc-f99m9-2t")]
    verdicts = [judge.judge(record) for record in records]  # the unseen key asks the store for its known keys
    findings = judge.host_findings(records)
    assert isinstance(verdicts[0], FleetVerdict) and verdicts[0].n_hosts == 3  # the interrupted host left out
    assert verdicts[1].verdict == "regression" and [key for key, _ in findings] == [KEY]
    session_reads = [s for s in statements if re.search(r"\bFROM sessions\b", s)]
    assert len(session_reads) == 1, "\n".join(session_reads)
    whole_json_column = r"(?:SELECT|,)\s*sessions\.(?:meta|environment)\s*(?:,|FROM)"  # not a JSON path of meta
    assert not re.search(whole_json_column, session_reads[0]), session_reads[0]
    figure_reads = [s for s in statements if re.search(r"\bFROM figures\b", s)]
    assert len(figure_reads) == 2 and all("figures.identity" not in s for s in figure_reads)  # one per key


def check_the_narrow_read(url: str) -> None:
    """The JSON paths of ``meta`` the narrow read extracts come back as pushed (SQLite and PostgreSQL differ there)."""
    store = open_store(url)
    checked = results_document("host-a-1-20261120T012215Z", tests=1, hostname="host-a",
                               started="2026-11-20T01:22:15+00:00")
    check = {"hardware_key": KEY, "host": "m-1", "defective": True, "message": "defective: ...", "evidence": []}
    checked["meta"].update(machine_id="m-1", host_check=[check])
    store.push(checked)
    store.push(results_document("host-b-1-20261121T012215Z", tests=1, hostname="host-b",
                                started="2026-11-21T01:22:15+00:00"))
    found = judged_sessions(store)
    assert [(s["name"], s["hostname"], s["machine_id"], s["host_check"]) for s in found] == [
        ("host-a-1-20261120T012215Z", "host-a", "m-1", [check]), ("host-b-1-20261121T012215Z", "host-b", None, [])]
    assert FleetReader(store).host_names() == {found[0]["host_id"]: {"host-a", "m-1"}, found[1]["host_id"]: {"host-b"}}
    store.close()


def test_the_narrow_read_gives_each_sessions_machine_id_and_host_check(tmp_path):
    check_the_narrow_read(f"sqlite:///{tmp_path / 'fleet.sqlite'}")


@pytest.mark.needs_extra
def test_the_narrow_read_gives_each_sessions_machine_id_and_host_check_on_postgresql(postgres_database):
    check_the_narrow_read(postgres_database)


def test_opening_a_store_at_the_newest_schema_builds_no_migration_scripts(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'hwregress.sqlite'}"
    open_store(url).close()
    built = []
    real = ScriptDirectory.from_config
    monkeypatch.setattr(ScriptDirectory, "from_config", lambda config: built.append(config) or real(config))
    for _ in range(3):
        open_store(url).close()
    assert built == []


def test_a_store_migrated_by_a_newer_hwregress_is_still_refused(tmp_path):
    url = f"sqlite:///{tmp_path / 'hwregress.sqlite'}"
    open_store(url).close()
    engine = sqlalchemy.create_engine(url)
    with engine.begin() as connection:
        connection.exec_driver_sql("UPDATE alembic_version SET version_num = '9999'")
    engine.dispose()
    with pytest.raises(StoreUnavailable, match=r"its schema is not one this hwregress knows .*9999"):
        open_store(url)


# each host's latest figure: chosen in SQL as the Python reference chooses it
MEDIANS = st.sampled_from([-1.0, 0.0, math.nan, math.inf, None]) | st.floats(0.5, 100.0)
VERDICTS = st.sampled_from([None, "pass", "regression", "new", "failed", "oom", "skipped"])
FIGURES = st.dictionaries(st.tuples(st.sampled_from(["t0", "t1"]), st.sampled_from(["throughput", "peak_memory"])),
                          st.tuples(st.sampled_from([KEY, "other-key"]), MEDIANS, VERDICTS), max_size=4)
SESSIONS = st.lists(st.tuples(st.sampled_from(["h0", "h1", "h2"]), st.integers(0, 3), st.booleans(), FIGURES),
                    max_size=12)
EPOCH = dt.datetime(2026, 11, 20, tzinfo=dt.timezone.utc)


def _insert(store: Any, spec: list[tuple[str, int, bool, dict[tuple[str, str], tuple[str, Any, Any]]]]) -> None:
    """Sessions as ``spec`` gives them (host, start day: equal days tie, broken by name; interrupted; figures: (test,
    metric) -> (key, median, verdict)), written straight into the tables: a median or verdict a push would never
    write is still read right."""
    with store.engine.begin() as connection:
        for host in sorted({host for host, *_ in spec}):
            connection.execute(hosts.insert().values(host_id=host, aliases=[host], hardware_key=KEY, first_seen=EPOCH,
                                                     last_seen=EPOCH))
        for index, (host, day, interrupted, measured) in enumerate(spec):
            session_id = f"00000000-0000-7000-8000-{index:012d}"
            connection.execute(sessions.insert().values(
                id=session_id, name=f"s{index:02d}", host_id=host, hostname=host, hardware_key=KEY,
                started_at=EPOCH + dt.timedelta(days=day), interrupted=interrupted, environment={}, meta={},
                pushed_at=EPOCH))
            for (test, metric), (key, median, verdict) in measured.items():
                connection.execute(figures.insert().values(session_id=session_id, test_id=test, metric=metric,
                                                           hardware_key=key, direction="higher", median=median,
                                                           verdict=verdict))


def check_latest_measured(url: str, spec: list[Any]) -> None:
    """``latest_measured`` gives, per metric, what ``latest_figures`` keeps of every figure and session read whole."""
    store = open_store(url)
    try:
        _insert(store, spec)
        uninterrupted = {s["id"]: s for s in store.sessions() if not s["interrupted"]}
        for metric in ("throughput", "peak_memory"):
            reference = latest_figures(uninterrupted, store.figures(hardware_key=KEY), (metric,))
            expected = {(test, host): (figure["session_id"], figure["median"])
                        for (_, test), by_host in reference.items() for host, (figure, _) in by_host.items()}
            found = {(row["test_id"], row["host_id"]): (row["session_id"], row["median"])
                     for row in latest_measured(store, KEY, metric)}
            assert found == expected, metric
    finally:
        store.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=SESSIONS)
def test_latest_measured_chooses_in_sql_what_latest_figures_chooses(tmp_path_factory, spec):
    check_latest_measured(f"sqlite:///{tmp_path_factory.mktemp('latest') / 'fleet.sqlite'}", spec)


# h0: a failed run, a NaN and an infinite median after its measured ones; h1: two sessions at one start (the later
# name wins), then an interrupted one; h2: the other key only
LATEST_CASE = [
    ("h0", 0, False, {("t0", "throughput"): (KEY, 10.0, "pass")}),
    ("h0", 1, False, {("t0", "throughput"): (KEY, 9.0, "failed"), ("t1", "throughput"): (KEY, 5.0, "regression")}),
    ("h0", 2, False, {("t0", "throughput"): (KEY, math.inf, None), ("t1", "throughput"): (KEY, math.nan, "pass")}),
    ("h1", 1, False, {("t0", "throughput"): (KEY, 11.0, "pass")}),
    ("h1", 1, False, {("t0", "throughput"): (KEY, 12.0, "new")}),
    ("h1", 3, True, {("t0", "throughput"): (KEY, 13.0, "pass")}),
    ("h2", 3, False, {("t0", "throughput"): ("other-key", 14.0, "pass")}),
]


def test_latest_measured_on_sqlite_keeps_the_latest_measured_figure_per_host(tmp_path):
    url = f"sqlite:///{tmp_path / 'fleet.sqlite'}"
    check_latest_measured(url, LATEST_CASE)
    store = open_store(url)
    assert FleetReader(store).latest_medians(KEY) == {"t0": {"h0": 10.0, "h1": 12.0}, "t1": {"h0": 5.0}}
    store.close()


@pytest.mark.needs_extra
def test_latest_measured_on_postgresql_keeps_the_latest_measured_figure_per_host(postgres_database):
    check_latest_measured(postgres_database, LATEST_CASE)  # PostgreSQL keeps NaN, and orders it above every number
    store = open_store(postgres_database)
    assert FleetReader(store).latest_medians(KEY) == {"t0": {"h0": 10.0, "h1": 12.0}, "t1": {"h0": 5.0}}
    store.close()

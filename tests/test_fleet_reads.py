"""How the day-one judge reads the fleet store: the sessions once per process, in one SELECT of the columns it needs
(not every JSON column), each hardware key's figures once, filtered in SQL; a store already at the newest schema is
looked at without building Alembic's migration scripts again, and a newer schema is still refused. The statements
are those SQLAlchemy's engines really execute on a real SQLite store (``before_cursor_execute``)."""

from __future__ import annotations

import re

import pytest
import sqlalchemy
from sqlalchemy import Engine, event
from support.store_results import results_document

from hwregress.judge.fleet import FleetVerdict
from hwregress.plugin.store_push import fleet_judge
from hwregress.store import database
from hwregress.store.database import open_store
from hwregress.store.fleet_queries import FleetReader, judged_sessions
from hwregress.store.results import TestRecord
from hwregress.store.store_errors import StoreUnavailable

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
    real = database.ScriptDirectory.from_config
    monkeypatch.setattr(database.ScriptDirectory, "from_config", lambda config: built.append(config) or real(config))
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


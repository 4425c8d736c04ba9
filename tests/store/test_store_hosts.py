"""One machine is one host in the fleet store, whether its sessions were pushed (their ``meta.machine_id`` is the host
id) or imported from its history (rows written before the rows carried the machine id name only the hostname): the
push files a bare-hostname session under the one host of its hardware key that has that hostname as an alias, and a
session with a machine id takes over the bare-hostname host of its hostname. Two machines of one hostname stay two,
and so does a hostname two machines share (docs/store.md, 'Schema'). On a real SQLite file and a real PostgreSQL."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import delete, insert
from support.store_results import results_document

from hwregress.cli import main
from hwregress.store.database import open_store
from hwregress.store.fleet_store import Store
from hwregress.store.history import HistoryStore
from hwregress.store.history_import import rows_from_history
from hwregress.store.history_row import HistoryRow, row_from_record
from hwregress.store.results import TestRecord
from hwregress.store.session_rows import session_rows
from hwregress.store.tables import figures, hosts, sessions

MACHINE = "3d1219c7c4c5404aaa1f6d2a48adfda4"
OTHER_MACHINE = "9b4f2c1d0e8a47f6b3c2d1e0f9a8b7c6"
KEY = "amd-epyc-f26m2-2t"  # results_document's hardware key


def session_name(hostname: str, index: int) -> str:
    return f"{hostname}-{100 + index}-202611{index + 1:02d}T012215Z"  # <host>-<pid>-<start>, as the plugin names it


def document(hostname: str, index: int, machine: str | None, key: str = KEY) -> dict[str, Any]:
    """The results.json of session ``index`` of a CPU machine (``machine``: its machine id, None: unknown)."""
    started = dt.datetime(2026, 11, index + 1, 1, 22, 15, tzinfo=dt.timezone.utc).isoformat()
    results = results_document(session_name(hostname, index), tests=2, hostname=hostname, started=started)
    for record in results["records"]:
        record["hardware_key"] = key
    if machine is not None:
        results["meta"]["machine_id"] = machine
    return results


def history_rows(results: dict[str, Any], machine: str | None = None) -> list[HistoryRow]:
    """The history rows the session of ``results`` wrote (with the machine id only where ``machine`` is given: the
    rows of an older hwregress have none)."""
    meta = results["meta"]
    rows = [row_from_record(TestRecord.from_json(r), meta["session"], meta["started_at"], "", machine_id=machine)
            for r in results["records"]]
    return [row for row in rows if row is not None]


def push(store: Store, hostname: str, index: int, machine: str = MACHINE, key: str = KEY) -> None:
    assert store.push(document(hostname, index, machine, key)).inserted


def import_history(store: Store, hostname: str, index: int, key: str = KEY) -> None:
    assert store.push_rows(rows_from_history(history_rows(document(hostname, index, None, key)))).inserted


def filed(store: Store) -> dict[str, list[str]]:
    """Host id -> the names of its sessions; every session's host is a row of ``hosts``."""
    found: dict[str, list[str]] = {host["host_id"]: [] for host in store.hosts()}
    for session in store.sessions():
        found[session["host_id"]].append(session["name"])
    return found


@pytest.fixture
def store(store_on_each_engine):
    return store_on_each_engine


def test_history_rows_that_name_the_machine_import_under_its_machine_id():
    results = document("vm", 0, MACHINE)
    rows = rows_from_history(history_rows(results, machine=MACHINE))
    assert rows.host["host_id"] == rows.session["host_id"] == MACHINE and rows.host["aliases"] == ["vm"]
    assert rows_from_history(history_rows(results)).host["host_id"] == "vm"  # an older row: its hostname


def test_an_imported_history_of_sixteen_gpus_has_the_id_a_push_gives_it():
    results = document("dgx", 0, MACHINE)
    results["records"] = [{**results["records"][0], "test_id": f"t{index}", "device": f"cuda:{index}",
                           "identity": {"gpu_uuid": f"GPU-{index:08d}-aaaa-bbbb-cccc-{'d' * 12}"}}
                          for index in range(16)]
    pushed = session_rows(results).host["host_id"]
    assert pushed.startswith("gpus-sha256:")  # 16 UUIDs are longer than the column
    assert rows_from_history(history_rows(results)).host["host_id"] == pushed


def test_import_then_push_of_one_machine_gives_one_host(store):
    import_history(store, "vm", 0)
    assert filed(store) == {"vm": [session_name("vm", 0)]}
    push(store, "vm", 1)
    assert filed(store) == {MACHINE: [session_name("vm", 0), session_name("vm", 1)]}
    [host] = store.hosts()
    assert host["aliases"] == ["vm"] and host["first_seen"] == store.sessions()[0]["started_at"]
    assert host["last_seen"] == store.sessions()[1]["started_at"]


def test_push_then_import_of_one_machine_gives_one_host(store):
    push(store, "vm", 1)
    import_history(store, "vm", 0)
    import_history(store, "vm", 2)
    assert filed(store) == {MACHINE: [session_name("vm", i) for i in range(3)]}
    [host] = store.hosts()
    assert host["first_seen"] == store.sessions()[0]["started_at"]


def test_two_machines_of_one_hostname_stay_two_and_their_shared_hostname_joins_neither(store):
    push(store, "vm", 0, MACHINE)
    push(store, "vm", 1, OTHER_MACHINE)
    import_history(store, "vm", 2)  # which of the two ran it? neither is told
    assert filed(store) == {MACHINE: [session_name("vm", 0)], OTHER_MACHINE: [session_name("vm", 1)],
                            "vm": [session_name("vm", 2)]}
    push(store, "vm", 3, MACHINE)  # the hostname is still ambiguous: the bare host stays
    assert sorted(filed(store)) == sorted([MACHINE, OTHER_MACHINE, "vm"])


def test_one_hostname_on_two_hardware_keys_stays_two_hosts(store):
    import_history(store, "vm", 0, key="intel-xeon-8480")
    push(store, "vm", 1)
    import_history(store, "vm", 2, key="intel-xeon-8480")
    assert filed(store) == {"vm": [session_name("vm", 0), session_name("vm", 2)], MACHINE: [session_name("vm", 1)]}


def stored_as_an_older_hwregress_did(store: Store, results: dict[str, Any]) -> None:
    """The rows of ``results`` inserted as they are, without the push's choice of host."""
    rows = session_rows(results)
    with store.engine.begin() as connection:
        connection.execute(insert(hosts).values(**rows.host))
        connection.execute(insert(sessions).values(**rows.session, pushed_at=dt.datetime.now(dt.timezone.utc)))


def test_a_store_split_before_this_rule_is_one_host_after_the_next_session_of_the_machine(store):
    import_history(store, "vm", 0)
    stored_as_an_older_hwregress_did(store, document("vm", 1, MACHINE))
    assert sorted(filed(store)) == sorted([MACHINE, "vm"])
    import_history(store, "vm", 2)
    assert filed(store) == {MACHINE: [session_name("vm", i) for i in range(3)]}


def test_import_then_push_through_the_cli_gives_one_host(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    old = document("vm", 0, None)
    records = [TestRecord.from_json(r) for r in old["records"]]
    HistoryStore(tmp_path / "history").append_session(records, old["meta"]["session"], old["meta"]["started_at"])
    assert main(["store", "import", str(tmp_path / "history"), "--store", url]) == 0
    pushed = tmp_path / "results.json"
    pushed.write_text(json.dumps(document("vm", 1, MACHINE)))
    assert main(["store", "push", str(pushed), "--store", url]) == 0
    store = open_store(url)
    assert filed(store) == {MACHINE: [session_name("vm", 0), session_name("vm", 1)]}
    store.close()


def emptied(store: Store) -> Store:
    with store.engine.begin() as connection:
        for table in (figures, sessions, hosts):
            connection.execute(delete(table))
    return store


def run_steps(store: Store, steps: list[tuple[str, str]]) -> dict[str, str]:
    """Push or import (``steps``: (how, machine id)) session after session of hostname ``vm`` into the emptied
    ``store`` (an import's rows name no machine); returns each session's host id."""
    emptied(store)
    for index, (how, machine) in enumerate(steps):
        (push(store, "vm", index, machine) if how == "push" else import_history(store, "vm", index))
    host_of = {name: host_id for host_id, names in filed(store).items() for name in names}
    assert len(host_of) == len(steps)
    return host_of


@settings(max_examples=20, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(hows=st.lists(st.sampled_from(["push", "import"]), min_size=1, max_size=6))
def test_one_machine_is_one_host_in_any_order_of_pushes_and_imports(store, hows):
    host_of = run_steps(store, [(how, MACHINE) for how in hows])
    assert set(host_of.values()) == ({MACHINE} if "push" in hows else {"vm"})


@settings(max_examples=20, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.tuples(st.sampled_from(["push", "import"]), st.sampled_from([MACHINE, OTHER_MACHINE])),
                      min_size=1, max_size=6))
def test_pushed_sessions_of_two_machines_of_one_hostname_stay_apart_in_any_order(store, steps):
    host_of = run_steps(store, steps)
    names = [session_name("vm", index) for index in range(len(steps))]
    for index, (how, machine) in enumerate(steps):
        if how == "push":  # a pushed session is always under its own machine id
            assert host_of[names[index]] == machine
        elif {m for h, m in steps[:index] if h == "push"} == {MACHINE, OTHER_MACHINE}:
            assert host_of[names[index]] == "vm"  # both machines known by that hostname: which ran it is unknown
    assert set(host_of.values()) <= {MACHINE, OTHER_MACHINE, "vm"}


def test_a_store_exported_and_imported_elsewhere_keeps_each_machines_host(tmp_path):
    source, copy = open_store(f"sqlite:///{tmp_path / 'a.sqlite'}"), open_store(f"sqlite:///{tmp_path / 'b.sqlite'}")
    push(source, "vm", 0)
    push(source, "vm", 1, machine=OTHER_MACHINE)  # a second machine of one hostname
    source.export_history(tmp_path / "exported")
    for key in HistoryStore(tmp_path / "exported").hardware_keys():
        rows = list(HistoryStore(tmp_path / "exported").rows(key, []))
        for name in sorted({row["session"] for row in rows}):
            copy.push_rows(rows_from_history([row for row in rows if row["session"] == name]))
    assert filed(copy) == filed(source) == {MACHINE: [session_name("vm", 0)], OTHER_MACHINE: [session_name("vm", 1)]}
    source.close()
    copy.close()

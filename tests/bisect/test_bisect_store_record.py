"""A bisection kept in the fleet store as it runs (hwregress.bisect.store_record), on a real SQLite file: its row as
it starts, each probe as it ends, its document at the end; a store that cannot be written costs the bisection
nothing (one line, then no more tries); --store none keeps nothing; a bad URL is refused before anything runs."""

from __future__ import annotations

import pytest

from hwregress.bisect.ladders import Ladder
from hwregress.bisect.search import ProbeOutcome, bisect
from hwregress.bisect.sides import Side
from hwregress.bisect.stacks import ProbeSettings
from hwregress.bisect.store_record import StoreRecord
from hwregress.cli.bisect import bisection_json, probe_document, settings_json
from hwregress.store.database import open_store
from hwregress.store.store_errors import NoStoreUrl

IDS = [f"{i:02d}" + "c" * 38 for i in range(5)]


def _search(tmp_path):
    def run(candidate: int, reference: int) -> ProbeOutcome:
        slow = candidate >= 3
        return ProbeOutcome("regression" if slow else "pass", 0.9 if slow else 1.0, pairs=20, seconds=50.0)

    ladder = Ladder("commits", [f"{sha[:12]} commit" for sha in IDS], IDS, IDS.__getitem__)
    settings = ProbeSettings(("-m", "cpu"), 0.05, (20, 40), tmp_path)
    return bisect(len(IDS), run), ladder, settings


def test_a_bisection_is_kept_probe_by_probe_and_reads_back_as_its_document(tmp_path):
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    said: list[str] = []
    found, ladder, settings = _search(tmp_path)
    record = StoreRecord(url, said.append)
    record.start(ladder.kind, ladder.ids, ladder.labels, settings_json(settings))
    probes = [probe_document(IDS[p.candidate], IDS[p.reference], p.side, p.outcome, p.skipped) for p in found.probes]
    record.probe(1, probes[0])
    store = open_store(url, reading=True)
    halfway = store.bisection(record.bisection_id)
    assert halfway["status"] == "running" and len(halfway["probes"]) == 1
    document = {**bisection_json(found, ladder, settings), "id": record.bisection_id}
    record.finish(document)
    kept = store.bisection(record.bisection_id)
    store.close()
    assert kept["culprit"] == IDS[3] and kept["status"] == "culprit" and len(kept["probes"]) == len(found.probes)
    assert kept["probes"][0]["side"] == str(Side.BAD) and said == [f"store: bisection {record.bisection_id} kept in "
                                                                   f"{url}"]


def test_a_store_that_cannot_be_written_costs_the_bisection_nothing_and_says_so_once(tmp_path):
    folder = tmp_path / "a-folder.sqlite"
    folder.mkdir()
    said: list[str] = []
    found, ladder, settings = _search(tmp_path)
    record = StoreRecord(f"sqlite:///{folder}", said.append)
    record.start(ladder.kind, ladder.ids, ladder.labels, settings_json(settings))
    record.probe(1, {"candidate": IDS[4], "reference": IDS[0], "side": "bad", "skipped": None})
    record.finish(bisection_json(found, ladder, settings))
    assert len(said) == 1 and said[0].startswith("store: not kept (") and "bisect.json" in said[0]


def test_store_none_keeps_nothing_and_an_in_memory_store_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    said: list[str] = []
    record = StoreRecord("none", said.append)
    found, ladder, settings = _search(tmp_path)
    record.start(ladder.kind, ladder.ids, ladder.labels, settings_json(settings))
    record.finish(bisection_json(found, ladder, settings))
    assert record.url is None and said == [] and not (tmp_path / "reports").exists()
    with pytest.raises(NoStoreUrl, match="in-memory"):
        StoreRecord("sqlite://")

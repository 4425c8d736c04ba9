"""A bisection's store record written by a process of its own, as ``python -m hwregress bisect`` writes it
(:class:`hwregress.bisect.store_record.StoreRecord`): ``python bisection_writer.py URL DOCUMENT.json`` starts the
bisection, keeps each probe of the document, finishes it, and prints ``id <bisection id>``; any line the record says
(a store that failed) is printed too. For self-tests of bisections written into one store at once."""

from __future__ import annotations

import json
import sys

from hwregress.bisect.store_record import StoreRecord


def main(url: str, path: str) -> None:
    with open(path, encoding="utf-8") as stream:
        document = json.load(stream)
    record = StoreRecord(url, say=lambda line: print(f"said {line}", flush=True))
    record.start(document["kind"], document["candidates"], document["labels"], document["settings"])
    for number, probe in enumerate(document["probes"], start=1):
        record.probe(number, probe)
    record.finish(document)
    print(f"id {record.bisection_id}", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])

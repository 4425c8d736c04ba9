"""A writer process for the fleet store's self-tests: ``python store_writer.py URL RESULTS.json...`` pushes each file
and prints one JSON line per push ({"name", "inserted", "figures"}). With ``--pause``, it stops inside the push's
transaction right after the figures are inserted, prints ``paused`` and waits to be killed (a real process, killed
for real by the test)."""

from __future__ import annotations

import json
import sys
import time

from sqlalchemy import event

from hwregress.store.database import open_store


def main(argv: list[str]) -> None:
    pause = "--pause" in argv
    url, *paths = [arg for arg in argv if arg != "--pause"]
    store = open_store(url)
    if pause:
        @event.listens_for(store.engine, "after_cursor_execute")
        def _stop(connection, cursor, statement, parameters, context, executemany):
            if statement.lstrip().upper().startswith("INSERT INTO FIGURES"):
                print("paused", flush=True)
                time.sleep(3600)
    for path in paths:
        with open(path, encoding="utf-8") as stream:
            results = json.load(stream)
        outcome = store.push(results)
        print(json.dumps({"name": results["meta"]["session"], "inserted": outcome.inserted,
                          "figures": outcome.figures}), flush=True)
    store.close()


if __name__ == "__main__":
    main(sys.argv[1:])

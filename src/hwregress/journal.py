"""The session journal: every finished record appended (fsynced) to a JSON-lines file while the session
runs, so a session that dies hard (segfault, OOM killer, power loss) still leaves its finished results."""

from __future__ import annotations

import json
import os
from pathlib import Path

from hwregress.results import SessionResults, TestRecord


class Journal:
    """An append-only JSON-lines file of records as they finish, flushed and fsynced per line, so a
    session that dies hard (segfault, OOM killer, power) still leaves every finished result on disk.
    The last line for a test id wins; :func:`load_journal` reads it back."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._stream = path.open("a", encoding="utf-8")

    def append(self, record: TestRecord) -> None:
        self._stream.write(json.dumps(record.to_json(), default=str) + "\n")
        self._stream.flush()
        os.fsync(self._stream.fileno())

    def close(self, remove: bool) -> None:
        self._stream.close()
        if remove:
            self.path.unlink(missing_ok=True)


def load_journal(path: str | Path) -> SessionResults:
    """The records of a journal left by an unfinished session (a torn last line is skipped)."""
    records: dict[str, TestRecord] = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            record = TestRecord.from_json(json.loads(line))
        except (json.JSONDecodeError, TypeError):
            continue
        records[record.test_id] = record
    return SessionResults({"hostname": "unknown", "interrupted": True, "journal": str(path)}, list(records.values()))

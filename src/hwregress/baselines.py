"""The baseline store: one versioned JSON file per hardware key, updated under a file lock and replaced
atomically, so concurrent writers (xdist workers) lose no entry and a crash never leaves half a file.

File layout (schema version 1)::

    {"schema_version": 1, "hardware_key": "nvidia-h100-80gb-hbm3", "device_name": "NVIDIA H100 80GB HBM3",
     "entries": {"throughput/resnet50/train/bs64/fp32": {...entry...}, ...}}

An entry holds the test identity, the raw per-round samples of its metric with their summary, the
secondary figures (latency, peak memory, accuracy, speedup), the environment fingerprint, and when and
with which hwregress it was recorded.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock

SCHEMA_VERSION = 1
READABLE_VERSIONS = (1,)
LOCK_TIMEOUT_S = 120.0


class BaselineError(Exception):
    """A baselines file that cannot be trusted: unreadable, corrupt, or of an unknown schema version."""


@dataclass
class BaselineFile:
    """The parsed content of ``baselines/<hardware_key>.json``."""

    hardware_key: str
    device_name: str
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "hardware_key": self.hardware_key,
            "device_name": self.device_name,
            "entries": {key: self.entries[key] for key in sorted(self.entries)},
        }


def parse(text: str, source: str) -> BaselineFile:
    """Parse a baselines file's text.

    Raises:
        BaselineError: not JSON, not the expected layout, or a schema version this hwregress cannot
            read; the message names ``source`` and the fix.
    """
    fix = "restore it from version control or delete it and re-record with --update-baselines"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise BaselineError(f"{source}: not valid JSON ({error}); {fix}") from None
    if not isinstance(data, dict) or "schema_version" not in data:
        raise BaselineError(f"{source}: not a hwregress baselines file (no schema_version); {fix}")
    version = data["schema_version"]
    if version not in READABLE_VERSIONS:
        raise BaselineError(
            f"{source}: schema version {version!r} is not supported (this hwregress reads "
            f"{', '.join(map(str, READABLE_VERSIONS))}); upgrade hwregress or re-record with --update-baselines"
        )
    entries = data.get("entries")
    if not isinstance(entries, dict) or not all(isinstance(v, dict) for v in entries.values()):
        raise BaselineError(f"{source}: 'entries' must map test keys to objects; {fix}")
    return BaselineFile(str(data.get("hardware_key", "")), str(data.get("device_name", "")), entries)


def merge(first: BaselineFile, second: BaselineFile) -> BaselineFile:
    """Union of two files' entries; where both hold a key the entry recorded later wins (ties broken by
    content, so ``merge(a, b) == merge(b, a)``)."""
    entries = dict(first.entries)
    for key, entry in second.entries.items():
        if key not in entries or _newer(entry, entries[key]):
            entries[key] = entry
    return BaselineFile(first.hardware_key or second.hardware_key, first.device_name or second.device_name, entries)


def _newer(candidate: Mapping[str, Any], incumbent: Mapping[str, Any]) -> bool:
    def rank(entry: Mapping[str, Any]) -> tuple[str, str]:
        return str(entry.get("recorded_at", "")), json.dumps(entry, sort_keys=True, default=str)

    return rank(candidate) > rank(incumbent)


class BaselineStore:
    """Baseline files under ``directory``, one per hardware key."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def path_for(self, hardware_key: str) -> Path:
        return self.directory / f"{hardware_key}.json"

    def hardware_keys(self) -> list[str]:
        """Keys of every baselines file present, sorted."""
        return sorted(p.stem for p in self.directory.glob("*.json")) if self.directory.is_dir() else []

    def load(self, hardware_key: str) -> BaselineFile | None:
        """The file for ``hardware_key``, None when there is none.

        Raises:
            BaselineError: the file exists but cannot be trusted (see :func:`parse`).
        """
        path = self.path_for(hardware_key)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as error:
            raise BaselineError(f"{path}: cannot be read ({error}); check its permissions and encoding") from None
        return parse(text, str(path))

    def write_entries(self, hardware_key: str, device_name: str, entries: Mapping[str, dict[str, Any]]) -> Path:
        """Merge ``entries`` into the file of ``hardware_key`` (same keys replaced, others kept).

        Holds ``<file>.lock`` while it re-reads, merges and atomically replaces the file, so concurrent
        writers serialize and none loses another's entries.

        Raises:
            BaselineError: the existing file cannot be trusted; it is left untouched.
            filelock.Timeout: another writer held the lock for more than ``LOCK_TIMEOUT_S``.
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.path_for(hardware_key)
        with FileLock(str(path) + ".lock", timeout=LOCK_TIMEOUT_S):
            current = self.load(hardware_key) or BaselineFile(hardware_key, device_name)
            current.entries.update(entries)
            current.device_name = current.device_name or device_name
            atomic_write_json(path, current.to_json())
        return path


def atomic_write_json(path: Path, data: Any) -> None:
    """Write ``data`` as indented JSON to ``path`` through a temporary file, fsync and ``os.replace``:
    readers see the old or the new file, never a partial one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            json.dump(data, stream, indent=1, sort_keys=False, ensure_ascii=False, allow_nan=False)
            stream.write("\n")
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def entry_key(family: str, model: str, mode: str, batch_size: int, dtype: str) -> str:
    """The identity of a test inside a hardware file, e.g. ``"throughput/resnet50/train/bs64/fp32"``."""
    return f"{family}/{model}/{mode}/bs{batch_size}/{dtype}"


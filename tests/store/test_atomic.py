"""Atomic writes keep the replaced file's mode and links, refuse NaN, write only to a regular file or a new path, and
leave nothing half-written."""

from __future__ import annotations

import os
import re
import stat

import pytest

from hwregress.store.atomic import (
    NotARegularFileError,
    atomic_write_json,
    atomic_write_text,
    read_regular_file,
    replaceable_target,
)


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def umask_022():
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def test_new_file_gets_the_umask_mode_not_0600(tmp_path, umask_022):
    path = tmp_path / "new.json"
    atomic_write_json(path, {"a": 1})
    assert _mode(path) == 0o644
    atomic_write_text(tmp_path / "new.html", "<p>")
    assert _mode(tmp_path / "new.html") == 0o644


@pytest.mark.parametrize("mode", [0o444, 0o640, 0o664])
def test_replaced_file_keeps_its_mode(tmp_path, umask_022, mode):
    path = tmp_path / "kept.json"
    path.write_text("{}")
    path.chmod(mode)
    atomic_write_json(path, {"b": 2})
    assert _mode(path) == mode
    assert path.read_text() == '{\n "b": 2\n}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["kept.json"]  # no temporary left


def test_symlink_stays_a_link_and_its_target_is_updated(tmp_path):
    target = tmp_path / "real" / "results.json"
    target.parent.mkdir()
    target.write_text("old")
    link = tmp_path / "results.json"
    link.symlink_to(target)
    atomic_write_json(link, {"new": True})
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == '{\n "new": true\n}\n'


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_nan_and_infinity_are_refused_naming_file_and_key(tmp_path, value):
    path = tmp_path / "b.json"
    path.write_text("before")
    with pytest.raises(ValueError) as error:
        atomic_write_json(path, {"entries": {"t/x": {"samples": [1.0, value]}}})
    message = str(error.value)
    assert str(path) in message and '["entries"]["t/x"]["samples"][1]' in message
    assert path.read_text() == "before"
    assert [p.name for p in tmp_path.iterdir()] == ["b.json"]


def test_unencodable_text_writes_nothing(tmp_path):
    path = tmp_path / "x.txt"
    path.write_text("before")
    with pytest.raises(ValueError, match=str(path)):
        atomic_write_text(path, "lone surrogate \ud800")
    assert path.read_text() == "before" and len(list(tmp_path.iterdir())) == 1


@pytest.mark.timeout(30)
def test_reads_refuse_folders_devices_and_fifos_without_hanging(tmp_path):
    (tmp_path / "folder.json").mkdir()
    (tmp_path / "zero.json").symlink_to("/dev/zero")
    os.mkfifo(tmp_path / "fifo.json")
    for name in ("folder.json", "zero.json", "fifo.json"):
        with pytest.raises(NotARegularFileError, match="not a regular file"):
            read_regular_file(tmp_path / name)
    (tmp_path / "ok.json").write_bytes(b"\x00\xff")
    assert read_regular_file(tmp_path / "ok.json") == b"\x00\xff"


# -- writes go to a regular file or a new path only --------------------------------------------------------------------
@pytest.mark.timeout(30)
def test_write_refuses_a_fifo_and_a_link_to_it_and_leaves_both(tmp_path):
    fifo = tmp_path / "results.json"
    os.mkfifo(fifo)
    link = tmp_path / "link.json"
    link.symlink_to(fifo)
    for path in (fifo, link):
        with pytest.raises(NotARegularFileError, match=re.escape(f"{path}: is a FIFO")):
            atomic_write_json(path, {"a": 1})
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and os.readlink(link) == str(fifo)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "results.json"]  # no temporary left


def test_write_through_a_link_to_a_character_device_leaves_the_device(tmp_path, character_device):
    link = tmp_path / "report.html"
    link.symlink_to(character_device)
    with pytest.raises(NotARegularFileError) as error:
        atomic_write_text(link, "<p>")
    assert "is a character device" in str(error.value) and "nothing was written" in str(error.value)
    assert link.is_symlink() and stat.S_ISCHR(os.stat(character_device).st_mode)


def test_replaceable_target_is_a_regular_file_or_a_new_path(tmp_path, character_device):
    with pytest.raises(NotARegularFileError, match="is a character device, not a regular file"):
        replaceable_target(character_device)
    with pytest.raises(NotARegularFileError, match="is a folder"):
        replaceable_target(tmp_path)
    regular = tmp_path / "old.json"
    regular.write_text("{}")
    assert replaceable_target(regular) == regular
    assert replaceable_target(tmp_path / "new" / "file.json") == tmp_path / "new" / "file.json"
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "target.json")
    assert replaceable_target(dangling) == tmp_path / "target.json"  # a new file at the link's target

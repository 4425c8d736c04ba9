"""The templates' bytecode cache (hwregress.report.template_cache): a page rendered from cached code is the page
compiled afresh; an entry that cannot be read or written is a miss; no cache where bytecode caches are off."""

from __future__ import annotations

import sys

import jinja2
import pytest
from test_report import META, throughput_record

from hwregress import report
from hwregress.report.template_cache import bytecode_cache
from hwregress.store.results import SessionResults

SETTINGS = {"trim_blocks": True, "autoescaped": ("html", "j2")}
SESSION = SessionResults(META, [throughput_record("resnet18", 8, 100.0), throughput_record("resnet18", 16, 180.0)])


@pytest.fixture(autouse=True)
def writes_bytecode(monkeypatch: pytest.MonkeyPatch) -> None:
    """As a process without PYTHONDONTWRITEBYTECODE (which some CI images set for the self-tests' own process)."""
    monkeypatch.setattr(sys, "dont_write_bytecode", False)


def _page(monkeypatch: pytest.MonkeyPatch, cache: jinja2.BytecodeCache | None) -> tuple[str, int]:
    """The session's page from a new environment with ``cache``, and how many templates it compiled."""
    compiled = []
    compile_template = jinja2.Environment.compile
    monkeypatch.setattr(jinja2.Environment, "compile",
                        lambda env, *args, **kwargs: compiled.append(1) or compile_template(env, *args, **kwargs))
    monkeypatch.setattr(report, "bytecode_cache", lambda settings: cache)
    report._environment.cache_clear()
    try:
        return report.render(SESSION), len(compiled)
    finally:
        report._environment.cache_clear()


def test_a_page_rendered_from_cached_code_is_the_page_compiled_afresh(monkeypatch, tmp_path):
    fresh, compiled = _page(monkeypatch, None)
    cold, compiled_cold = _page(monkeypatch, bytecode_cache(SETTINGS, str(tmp_path)))
    warm, compiled_warm = _page(monkeypatch, bytecode_cache(SETTINGS, str(tmp_path)))
    assert fresh == cold == warm
    assert compiled == compiled_cold > 0 and compiled_warm == 0
    assert len(list(tmp_path.glob("__hwregress_*.cache"))) == compiled


def test_entries_are_kept_apart_by_the_settings_that_shape_the_code(tmp_path):
    other = {**SETTINGS, "trim_blocks": False}
    assert bytecode_cache(SETTINGS, str(tmp_path)).pattern != bytecode_cache(other, str(tmp_path)).pattern


def test_an_entry_that_cannot_be_read_or_written_is_a_miss(monkeypatch, tmp_path):
    cache = bytecode_cache(SETTINGS, str(tmp_path))
    _page(monkeypatch, cache)
    for entry in tmp_path.glob("__hwregress_*.cache"):
        entry.write_bytes(entry.read_bytes()[:40])  # torn: the checksum or the code cut short
    torn, compiled = _page(monkeypatch, cache)
    assert compiled > 0 and torn == _page(monkeypatch, None)[0]
    gone = bytecode_cache(SETTINGS, str(tmp_path / "no-such-folder"))  # every write fails
    assert _page(monkeypatch, gone)[0] == torn


def test_no_cache_where_the_process_writes_no_bytecode(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    assert bytecode_cache(SETTINGS, str(tmp_path)) is None

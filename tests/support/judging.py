"""The judging session's conclusion put onto its record as the plugin does for a test that ends with it, for the
self-tests of :mod:`hwregress.judge.session` that read the record afterwards."""

from __future__ import annotations

from hwregress.judge.session import BenchSession
from hwregress.store.assembly import put_conclusion
from hwregress.store.results import TestRecord


def conclude_onto(session: BenchSession, record: TestRecord, key: str,
                  extra_failures: list[str] | None = None) -> list[str]:
    """Conclude ``record`` against entry ``key`` and put the conclusion on it, its verdict included (what
    :func:`hwregress.plugin.record.finish` settles for a test that ends with its conclusion); returns its failures."""
    conclusion = session.conclude(record, key, extra_failures)
    put_conclusion(record, conclusion)
    record.verdict = conclusion.verdict
    return list(conclusion.failures)

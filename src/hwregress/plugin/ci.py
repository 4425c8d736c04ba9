"""What CI systems read natively: a Markdown job summary (GitHub's ``GITHUB_STEP_SUMMARY``), workflow-command
annotations (``::error title=...::``) and the one-line status of a finished test for the terminal.

Workflow commands: GitHub Actions documentation, "Workflow commands for GitHub Actions" (``::error``, with
``%``, CR and LF escaped as ``%25``, ``%0D``, ``%0A`` in messages, and ``:`` and ``,`` too in properties).
"""

from __future__ import annotations

from collections.abc import Iterable

from hwregress.report.reach_view import reach_summary
from hwregress.store.results import SessionResults, TestRecord
from hwregress.store.verdicts import NOTEWORTHY, Verdict

LETTERS = {
    Verdict.PASS: ".", Verdict.IMPROVEMENT: "+", Verdict.NEW: "n", Verdict.UNSTABLE: "u", Verdict.ENV_CHANGED: "e",
    Verdict.OTHER_HARDWARE: "h", Verdict.REGRESSION: "R", Verdict.INVALID: "I", Verdict.FAILED: "F",
    Verdict.OOM: "o", Verdict.UNSUPPORTED: "s", Verdict.SKIPPED: "s",
}
BAD = frozenset({Verdict.REGRESSION, Verdict.INVALID, Verdict.FAILED})


def figure(record: TestRecord) -> str:
    """The record's headline figure with its unit and ratio, e.g. ``"412 samples/s x0.667 (threshold 5.0%)"``."""
    value = record.throughput if record.throughput is not None else record.accuracy
    if value is None:
        return ""
    text = f"{value:.4g} {record.unit}"
    if record.ratio is not None:
        text += f" x{record.ratio:.3f}"
        if record.threshold is not None:
            text += f" (threshold {record.threshold:.1%})"
    return text


def status_word(record: TestRecord, outcome: str) -> str:
    """The verbose terminal word of a finished test: pytest's outcome word (so logs stay greppable), then the
    verdict, figure and ratio, e.g. ``FAILED (regression 200.5 samples/s x0.500 (threshold 5.0%))``."""
    detail = " ".join(filter(None, [str(record.verdict), figure(record)]))
    return f"{outcome.upper()} ({detail})"


def markdown_summary(results: SessionResults, title: str = "hwregress") -> str:
    """A Markdown summary of a session: verdict counts, what the session would catch (the report's summary line:
    :mod:`hwregress.report.reach_view`), then each regression (and other noteworthy verdict) with its figure, ratio,
    threshold, minimum detectable slowdown and the first sentence of its message. Link-free."""
    counts = ", ".join(f"{count} {verdict}" for verdict, count in results.counts().items()) or "no hardware tests"
    lines = [f"## {title}", "", f"**{counts}**", ""]
    catches = catch_line(results.records)
    if catches:
        lines += [catches, ""]
    noteworthy = sorted((r for r in results.records if r.verdict in NOTEWORTHY),
                        key=lambda r: (r.verdict.rank, r.test_id))
    if noteworthy:
        lines += ["| verdict | test | figure | ratio | threshold | catches ≥ | why |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        lines += [_markdown_row(record) for record in noteworthy]
    moved = [t for t in (results.meta.get("history") or {}).get("trends", []) if t.get("status") in MOVED]
    if moved:
        lines += ["", "### History", "", "| status | test | sessions | what the history shows |",
                  "| --- | --- | --- | --- |"]
        lines += ["| " + " | ".join(_cell(c) for c in (t["status"], f"`{t['test_id'].rsplit('::', 1)[-1]}`",
                                                      str(t.get("sessions", "")), t["summary"][:300])) + " |"
                  for t in moved]
    return "\n".join(lines) + "\n"


MOVED = ("regression", "drift", "improvement")  # history statuses worth a line in the job summary


def catch_line(records: Iterable[TestRecord]) -> str:
    """The report's line of what the session would catch (:meth:`hwregress.report.reach_view.ReachSummary.sentence`);
    empty when no test was judged."""
    summary = reach_summary(list(records))
    return summary.sentence() if summary.judged else ""


def _cell(text: str) -> str:
    return " ".join(text.splitlines()).replace("|", "\\|")


def _markdown_row(record: TestRecord) -> str:
    value = record.throughput if record.throughput is not None else record.accuracy
    cells = [str(record.verdict), f"`{record.test_id.rsplit('::', 1)[-1]}`",
             "" if value is None else f"{value:.4g} {record.unit}",
             "" if record.ratio is None else f"{record.ratio:.3f}",
             "" if record.threshold is None else f"{record.threshold:.1%}",
             _mds_cell(record), _first_sentence(record)]
    return "| " + " | ".join(_cell(cell) for cell in cells) + " |"


def _mds_cell(record: TestRecord) -> str:
    headline = record.headline_reach()
    if headline is None:
        return ""
    return f"{headline.mds:.1%}" if headline.mds is not None else f"none: {headline.why_none}"[:200]


def _first_sentence(record: TestRecord) -> str:
    diagnosis = getattr(record, "diagnosis", None) or []
    text = diagnosis[0] if diagnosis else record.message.split(" | ")[0]
    return text[:200]


def github_annotations(records: Iterable[TestRecord]) -> list[str]:
    """``::error title=...::message`` lines for regressions, invalid and failed records."""
    lines = []
    for record in sorted(records, key=lambda r: r.test_id):
        if record.verdict in BAD:
            title = _escape_property(f"{record.verdict}: {record.test_id.rsplit('::', 1)[-1]}")
            message = _escape_data(" ".join(filter(None, [figure(record), _first_sentence(record)])))
            lines.append(f"::error title={title}::{message}")
    return lines


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")

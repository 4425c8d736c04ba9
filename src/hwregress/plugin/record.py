"""One record per test, built on the worker that ran it.

The ``hwbench`` fixture puts the test's :class:`~hwregress.store.results.TestRecord` in ``item.stash`` as soon as it
knows the test's identity and fills it as the measurement proceeds; what judging it concluded
(:class:`~hwregress.store.judged.Conclusion`) waits beside it in the stash. :func:`finish` (called from the
``pytest_runtest_makereport`` wrapper) settles the verdict, in one place (:func:`settled_verdict`), from that
conclusion and the test's outcome — a structured skip (:class:`HwSkip`) carries its own verdict, a crash becomes
``failed`` — and attaches the record, as plain JSON, to the report as ``report.hwregress_record``. pytest-xdist
carries report attributes to the controller, which only stores what it receives. JUnit XML gets a short set of
properties, never the whole record.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NoReturn

import pytest

from hwregress.store.assembly import put_outcome
from hwregress.store.judged import Conclusion
from hwregress.store.metrics import BY_NAME, METRICS, figures_of
from hwregress.store.results import TestRecord
from hwregress.store.verdicts import Verdict

RECORD_KEY = pytest.StashKey[TestRecord]()
CONCLUSION_KEY = pytest.StashKey[Conclusion]()  # what judging the test concluded (hwbench.settle)
REPORT_ATTRIBUTE = "hwregress_record"
# the record's fields JUnit XML gets: the verdict, the unit, each judged metric's value and its ratio to the baseline
# (store/metrics.py's table: a metric declared there is a property here) and the throughput's threshold
RECORD_PROPERTIES = ("verdict", "unit", *(metric.value for metric in METRICS),
                     *(metric.ratio for metric in METRICS if metric.ratio), "threshold")
# and what the verdict could catch: the headline reach's minimum detectable slowdown, or why it states none
JUNIT_PROPERTIES = (*RECORD_PROPERTIES, "mds", "mds_why_none")
# verdicts a failing test keeps: the judge's own reasons to fail
_FAILING_VERDICTS = (Verdict.REGRESSION, Verdict.INVALID, Verdict.FAILED)


class HwSkip(pytest.skip.Exception):  # type: ignore[misc,name-defined]
    """A skip whose verdict travels with it (``unsupported``, ``oom``) instead of being parsed from its text."""

    def __init__(self, verdict: Verdict, reason: str) -> None:
        super().__init__(msg=reason)  # msg: the record's message (pytest's report names the class before it)
        self.verdict = verdict


def skip_with(verdict: Verdict, reason: str) -> NoReturn:
    """Skip the running test with ``verdict`` (``unsupported``, ``oom``) and ``reason`` (the record's message)."""
    raise HwSkip(verdict, reason)


class HwFail(pytest.fail.Exception):  # type: ignore[misc,name-defined]
    """A failure whose whole text, ``msg``, is the record's message (pytest's report keeps the last line of a long
    one)."""

    def __init__(self, message: str) -> None:
        super().__init__(msg=message, pytrace=False)


def fail_with(message: str) -> NoReturn:
    """Fail the running test with ``message``, its record's message in full (a rank's dumped stack, a compile error's
    first lines), without a traceback."""
    raise HwFail(message)


def is_hardware_test(item: pytest.Item) -> bool:
    """True for a test parametrized over a device that uses ``hwbench`` (the tests of ``bench_tests/``); a test of its
    own with a ``device`` parameter is not one."""
    callspec = getattr(item, "callspec", None)
    return callspec is not None and "device" in callspec.params and "hwbench" in getattr(item, "fixturenames", ())


def record_from_params(item: pytest.Item, family: str | None, view: str | None) -> TestRecord:
    """The record of a test of ``family`` (its records' report ``view``) that ended before ``hwbench`` could build one
    (a skip in a fixture)."""
    params: dict[str, Any] = item.callspec.params  # type: ignore[attr-defined]
    named = {"family": family, "view": view} if family else {}  # else TestRecord's default family and view
    return TestRecord(test_id=item.nodeid, **named, device=params.get("device"),
                      model=params.get("workload") or params.get("members") or params.get("ceiling"),
                      mode=params.get("mode"),
                      batch_size=params.get("batch_size"), dtype=params.get("dtype"))


def finish(item: pytest.Item, call: pytest.CallInfo[None], report: pytest.TestReport, family: str | None,
           view: str | None) -> None:
    """Settle the record's outcome and verdict from ``report`` and attach it (see the module docstring); ``family``:
    the test's (:func:`hwregress.plugin.families.registry.family_of`) and ``view`` its records' report view, for a
    test that ended before it had a record."""
    if not is_hardware_test(item) or not _concludes(report):
        return
    first = RECORD_KEY not in item.stash
    record = item.stash.setdefault(RECORD_KEY, record_from_params(item, family, view))
    conclusion = item.stash.get(CONCLUSION_KEY, None)
    concluded = conclusion.verdict if conclusion is not None else None
    exception = call.excinfo.value if call.excinfo is not None else None
    verdict = None  # a teardown's failure adds to the message of a verdict already settled
    if report.when != "teardown":
        verdict = settled_verdict(report, exception, concluded, Verdict.PASS if first else record.verdict)
    put_outcome(record, report.outcome, verdict, _settled_message(item, report, record.message, exception, concluded),
                None if report.when == "teardown" else report.duration)  # the phase that concluded it, pytest's time
    setattr(report, REPORT_ATTRIBUTE, plain_json(record))
    if report.when != "teardown":
        item.user_properties.extend(junit_properties(record))


def settled_verdict(report: pytest.TestReport, exception: BaseException | None, concluded: Verdict | None,
                    unjudged: Verdict) -> Verdict:
    """The test's verdict, from its outcome (``report``, of its setup or call phase, and the ``exception`` that ended
    it) and what judging it ``concluded`` (None: never judged): a skip is its :class:`HwSkip`'s verdict
    (``unsupported``, ``oom``) or ``skipped``; a failure keeps a failing verdict the judge concluded (``regression``,
    ``invalid``, ``failed``), else is ``failed``; a pass is the concluded verdict, else ``unjudged`` (``pass`` for a
    hardware test that measured nothing of its own)."""
    if report.skipped:
        return exception.verdict if isinstance(exception, HwSkip) else Verdict.SKIPPED
    if report.failed:
        return concluded if concluded in _FAILING_VERDICTS else Verdict.FAILED
    return concluded if concluded is not None else unjudged


def _settled_message(item: pytest.Item, report: pytest.TestReport, message: str, exception: BaseException | None,
                     concluded: Verdict | None) -> str:
    """The record's message once pytest's outcome is known: a teardown's failure added to ``message`` (the judge's
    sentences, or empty); a :class:`HwFail`'s whole text first; a skip's reason where the judge said nothing; a failure
    the judge did not conclude put first, unless ``message`` says it already."""
    if report.when == "teardown":
        return " | ".join(filter(None, [message, f"teardown failed: {failure_reason(item, report)}"]))
    if isinstance(exception, HwFail):
        return " | ".join(filter(None, [exception.msg, message]))
    if isinstance(exception, HwSkip):
        return message or exception.msg
    if report.skipped:
        return message or _short_reason(report)
    if report.failed and concluded not in _FAILING_VERDICTS:
        reason = failure_reason(item, report)
        return " | ".join(filter(None, [reason if reason not in message else "", message]))
    return message


def _concludes(report: pytest.TestReport) -> bool:
    """The call phase, a setup that did not pass, or a teardown that failed after the measurement."""
    return report.when == "call" or (report.when == "setup" and not report.passed) or (
        report.when == "teardown" and report.failed)


def plain_json(record: TestRecord) -> dict[str, Any]:
    """The record with plain JSON types only: xdist's execnet refuses str subclasses (torch's TorchVersion)
    and numpy scalars."""
    return json.loads(json.dumps(record.to_json(), default=str))


def junit_properties(record: TestRecord) -> list[tuple[str, str]]:
    """The short properties JUnit XML gets (:data:`JUNIT_PROPERTIES`): the verdict, the unit, each judged metric's value
    and ratio to its baseline (:data:`hwregress.store.metrics.METRICS`: throughput, latency in ms, peak memory in
    bytes, accuracy, efficiency, speedup; the throughput's and the memory's ratios), the throughput's threshold, and the
    minimum detectable slowdown of the test's headline reach (:meth:`TestRecord.headline_reach`, a fraction) or the
    sentence saying why it has none, then each declared metric's value (``hwregress.declared.<metric>``, in its unit)
    and ratio to its baseline (``hwregress.declared.<metric>.ratio``); a value that is None is left out."""
    headline = record.headline_reach()
    values = {name: getattr(record, name) for name in RECORD_PROPERTIES}
    values.update(mds=headline.mds if headline else None, mds_why_none=headline.why_none if headline else None)
    for figure in figures_of(record):
        if figure.metric not in BY_NAME:  # declared: its value and its ratio to the baseline's
            values.update({f"declared.{figure.metric}": figure.value, f"declared.{figure.metric}.ratio": figure.ratio})
    return [(f"hwregress.{name}", _junit_value(value)) for name, value in values.items() if value is not None]


def _junit_value(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def failure_reason(item: pytest.Item, report: pytest.TestReport) -> str:
    """One line for a failed test's record: where the exception was raised, its type and the first line of its text,
    e.g. ``"probe_bad_models.py:9: RuntimeError: probe: forward exploded"`` (the path relative to the rootdir where it
    lies inside it). pytest's own last traceback line keeps only the type (``probe_bad_models.py:9: RuntimeError``).
    A ``pytest.fail(..., pytrace=False)`` has no traceback worth a place: its last line, as before."""
    crash = getattr(report.longrepr, "reprcrash", None)
    traceback = getattr(report.longrepr, "reprtraceback", None)
    if crash is None or getattr(traceback, "style", None) == "value":
        return _short_reason(report)
    exception = next((line.strip() for line in crash.message.splitlines() if line.strip()), "")
    return f"{_relative_to_root(item, crash.path)}:{crash.lineno}: {exception}"[:500]


def _relative_to_root(item: pytest.Item, path: str) -> str:
    try:
        return str(Path(path).relative_to(item.config.rootpath))
    except ValueError:
        return path


def _short_reason(report: pytest.TestReport) -> str:
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    text = getattr(report, "longreprtext", "") or ""
    return text.strip().splitlines()[-1][:500] if text.strip() else ""

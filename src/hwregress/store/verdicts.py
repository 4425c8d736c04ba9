"""The one vocabulary of verdicts, their order in reports, and which of them fail a test."""

from __future__ import annotations

import enum

try:  # Python >= 3.11
    from enum import StrEnum
except ImportError:  # Python 3.10: the same behaviour, spelled out

    class StrEnum(str, enum.Enum):  # type: ignore[no-redef]
        def __str__(self) -> str:
            return str(self.value)


class Verdict(StrEnum):
    """What one test's record concluded. Worst first: reports sort by this order.

    ``regression``: slower (or bigger, or less accurate) than the baseline beyond the threshold, with
    significance; ``invalid``: a figure no hardware can reach (a measurement defect); ``failed``: the test
    raised or a check failed; ``other-hardware``: the baseline was recorded on a machine of another
    identity; ``env-changed``: the software stack differs from the baseline's; ``unstable``: the window
    stayed noisy; ``oom``: the batch did not fit; ``unsupported``: the device cannot run this dtype or
    mode; ``skipped``: skipped for another reason; ``new``: no baseline yet; ``improvement``: faster
    beyond the threshold; ``pass``: within the threshold.
    """

    REGRESSION = "regression"
    INVALID = "invalid"
    FAILED = "failed"
    OTHER_HARDWARE = "other-hardware"
    ENV_CHANGED = "env-changed"
    UNSTABLE = "unstable"
    OOM = "oom"
    UNSUPPORTED = "unsupported"
    SKIPPED = "skipped"
    NEW = "new"
    IMPROVEMENT = "improvement"
    PASS = "pass"

    @property
    def rank(self) -> int:
        """Sort key: 0 for the worst verdict."""
        return list(Verdict).index(self)


# Verdicts that never become a baseline entry: nothing trustworthy was measured.
NOT_MEASURED = frozenset({Verdict.OOM, Verdict.UNSUPPORTED, Verdict.SKIPPED, Verdict.FAILED, Verdict.INVALID})
# Verdicts worth a line of their own in the terminal and the job summary.
NOTEWORTHY = frozenset({Verdict.REGRESSION, Verdict.INVALID, Verdict.FAILED, Verdict.OTHER_HARDWARE,
                        Verdict.ENV_CHANGED, Verdict.UNSTABLE, Verdict.IMPROVEMENT, Verdict.OOM})


def parse_verdict(value: str) -> Verdict:
    """The verdict named ``value`` (a results file's string).

    Raises:
        ValueError: not a verdict; the message lists the known ones.
    """
    try:
        return Verdict(value)
    except ValueError:
        raise ValueError(f"unknown verdict {value!r}; one of {', '.join(v.value for v in Verdict)}") from None


def verdict_rank(value: str) -> int:
    """Sort key of a verdict string: regressions first, passes last, unknown ones just before passes."""
    try:
        return Verdict(value).rank
    except ValueError:
        return Verdict.PASS.rank - 1

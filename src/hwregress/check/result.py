"""What one check found: :class:`CheckResult`, and the statuses it can have."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

PASS, FAIL, SKIP = "pass", "fail", "skip"
STATUSES = (PASS, FAIL, SKIP)


@dataclass
class CheckResult:
    """One check on one device.

    Attributes:
        name: the check's name, e.g. ``"timer"``.
        device: the device it ran on (``"cuda:0"``, ``"cpu"``).
        status: :data:`PASS`, :data:`FAIL` or :data:`SKIP`.
        compared: what was compared with what, in one sentence.
        figures: the numbers behind the status, by name, with their unit in the name (``"event_ms"``).
        points_to: where a failure points (what to look at or fix); for a skip, why it did not run.
        seconds: wall seconds the check took.
    """

    name: str
    device: str
    status: str
    compared: str
    figures: dict[str, Any] = field(default_factory=dict)
    points_to: str = ""
    seconds: float = 0.0

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"check {self.name}: status {self.status!r} is not one of {', '.join(STATUSES)}")

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def judged(name: str, device: str, ok: bool, compared: str, figures: Mapping[str, Any], points_to: str) -> CheckResult:
    """A passed or failed :class:`CheckResult`: ``points_to`` is kept only for a failure."""
    return CheckResult(name, device, PASS if ok else FAIL, compared, dict(figures), "" if ok else points_to)


def skipped(name: str, device: str, compared: str, why: str) -> CheckResult:
    """A :class:`CheckResult` that did not run here, with the reason."""
    return CheckResult(name, device, SKIP, compared, {}, why)


Check = Callable[[str], CheckResult]  # a check: the device spec in, its result out

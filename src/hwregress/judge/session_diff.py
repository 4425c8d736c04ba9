"""What differs between two sessions' history rows, one line per change: the range to bisect at a change point
(:mod:`hwregress.judge.trends`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hwregress.hardware.facts import identity_changes

TELEMETRY_CHANGE = 0.05  # a window telemetry mean that moved more than this is worth naming at a change
HEALTH_CHANGE = 0.05  # a share of the cores' time (other processes, steal) that moved more than this
MAX_PACKAGE_LINES = 12

PackageLookup = Callable[[str], "list[str] | None"]
"""Package-list hash -> its ``name==version`` lines (:meth:`hwregress.store.history.HistoryStore.packages`), None
when unknown."""


def differences(before: dict[str, Any], after: dict[str, Any], packages: PackageLookup | None = None) -> list[str]:
    """What differs between two sessions' rows: software fingerprint, hwregress version (where both say), packages,
    hardware identity, device name, window telemetry means (beyond ``TELEMETRY_CHANGE``) and CPU health shares (beyond
    ``HEALTH_CHANGE``), one line each, or one line saying nothing recorded changed; then the first likely cause
    the later session's own diagnosis gave, if any."""
    lines = _mapping_changes(before.get("environment") or {}, after.get("environment") or {})
    versions = before.get("hwregress_version"), after.get("hwregress_version")
    if None not in versions and versions[0] != versions[1]:  # unknown (an older journal recovered): no change to name
        lines.append(f"hwregress {versions[0]} -> {versions[1]}")
    lines += _package_changes(before.get("packages"), after.get("packages"), packages)
    lines += identity_changes(before.get("identity") or {}, after.get("identity") or {})
    if before.get("device_name") != after.get("device_name"):
        lines.append(f"device {before.get('device_name')} -> {after.get('device_name')}")
    lines += _telemetry_changes(before.get("telemetry") or {}, after.get("telemetry") or {})
    lines += _health_changes(before.get("health") or {}, after.get("health") or {})
    lines = lines or ["nothing recorded changed (software, packages, hardware identity, telemetry, CPU health): "
                      "look at what hwregress does not see (firmware, BIOS, the code under test)"]
    return lines + [f"diagnosed in the first bad session: {cause}" for cause in after.get("diagnosis") or []][:1]


def _mapping_changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    return [f"{key} {before.get(key)} -> {after.get(key)}" for key in sorted(set(before) | set(after))
            if before.get(key) != after.get(key)]


def _package_changes(before: Any, after: Any, packages: PackageLookup | None) -> list[str]:
    if before == after or not before or not after:
        return []
    old, new = (packages(before), packages(after)) if packages else (None, None)
    if old is None or new is None:
        return [f"installed packages changed (hash {before} -> {after})"]
    old_versions = dict(item.split("==", 1) for item in old if "==" in item)
    new_versions = dict(item.split("==", 1) for item in new if "==" in item)
    lines = [f"{name} {old_versions.get(name, '(absent)')} -> {new_versions.get(name, '(removed)')}"
             for name in sorted(set(old_versions) | set(new_versions), key=str.lower)
             if old_versions.get(name) != new_versions.get(name)]
    if len(lines) > MAX_PACKAGE_LINES:
        lines = [*lines[:MAX_PACKAGE_LINES], f"and {len(lines) - MAX_PACKAGE_LINES} more package changes"]
    return lines


_TELEMETRY_NAMES = {"power_w": ("mean power", "W"), "sm_clock_mhz": ("mean SM clock", "MHz"),
                    "temperature_c": ("mean temperature", "°C"), "cpu_util_pct": ("mean CPU utilization", "%")}


def _telemetry_changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    lines = []
    for key, (name, unit) in _TELEMETRY_NAMES.items():
        old, new = before.get(key), after.get(key)
        if (isinstance(old, (int, float)) and isinstance(new, (int, float)) and old > 0
            and abs(new / old - 1) > TELEMETRY_CHANGE):
            lines.append(f"{name} {old:.4g} -> {new:.4g} {unit}")
    return lines


_HEALTH_NAMES = {"other_cpu_fraction": "other processes' share of the cores", "steal_fraction": "hypervisor steal"}


def _health_changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    lines = []
    for key, name in _HEALTH_NAMES.items():
        old, new = before.get(key), after.get(key)
        if isinstance(old, (int, float)) and isinstance(new, (int, float)) and abs(new - old) > HEALTH_CHANGE:
            lines.append(f"{name} {old:.0%} -> {new:.0%}")
    return lines

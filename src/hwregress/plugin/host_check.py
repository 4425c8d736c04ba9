"""This host against its fleet at the session's end (the fleet store's other hosts of each hardware key measured):
``results.json``'s ``meta.host_check``, a terminal line for a ``defective`` host, and the finding for
``--alert-webhook``. The statistics: :mod:`hwregress.judge.defective`.
The page: docs/fleet-verdicts.md, 'Defective hosts'."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from hwregress.judge.day_one import FleetJudge
from hwregress.judge.defective import DefectiveFinding
from hwregress.plugin.families import registry
from hwregress.store.results import TestRecord


def host_check(fleet: FleetJudge | None, records: Iterable[TestRecord]) -> list[dict[str, Any]]:
    """Each hardware key's finding on this host as ``meta.host_check`` holds it (JSON-able): ``hardware_key``,
    ``host``, ``defective``, ``message``, ``components``, ``models``, ``evidence`` (figure, kind, group, value,
    fleet_value, ratio, threshold, n_hosts), from the records of the families that declare themselves evidence of the
    host (``host_evidence``: the ceilings' roofs and the throughput family's windows); empty without a fleet store."""
    if fleet is None:
        return []
    evidence = [record for record in records if registry.traits(record.family).host_evidence]
    return [_as_json(key, finding) for key, finding in fleet.host_findings(evidence)]


def terminal_lines(checks: list[dict[str, Any]]) -> list[str]:
    """One line per defective host finding."""
    return [f"defective host {check['host']} ({check['hardware_key']}): {check['message']}"[:600]
            for check in checks if check["defective"]]


def alert_findings(checks: list[dict[str, Any]], session: str, time: str, fleet: FleetJudge | None = None,
                   records: Iterable[TestRecord] = ()) -> list[dict[str, Any]]:
    """The defective findings as :func:`hwregress.report.alerts.defective_host_alert` takes them (the worst figure's
    value, fleet value and ratio; every figure's sentence as evidence), each with ``previous``: this host's states
    for the key in its earlier sessions of the store (:meth:`hwregress.judge.day_one.FleetJudge.host_states`, from
    ``fleet``, which knows this host by ``records``, this session's), so that a host that stays defective alerts in
    its first defective session only."""
    records = list(records)
    found = []
    for check in checks:
        if not check["defective"] or not check["evidence"]:
            continue
        worst = check["evidence"][0]
        found.append({"host": check["host"], "hardware_key": check["hardware_key"], "session": session, "time": time,
                      "test_id": worst["figure"], "value": worst["value"], "baseline_median": worst["fleet_value"],
                      "ratio": worst["ratio"], "threshold": worst["threshold"], "summary": check["message"],
                      "evidence": [f"{e['figure']}: {e['ratio']:.3f} x the fleet's {e['fleet_value']:.4g} "
                                   f"({e['n_hosts']} hosts)" for e in check["evidence"]],
                      "previous": fleet.host_states(check["hardware_key"], records, session) if fleet else []})
    return found


def _as_json(key: str, finding: DefectiveFinding) -> dict[str, Any]:
    return {"hardware_key": key, "host": finding.host, "defective": finding.defective, "message": finding.message,
            "components": list(finding.components), "models": list(finding.models),
            "evidence": [{"figure": e.figure, "kind": e.kind, "group": e.group, "value": e.value,
                          "fleet_value": e.fleet_value, "ratio": e.ratio, "threshold": e.threshold,
                          "n_hosts": e.n_hosts} for e in finding.evidence]}

"""The fleet page's content (``python -m hwregress store fleet``): from the fleet store's rows of one hardware key
to a :class:`FleetView`; pure, no database.

Per test, each host's latest median (from the host's most recent session whose figure of the test has a positive,
finite median) over the fleet's median for the test: the median of the hosts the fleet baseline keeps
(:func:`hwregress.judge.fleet.fleet_baseline`; a host it drops is marked an outlier of that test). Peak memory
(lower is better) is judged for outliers on its reciprocal, as docs/fleet-verdicts.md says; its ratio stays
bytes over bytes. Each host also gets its :func:`hwregress.judge.defective.defective_hosts` finding from its
throughput figures: the ceilings' roofs (family ``ceiling``) as micro-figures, every other test with a model as a
model test. A figure's hardware key must be the page's (or none): a CPU test in a GPU session is not the GPU's fleet.
The page: docs/store.md, 'The fleet page'.
"""

from __future__ import annotations

import datetime as _dt
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hwregress import __version__
from hwregress.judge.defective import COMPONENTS, DefectiveFinding, defective_hosts
from hwregress.judge.evidence import roof_name
from hwregress.judge.fleet import fleet_baseline
from hwregress.report import _environment
from hwregress.store.fleet_queries import latest_figures
from hwregress.store.legacy_records import derive_legacy_traits
from hwregress.store.metrics import BY_NAME

# the metrics the page shows, and which way is better
METRICS = {name: BY_NAME[name].direction for name in ("throughput", "peak_memory")}


@dataclass(frozen=True)
class HostColumn:
    """One host of the fleet: its id, the hostname of its latest session (``label``), how many sessions of the
    key it has, when its latest started, and its defective-host finding (None: it has no throughput figure)."""

    host_id: str
    label: str
    sessions: int
    latest: _dt.datetime
    finding: DefectiveFinding | None

    @property
    def defective(self) -> bool:
        return self.finding is not None and self.finding.defective


@dataclass(frozen=True)
class FleetCell:
    """One host's latest median of one test: the value (the figure's unit), value / the fleet's median, the
    session it comes from, and whether the fleet baseline dropped this host for this test (``outlier``)."""

    value: float
    ratio: float
    session: str
    started_at: _dt.datetime
    outlier: bool


@dataclass(frozen=True)
class FleetRow:
    """One test of one metric: the fleet's median (the unit; over the kept hosts), the hosts kept and dropped, and
    one cell per host column (None: the host has no usable figure of the test, a gap)."""

    test_id: str
    metric: str
    unit: str
    fleet_median: float
    kept: tuple[str, ...]
    dropped: tuple[str, ...]
    cells: tuple[FleetCell | None, ...]


@dataclass(frozen=True)
class SessionLine:
    """One session of the key as the page lists it (times aware UTC; ``day`` its start's date, ISO)."""

    name: str
    host_id: str
    hostname: str
    branch: str
    sha: str
    started_at: _dt.datetime
    day: str
    finished_at: _dt.datetime | None
    exitstatus: int | None
    interrupted: bool
    ci_build_url: str
    figures: int


@dataclass(frozen=True)
class FleetView:
    """What the page shows of one hardware key: host columns (by label), one row per (metric, test) with
    throughput first, the hosts with a finding below their fleet (defective first), and the sessions (newest
    first) with the hosts and branches the session filter offers."""

    hardware_key: str
    hosts: tuple[HostColumn, ...]
    rows: tuple[FleetRow, ...]
    findings: tuple[DefectiveFinding, ...]
    sessions: tuple[SessionLine, ...]
    branches: tuple[str, ...]

    def label_of(self, host_id: str) -> str:
        """The label of a host (its latest hostname), else the id itself."""
        return next((host.label for host in self.hosts if host.host_id == host_id), host_id)

    def rows_of(self, metric: str) -> list[FleetRow]:
        """The rows of one metric (``throughput``, ``peak_memory``), by test id."""
        return [row for row in self.rows if row.metric == metric]


def hardware_keys(sessions: Iterable[Mapping[str, Any]]) -> list[str]:
    """The hardware keys the sessions are filed under, sorted (a session with none is left out)."""
    return sorted({s["hardware_key"] for s in sessions if s.get("hardware_key")})


def build_fleet_view(hardware_key: str, sessions: Sequence[Mapping[str, Any]],
                     figures: Iterable[Mapping[str, Any]]) -> FleetView:
    """The fleet page of ``hardware_key`` from ``sessions`` rows (:meth:`hwregress.store.fleet_store.Store.sessions`;
    those of other keys are ignored) and ``figures`` rows (:meth:`~hwregress.store.fleet_store.Store.figures`;
    those of other sessions or keys, metrics the page does not show and medians that are not positive finite
    numbers are ignored). Every ratio of the view is finite.

    Raises:
        ValueError: no session of ``hardware_key`` (the message lists the keys there are).
    """
    own = sorted((s for s in sessions if s.get("hardware_key") == hardware_key),
                 key=lambda s: (s["started_at"], s["name"]))
    if not own:
        raise ValueError(f"no session of hardware key {hardware_key!r}; keys: "
                         f"{', '.join(hardware_keys(sessions)) or 'none'}")
    by_id = {s["id"]: s for s in own}
    latest = latest_figures(by_id, [f for f in figures if f.get("hardware_key") in (hardware_key, None)], METRICS)
    host_ids = sorted({s["host_id"] for s in own}, key=lambda h: (_label(own, h), h))
    findings = _findings(latest)
    hosts = tuple(HostColumn(h, _label(own, h), sum(s["host_id"] == h for s in own),
                             max(s["started_at"] for s in own if s["host_id"] == h), findings.get(h))
                  for h in host_ids)
    rows = tuple(_row(test_id, metric, latest[(metric, test_id)], host_ids)
                 for metric in METRICS for test_id in sorted({t for m, t in latest if m == metric}))
    counts: dict[str, int] = {}
    for row in figures:
        counts[row["session_id"]] = counts.get(row["session_id"], 0) + 1
    shown = tuple(sorted((f for f in findings.values() if f.evidence), key=lambda f: (not f.defective, f.host)))
    lines = tuple(_session_line(s, counts.get(s["id"], 0)) for s in reversed(own))
    return FleetView(hardware_key, hosts, rows, shown, lines, tuple(sorted({line.branch for line in lines})))


def _label(sessions: Sequence[Mapping[str, Any]], host_id: str) -> str:
    return next((s["hostname"] for s in reversed(sessions) if s["host_id"] == host_id and s.get("hostname")), host_id)


def _row(test_id: str, metric: str, by_host: Mapping[str, tuple[Mapping[str, Any], Mapping[str, Any]]],
         host_ids: Sequence[str]) -> FleetRow:
    values = {host: float(figure["median"]) for host, (figure, _) in by_host.items()}
    judged = values if METRICS[metric] == "higher" else {host: 1 / value for host, value in values.items()}
    baseline = fleet_baseline(judged, test_id)
    median = statistics.median(values[host] for host in baseline.kept)
    cells = []
    for host in host_ids:
        if host not in by_host:
            cells.append(None)
            continue
        session = by_host[host][1]
        ratio = values[host] / median
        cells.append(FleetCell(values[host], ratio, session["name"], session["started_at"], host in baseline.dropped)
                     if math.isfinite(ratio) else None)
    unit = next((str(f["unit"]) for f, _ in by_host.values() if f.get("unit")), "")
    return FleetRow(test_id, metric, unit, median, baseline.kept, baseline.dropped, tuple(cells))


def _findings(latest: Mapping[tuple[str, str], Mapping[str, tuple[Mapping[str, Any], Mapping[str, Any]]]]
              ) -> dict[str, DefectiveFinding]:
    micro: dict[str, dict[str, float]] = {}
    models: dict[str, dict[str, float]] = {}
    names: dict[str, str] = {}
    for (metric, test_id), by_host in latest.items():
        if metric != "throughput":
            continue
        for host, (figure, _) in by_host.items():
            measures_roof = _measures_roof(figure)
            if measures_roof and str(figure.get("model")) in COMPONENTS:
                roof = roof_name(figure["model"], figure.get("dtype"), figure.get("unit"))
                micro.setdefault(host, {})[roof] = float(figure["median"])
            elif not measures_roof and figure.get("model"):
                models.setdefault(host, {})[test_id] = float(figure["median"])
                names[test_id] = str(figure["model"])
    return defective_hosts(micro, models, names)


def _measures_roof(figure: Mapping[str, Any]) -> bool:
    """Whether a fleet store's figure row is a device roof: its rows keep no family traits (a format of before
    results.json's version 6), so they read it as an old record does, from the family
    (:func:`hwregress.store.legacy_records.derive_legacy_traits`)."""
    return bool(derive_legacy_traits({"family": figure.get("family"), "mode": figure.get("mode")})["measures_roof"])


def _session_line(session: Mapping[str, Any], figures: int) -> SessionLine:
    started = session["started_at"]
    return SessionLine(session["name"], session["host_id"], session.get("hostname") or session["host_id"],
                       session.get("git_branch") or "", session.get("git_sha") or "", started,
                       started.date().isoformat(), session.get("finished_at"), session.get("exitstatus"),
                       bool(session.get("interrupted")), session.get("ci_build_url") or "", figures)


def render_fleet(views: Sequence[FleetView], source: str, generated_at: str | None = None) -> str:
    """The fleet page as HTML text: one section per view (hardware key), self-contained (inline CSS and script).

    Args:
        views: the keys' views (:func:`build_fleet_view`).
        source: where the rows came from (the store's URL, password masked), named on the page.
        generated_at: when the page was made (default: now, UTC, ISO 8601).
    """
    return _environment().get_template("fleet.html.j2").render(
        views=list(views), source=source, metrics=METRICS, version=__version__,
        generated_at=generated_at or _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))

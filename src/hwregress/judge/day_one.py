"""Day-one verdicts in a session: a test with no baseline entry of its own, on a hardware key whose other hosts the
fleet store knows, is judged against that key's fleet (:mod:`hwregress.judge.fleet`) instead of passing as ``new``;
and, at the session's end, the host itself against the fleet: ``defective`` when two independent micro-figures or two
models fall below it (:mod:`hwregress.judge.defective`). A hardware key the store has never seen gets a provisional
expectation from the nearest known key instead (:mod:`hwregress.judge.prediction`): the test stays ``new``, its
message says whether it is "below prediction".

The store is read once per process and hardware key (:class:`hwregress.store.fleet_queries.FleetReader`: the sessions
once, each key's figures once); the host under test is left out of its own fleet, and its earlier sessions' host
checks say whether a defective finding is its first (:meth:`FleetJudge.host_states`). A store that cannot be read
leaves the tests ``new`` and says so in their message. The page: docs/fleet-verdicts.md, 'A new host against the fleet'.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from hwregress.judge.defective import COMPONENTS, DefectiveFinding, host_finding
from hwregress.judge.evidence import ceiling_name
from hwregress.judge.fleet import (
    MIN_THRESHOLD,
    FleetBaseline,
    FleetMemoryCeiling,
    FleetVerdict,
    fleet_baseline,
    fleet_memory_ceiling,
    judge_against_fleet,
)
from hwregress.judge.prediction import (
    ProvisionalExpectation,
    judge_provisional,
    nearest_known_key,
    provisional_expectation,
)
from hwregress.store.results import TestRecord
from hwregress.store.store_errors import StoreUnavailable

Medians = Mapping[str, Mapping[str, float]]  # test id -> host id -> the host's latest median
# hardware key -> its hosts' latest medians; raises StoreUnavailable when the store cannot be read
MediansLoader = Callable[[str], Medians]
KeysLoader = Callable[[], Iterable[str]]  # the hardware keys the store knows; raises StoreUnavailable
# host id -> the hostnames and machine ids its sessions recorded; raises StoreUnavailable
NamesLoader = Callable[[], Mapping[str, Iterable[str]]]
# the store's sessions, oldest first, each with its name, host_id and host_check (meta.host_check's entries, [] when
# none: :func:`hwregress.store.fleet_queries.judged_sessions`); raises StoreUnavailable
SessionsLoader = Callable[[], Sequence[Mapping[str, Any]]]


class FleetJudge:
    """The fleets of the hardware keys this process measures, read once per key, and a record judged against its
    fleet. ``machine`` names this host as the store does: ``machine_id`` and ``hostname`` (a GPU host is also known by
    the UUID of the record's GPU). ``sessions`` gives the host's earlier checks (:meth:`host_states`)."""

    def __init__(self, load: MediansLoader, machine: Mapping[str, str | None],
                 known_keys: KeysLoader | None = None, host_names: NamesLoader | None = None,
                 sessions: SessionsLoader | None = None, peaks: MediansLoader | None = None) -> None:
        self._loaders = {"throughput": load, **({"peak_memory": peaks} if peaks is not None else {})}
        self._sessions = sessions
        self._known_keys = known_keys
        self._host_names = host_names
        self._keys: list[str] | None = None
        self._own_ids: set[str] | None = None
        self._names = [machine.get("machine_id"), machine.get("hostname")]
        # a host id that is this machine's id or bare hostname is this host (host_identity files a bare hostname's
        # sessions under this machine at its push); another host that recorded this hostname is this host only when
        # this machine's id is unknown: two machines can share a hostname (containers), never a machine id
        self._machine = {value for value in machine.values() if value}
        self._recorded_as = {machine["machine_id"]} if machine.get("machine_id") else set(self._machine)
        self._fleets: dict[tuple[str, str], Medians | str] = {}  # (metric, hardware key) -> medians or why not
        self._lock = threading.Lock()

    def judge(self, record: TestRecord, min_threshold: float = MIN_THRESHOLD) -> FleetVerdict | str | None:
        """``record``'s throughput against the fleet of its hardware key without this host: a
        :class:`hwregress.judge.fleet.FleetVerdict`; where the store knows no other host of the key with this test, the
        provisional expectation's sentence from the nearest known key, or None; a sentence when the store could not
        be read."""
        if not record.hardware_key or not record.throughput or record.throughput <= 0:
            return None
        fleet = self._fleet(record.hardware_key)
        if isinstance(fleet, str):
            return fleet
        others = {host: median for host, median in (fleet.get(record.test_id) or {}).items()
                  if not self._is_this_host(host, record)}
        if not others:  # a key no other host has measured gets a provisional expectation from the nearest known key
            seen = any(not self._is_this_host(host, record) for hosts in fleet.values() for host in hosts)
            return None if seen else self._prediction(record)
        return judge_against_fleet(record.throughput, fleet_baseline(others, record.test_id), min_threshold)

    def _prediction(self, record: TestRecord) -> str | None:
        """The provisional expectation's sentence for a test of a hardware key the store has never seen."""
        if self._known_keys is None or not record.hardware_key or not record.dtype:
            return None
        with self._lock:
            if self._keys is None:
                try:
                    self._keys = sorted(self._known_keys())
                except StoreUnavailable:
                    self._keys = []
        keys = [k for k in self._keys if k != record.hardware_key]
        known = nearest_known_key(record.hardware_key, keys)
        hosts = self._fleet(known) if known else None
        values = sorted((hosts.get(record.test_id) or {}).values()) if isinstance(hosts, Mapping) else []
        if not known or not values:
            return None
        roof = ceiling_name(record) if record.measures_roof else None
        expectation = provisional_expectation(record.test_id, values[len(values) // 2], known, record.hardware_key,
                                              str(record.dtype), record.arithmetic_intensity, roof=roof)
        if not isinstance(expectation, ProvisionalExpectation):
            return f"no provisional expectation: {expectation.reason}"
        return judge_provisional(float(record.throughput), expectation).message

    def host_findings(self, records: Iterable[TestRecord]) -> list[tuple[str, DefectiveFinding]]:
        """This host against the fleet of each hardware key among ``records`` (this session's, judged, of the families
        that are evidence of a host: the caller picks them): its roofs (``measures_roof``, by roof name,
        :func:`hwregress.judge.evidence.ceiling_name`) and its models' windows against the other hosts' latest medians
        of the same tests. ``(hardware key, finding)`` for each key with a fleet to compare with; a key whose store
        cannot be read is left out."""
        by_key: dict[str, list[TestRecord]] = {}
        for record in records:
            if record.hardware_key and record.throughput and record.throughput > 0:
                by_key.setdefault(record.hardware_key, []).append(record)
        findings = []
        for key, measured in sorted(by_key.items()):
            fleet = self._fleet(key)
            if isinstance(fleet, str):
                continue
            finding = self._finding(measured, fleet)
            if finding.evidence or finding.defective or any(r.test_id in fleet for r in measured):
                findings.append((key, finding))
        return findings

    def _finding(self, measured: list[TestRecord], fleet: Medians) -> DefectiveFinding:
        micro, models, names = {}, {}, {}
        micro_fleet: dict[str, FleetBaseline] = {}
        model_fleet: dict[str, FleetBaseline] = {}
        for record in measured:
            others = {h: v for h, v in (fleet.get(record.test_id) or {}).items() if not self._is_this_host(h, record)}
            if record.measures_roof and str(record.model) in COMPONENTS:
                roof = ceiling_name(record)
                micro[roof] = float(record.throughput)
                if others:
                    micro_fleet[roof] = fleet_baseline(others, roof)
            elif not record.measures_roof and record.model:
                models[record.test_id], names[record.test_id] = float(record.throughput), str(record.model)
                if others:
                    model_fleet[record.test_id] = fleet_baseline(others, record.test_id)
        return host_finding(self.host_name(measured), micro, micro_fleet, models, model_fleet, names)

    def host_name(self, records: list[TestRecord]) -> str:
        """How this host is named in a finding: its GPUs' UUIDs, else its machine id or hostname."""
        gpus = sorted({str(r.identity["gpu_uuid"]) for r in records if r.identity.get("gpu_uuid")})
        return ",".join(gpus) if gpus else next((name for name in self._names if name), "this host")

    def memory_ceiling(self, record: TestRecord, tolerance: float,
                       slack_bytes: float = 0.0) -> FleetMemoryCeiling | None:
        """The ceiling of ``record``'s peak memory from the other hosts of its hardware key
        (:func:`hwregress.judge.fleet.fleet_memory_ceiling`); None without a peaks loader, a peak, a readable store or
        enough hosts."""
        if "peak_memory" not in self._loaders or not record.hardware_key or not record.peak_memory_bytes:
            return None
        fleet = self._fleet(record.hardware_key, "peak_memory")
        if isinstance(fleet, str):
            return None
        others = {host: peak for host, peak in (fleet.get(record.test_id) or {}).items()
                  if not self._is_this_host(host, record)}
        return fleet_memory_ceiling(others, record.test_id, tolerance, slack_bytes)

    def _fleet(self, hardware_key: str, metric: str = "throughput") -> Medians | str:
        """The hosts' latest medians of ``metric`` (a loader's: throughput, peak_memory) of ``hardware_key``, read
        once; the sentence of a store that could not be read."""
        with self._lock:
            if (metric, hardware_key) not in self._fleets:
                try:
                    self._fleets[metric, hardware_key] = self._loaders[metric](hardware_key)
                except StoreUnavailable as error:
                    self._fleets[metric, hardware_key] = (f"no day-one verdict: the fleet store could not be read "
                                                          f"({error})")
            return self._fleets[metric, hardware_key]

    def host_states(self, hardware_key: str, records: Iterable[TestRecord], session: str) -> list[str]:
        """This host's state for ``hardware_key`` in each of its earlier sessions in the store, oldest first:
        ``"defective"`` or ``"healthy"`` as that session's host check (``meta.host_check``) found it, for
        :func:`hwregress.report.alerts.is_first_bad`. A session that checked nothing of the key says nothing and is
        left out, as is ``session`` (this one, by name). This host: as for its fleet, its machine id, hostname or the
        GPU UUIDs of ``records`` (this session's). Empty without a store or when it cannot be read."""
        gpus = {str(r.identity["gpu_uuid"]) for r in records if r.hardware_key == hardware_key
                and r.identity.get("gpu_uuid")}
        with self._lock:
            try:
                earlier = list(self._sessions()) if self._sessions is not None else []
            except StoreUnavailable:
                earlier = []
        states = []
        for row in earlier:
            if row.get("name") == session or not self._known_as_this_host(str(row.get("host_id")), gpus):
                continue
            checks = [c for c in row.get("host_check") or [] if isinstance(c, Mapping)
                      and c.get("hardware_key") == hardware_key]
            if checks:
                states.append("defective" if any(bool(c.get("defective")) for c in checks) else "healthy")
        return states

    def _is_this_host(self, host_id: str, record: TestRecord) -> bool:
        gpu = record.identity.get("gpu_uuid")
        return self._known_as_this_host(host_id, {str(gpu)} if gpu else set())

    def _known_as_this_host(self, host_id: str, gpus: set[str]) -> bool:
        return (host_id in self._machine or bool(gpus.intersection(host_id.split(",")))
                or host_id in self._ids_of_this_machine())

    def _ids_of_this_machine(self) -> set[str]:
        """The store's host ids whose sessions recorded this machine's id (its hostname where its id is unknown; a GPU
        host's id is its GPUs' UUIDs, which its CPU tests do not carry), read once."""
        with self._lock:
            if self._own_ids is None:
                try:
                    names = self._host_names() if self._host_names is not None else {}
                except StoreUnavailable:
                    names = {}
                self._own_ids = {host for host, known in names.items() if self._recorded_as & set(known)}
            return self._own_ids

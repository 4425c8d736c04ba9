"""Small results.json documents for the fleet store's self-tests (the fields a push reads)."""

from __future__ import annotations

import copy
from typing import Any


def results_document(name: str, tests: int = 3, hostname: str = "runner-1", started: str = "2026-11-27T01:22:15+00:00",
                     gpu_uuid: str | None = None) -> dict[str, Any]:
    """A session ``name`` of ``tests`` throughput tests, each with samples and a peak memory (two figures each)."""
    identity = {"gpu_uuid": gpu_uuid} if gpu_uuid else {"cpu_brand": "AMD EPYC"}
    records = [{"test_id": f"bench_tests/test_models.py::test_throughput[cpu-resnet18-train-bs{index}]",
                "family": "throughput", "hardware_key": "amd-epyc-f26m2-2t", "device": "cpu", "model": "resnet18",
                "mode": "train", "batch_size": index + 1, "dtype": "fp32", "unit": "samples/s",
                "throughput": 10.0 + index, "samples": [9.5 + index, 10.0 + index, 10.5 + index],
                "peak_memory_bytes": 1_000_000 * (index + 1), "verdict": "pass", "ratio": 1.01, "threshold": 0.05,
                "identity": identity, "environment": {"torch": "2.13.0+cpu"}}
               for index in range(tests)]
    return {"schema_version": 5, "records": records,
            "meta": {"session": name, "hostname": hostname, "started_at": started,
                     "finished_at": "2026-11-27T01:30:00+00:00", "exitstatus": 0, "interrupted": False,
                     "ci": {"commit": "abc123", "branch": "main", "build": "https://ci.example.org/1"}}}


def scale_speed(results: dict[str, Any], speed: float) -> dict[str, Any]:
    """``results`` with every record's throughput and samples multiplied by ``speed`` (in place; returned)."""
    for record in results["records"]:
        record["throughput"] *= speed
        record["samples"] = [value * speed for value in record["samples"]]
    return results


def push_as_other_hosts(store: Any, results: dict[str, Any],
                        speeds: tuple[float, ...] = (0.98, 1.0, 1.01, 1.03)) -> None:
    """Push a real session's ``results`` into ``store`` once per speed as another host (``other-<i>``, its own machine
    id), its throughputs and samples scaled by that speed: a fleet around this machine."""
    for index, speed in enumerate(speeds):
        other = copy.deepcopy(results)
        other["meta"].update(session=f"other-{index}", machine_id=f"{index:032x}", hostname=f"other-{index}")
        store.push(scale_speed(other, speed))

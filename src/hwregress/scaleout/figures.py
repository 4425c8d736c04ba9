"""A job's figures from what its ranks reported (``{"ranks": [...]}``, see :func:`hwregress.scaleout.launch.run_job`):
the scaling job's global throughput per round and efficiency, the co-located group's interference, the all-reduce
curve. Pure functions: the pytest side puts them in records."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from hwregress.summary import summarize


def global_throughput_samples(ranks: Sequence[dict[str, Any]]) -> list[float]:
    """Per timed round, the job's throughput: W x work per step x steps per round / the slowest rank's round time
    (units of work per second; DDP's all-reduce makes every step wait for the slowest rank).

    Raises:
        ValueError: no ranks, or ranks that timed different numbers of rounds or steps (they agree by design: a
            mismatch is a defect).
    """
    if not ranks:
        raise ValueError("a job without ranks has no throughput")
    rounds = {len(r["round_seconds"]) for r in ranks}
    steps = {r["steps_per_round"] for r in ranks}
    if len(rounds) != 1 or len(steps) != 1:
        raise ValueError(f"the ranks timed different windows (rounds {sorted(rounds)}, steps per "
                         f"round {sorted(steps)})")
    work = sum(r["work_per_step"] for r in ranks) * ranks[0]["steps_per_round"]
    return [work / max(r["round_seconds"][i] for r in ranks) for i in range(rounds.pop())]


def efficiency(throughput: float, world_size: int, reference_throughput: float) -> float:
    """Scaling efficiency ``T(W) / (W x T(1))``: 1 when W ranks do W times the work of one (fraction).

    Raises:
        ValueError: a non-positive world size or reference throughput.
    """
    if world_size < 1 or reference_throughput <= 0:
        raise ValueError(f"efficiency needs W >= 1 and T(1) > 0, got W={world_size}, T(1)={reference_throughput}")
    return throughput / (world_size * reference_throughput)


def scaling_details(ranks: Sequence[dict[str, Any]], nodes: int, backend: str) -> dict[str, Any]:
    """The fields of the record's ``scaling`` sub-record (:class:`hwregress.store.figures.ScalingFigures`) but the
    efficiency (which needs T(1)): world size, nodes, ranks per node, backend, threads per rank, communication share
    (mean over ranks), buckets and bytes all-reduced per step, and one line per rank."""
    shares = [r["comm_share"] for r in ranks if r.get("comm_share") is not None]
    comm_ms = [r["comm_ms_per_step"] for r in ranks if r.get("comm_ms_per_step") is not None]
    return {
        "world_size": len(ranks), "nodes": nodes, "ranks_per_node": len(ranks) // max(1, nodes), "backend": backend,
        "threads_per_rank": ranks[0].get("threads"),
        "comm_share": statistics.fmean(shares) if shares else None,
        "comm_ms_per_step": statistics.fmean(comm_ms) if comm_ms else None,
        "step_ms": statistics.median(s / r["steps_per_round"] * 1000.0 for r in ranks for s in r["round_seconds"]),
        "buckets": ranks[0].get("buckets"), "allreduce_bytes_per_step": ranks[0].get("allreduce_bytes_per_step"),
        "ranks": [{"rank": r["rank"], "node_rank": r.get("node_rank"), "host": r.get("host"), "device": r.get("device"),
                   "median_step_ms": statistics.median(r["round_seconds"]) / r["steps_per_round"] * 1000.0,
                   "peak_memory_bytes": r.get("peak_memory_bytes"), "comm_share": r.get("comm_share")} for r in ranks],
    }


def member_throughput_samples(rank: dict[str, Any]) -> list[float]:
    """One co-located (or solo) process's throughput per round (units of work per second)."""
    return [rank["work_per_step"] * rank["steps_per_round"] / s for s in rank["round_seconds"]]


def colocation_members(together: Sequence[dict[str, Any]], solo: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One line per co-located process: its solo and co-located median throughput, the interference ratio
    (co-located / solo; 1 = unaffected) and both peak memories. ``solo`` maps model name to its solo rank report.

    Raises:
        ValueError: a member without a solo measurement (names it).
    """
    lines = []
    for rank in together:
        if rank["model"] not in solo:
            raise ValueError(f"co-located process {rank['rank']} ran {rank['model']!r}, which has no solo measurement "
                             f"(solo: {', '.join(sorted(solo)) or 'none'})")
        alone = solo[rank["model"]]
        solo_median = summarize(member_throughput_samples(alone)).median
        together_median = summarize(member_throughput_samples(rank)).median
        lines.append({"index": rank["rank"], "model": rank["model"], "solo_throughput": solo_median,
                      "colocated_throughput": together_median, "interference": together_median / solo_median,
                      "peak_memory_bytes": rank.get("peak_memory_bytes"),
                      "solo_peak_memory_bytes": alone.get("peak_memory_bytes"), "unit": rank.get("unit")})
    return lines


def aggregate_samples(together: Sequence[dict[str, Any]]) -> list[float]:
    """The group's throughput per round index: the sum of the processes' throughputs in their i-th rounds, over the
    rounds every process timed (their rounds overlap in time by construction, not to the microsecond)."""
    per_member = [member_throughput_samples(rank) for rank in together]
    rounds = min(len(samples) for samples in per_member)
    return [sum(samples[i] for samples in per_member) for i in range(rounds)]

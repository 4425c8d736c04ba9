"""Estimate how long a tier (``pytest -m gpu --tier NAME --update-baselines``) takes on one H100 or H200, per family.

The cost model lives in :mod:`hwregress.plugin.tier_costs` and each family's ``estimated_cost``; every assumption is a
field of :class:`hwregress.plugin.tier_assumptions.Assumptions` with its source (datasheets, the development VM, the
H200 sessions of 2026-11-26). This script prints the table, checks that the cases it sums are the ones pytest
collects, and re-measures the per-model facts on the machine it runs on. ``scripts/tier_durations.py --compare``
sets the estimate beside measured sessions.

Assumptions in one paragraph: a model step on the GPU takes the longer of its FLOPs at 40% of the published dense
peak (H100/H200 SXM: fp32 67, bf16 989 TFLOP/s) and 15 us of host dispatch and launch per aten operator (3x both for a
training step); a convolutional model's first call of a shape costs cuDNN's search, 73 compute steps, once per
process; a decode step reads every fp32 weight once at 70% of the memory bandwidth or is launch-bound; the host CPU
sustains 0.40 TFLOP/s on fp32 model steps (the speedup's CPU side on the H200's 16-core host); the profiler costs
0.3 s a window plus 85 (infer) or 470 (train) us per forward operator of a profiled step, the FLOP counter 100 us an
operator; the device's start 4.9 s once, transformers' import 1.5 s once, a spawned rank 8 s. Timed windows are the
plan's minimum (10 rounds of >= 0.1 s); a noisy window or an open verdict extends one up to the 30 s budget, which
no estimate here includes.

Usage:
    PYTHONPATH=src:. python scripts/gpu_tier_estimate.py                    # the table, and the check of the cases
    PYTHONPATH=src:. python scripts/gpu_tier_estimate.py --machine nvidia-h200 --tier quick
    PYTHONPATH=src:. python scripts/gpu_tier_estimate.py --machine amd-epyc-f26m2-2t --tier full   # the CPU's tier
    PYTHONPATH=src:. python scripts/gpu_tier_estimate.py --before           # the GPU default before the tiers
    PYTHONPATH=src:. python scripts/gpu_tier_estimate.py --judged           # a nightly session against baselines
    PYTHONPATH=src:. python scripts/gpu_tier_estimate.py --tiers > docs/data/tier_estimates.md   # every tier
    PYTHONPATH=src:. python scripts/gpu_tier_estimate.py --measure llama_1b  # re-measure MODEL_FACTS rows here
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from hwregress.measure.timing import TimingPlan
from hwregress.plugin import matrix, tier_assumptions, tier_estimate, tiers
from hwregress.plugin.families import registry
from hwregress.plugin.matrix import Selection

REPO = Path(__file__).resolve().parents[1]


def collected_ids(tier: str, device: str = "cuda:0") -> Counter[str]:
    """The ids of the GPU tests of ``tier`` pytest collects here on ``device`` (``-m gpu --collect-only``; a machine
    without a GPU collects ``cuda:0``, as a one-GPU runner does)."""
    output = subprocess.run([sys.executable, "-m", "pytest", "bench_tests", "-m", "gpu", "--tier", tier,
                             "--collect-only", "-q", "-p", "no:cacheprovider"], cwd=REPO, capture_output=True,
                            text=True, check=False).stdout
    return Counter(match.group(1) for match in re.finditer(r"\[(" + re.escape(device) + r"-[^\]]*)\]", output))


def check_collection(cases: dict[str, list[dict[str, Any]]], tier: str) -> str:
    """Compare the estimate's cases with pytest's collection of ``tier``; a line saying whether they are the same
    tests."""
    expected = Counter(matrix.case_id(case) for family in cases.values() for case in family)
    collected = collected_ids(tier)
    if expected == collected:
        return f"pytest collects the same {sum(collected.values())} GPU tests the estimate sums."
    missing, extra = expected - collected, collected - expected
    return (f"MISMATCH with pytest's collection: not collected {sorted(missing)[:5]}, not estimated "
            f"{sorted(extra)[:5]}")


def before_tiers_cases() -> dict[str, list[dict[str, Any]]]:
    """The GPU default before the tiers (113 tests): the zoo and the transformers, every mode at the declared or the
    device's batches, the speedup on every image model."""
    from hwregress import workloads

    models = [*workloads.ZOO, "bert_base", "roberta_base", "deit_small", "gpt2", "llama_1b"]
    before = tiers.Tier("before", "the GPU default before the tiers", {"cuda": dict.fromkeys(models)})
    return tier_estimate.selection_cases(Selection(["cuda:0"], tier=before), [f.name for f in registry.BUILT_IN])


def zoo_tier_cases() -> dict[str, list[dict[str, Any]]]:
    """The 77 tests of the zoo-only GPU tier that took 445 s on an H100 with the code of 2026-11-22 or 23 (the day
    ``cudnn.benchmark`` was pinned on, commit a222a03: whether that run searched is not recorded): the torchvision
    zoo's throughput at infer 1/32/256 and train 32/128, its output parity and speedup, the digits test, and the gemm
    (4 dtypes), copy and h2d roofs; in pytest's order."""
    from hwregress import workloads

    zoo, cases = set(workloads.ZOO), before_tiers_cases()
    return {"ceiling": [c for c in cases["ceiling"] if c["ceiling"] in ("gemm", "copy", "h2d")],
            "parity": cases["parity"],
            "output-parity": [c for c in cases["output-parity"] if c["workload"] in zoo],
            "speedup": [c for c in cases["speedup"] if c["workload"] in zoo],
            "throughput": [c for c in cases["throughput"] if c["workload"] in zoo]}


def measure(names: list[str]) -> None:
    """Print MODEL_FACTS rows measured here: parameters on the meta device, aten operators of a batch-1 forward
    (meta device for torchvision; CPU for transformers, whose masks call ``.item()``), the build on the meta device
    and on the CPU (seconds). FLOPs come from the module's table (torchvision: FlopCounterMode on the meta device)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from hwregress import workloads
    from hwregress.workloads import forward, make_batch

    class CountOps(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.count += 1
            return func(*args, **(kwargs or {}))

    for name in names:
        workload = workloads.get(name)
        context = workload.context_for("cuda")
        started = time.perf_counter()
        with torch.device("meta"):
            meta_model = workload.build()
        meta_s = time.perf_counter() - started
        started = time.perf_counter()
        cpu_model = workload.build().eval()
        cpu_s = time.perf_counter() - started
        on_meta = workload.source == "torchvision"
        model, device = (meta_model.eval(), "meta") if on_meta else (cpu_model, "cpu")
        inputs, _ = make_batch(workload, 1, device, seq_len=context)
        with torch.no_grad(), CountOps() as ops:
            forward(model, inputs)
        print(json.dumps({name: {"parameters": sum(p.numel() for p in meta_model.parameters()),
                                 "forward_ops": ops.count, "meta_build_s": round(meta_s, 3),
                                 "cpu_build_s": round(cpu_s, 2)}}), flush=True)
        del cpu_model, meta_model, model


def tiers_table() -> str:
    """Every tier on every machine of :data:`hwregress.plugin.tier_assumptions.PRESETS`, recording and judged at the
    first look, as a Markdown table with the command and the commit that produced it (docs/data/tier_estimates.md)."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                            check=False).stdout.strip() or "unknown"
    lines = ["# Tier estimates", "",
             f"Written by `PYTHONPATH=src:. python scripts/gpu_tier_estimate.py --tiers` at commit {commit}: the tier "
             "estimate (`hwregress.plugin.tier_estimate`) of each tier on each measured machine, windows at their "
             "minimum rounds (a noisy or undecided window extends toward its 30-s budget on top). An estimate, not a "
             "measurement.", "",
             "| tier | machine | tests | recording s | judged s | recording min | judged min |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    judged_plan = TimingPlan(rounds=TimingPlan().judged_rounds)
    for name in tiers.TIERS:
        for key, assumptions in tier_assumptions.PRESETS.items():
            cases = tier_estimate.tier_cases(name, "cuda:0" if assumptions.gpus else "cpu")
            recording = tier_estimate.estimate(cases, assumptions)
            judged = tier_estimate.estimate(cases, assumptions, plan=judged_plan)
            lines.append(f"| {name} | {assumptions.name} (`{key}`) | {recording.tests} | {recording.total_s:.0f} | "
                         f"{judged.total_s:.0f} | {recording.total_s / 60:.1f} | {judged.total_s / 60:.1f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--machine", default="nvidia-h100-80gb-hbm3", choices=sorted(tier_assumptions.PRESETS),
                        help="the hardware key whose assumptions to use (default: the H100; a CPU key estimates the "
                             "tier's CPU tests)")
    parser.add_argument("--tier", default=tiers.DEFAULT_TIER, choices=list(tiers.TIERS), help="the tier to estimate")
    parser.add_argument("--before", action="store_true", help="the GPU default before the tiers (113 tests)")
    parser.add_argument("--tiers", action="store_true",
                        help="every tier on every machine as one Markdown table (docs/data/tier_estimates.md)")
    parser.add_argument("--judged", action="store_true",
                        help="a session judged against baselines (pytest -m gpu): every window decides at its first "
                             "look (--first-look rounds, 5) instead of a recording's --rounds (10)")
    parser.add_argument("--no-check", action="store_true", help="skip comparing the cases with pytest's collection")
    parser.add_argument("--measure", nargs="+", metavar="MODEL", help="re-measure these models' facts on this machine")
    args = parser.parse_args()
    if args.measure:
        measure(args.measure)
        return
    if args.tiers:
        print(tiers_table())
        return
    assumptions = tier_assumptions.PRESETS[args.machine]
    device = "cuda:0" if assumptions.gpus else "cpu"
    cases = before_tiers_cases() if args.before else tier_estimate.tier_cases(args.tier, device)
    plan = TimingPlan(rounds=TimingPlan().judged_rounds) if args.judged else None
    result = tier_estimate.estimate(cases, assumptions, plan=plan, visits=1 if args.before else None)
    session = "judged against baselines, every window clear at its first look" if args.judged else "recording"
    what = "the GPU default before the tiers" if args.before else f"the {args.tier} tier on {device}"
    print(f"Estimated {what}, on {assumptions.name}, {session} (an estimate, not a measurement):\n")
    print(tier_estimate.table(result))
    if not args.no_check and not args.before and device != "cpu":
        print("\n" + check_collection(cases, args.tier))
    if device != "cpu":
        zoo = tier_estimate.estimate(zoo_tier_cases(), dataclasses.replace(
            assumptions, builds_on_device=False, shared_parity_reference=False))
        print(f"Cross-check: the same assumptions put the {zoo.tests}-test zoo-only tier, measured at 445 s on an H100 "
              f"with the code of 2026-11-22 or 23, at {zoo.session_wall_s:.0f} s.")


if __name__ == "__main__":
    main()

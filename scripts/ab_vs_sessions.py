"""The A/B session measured on this machine (issue 29): A/A sessions over the CPU tier (no false regression), one A/A
session under two busy loops, and a real difference between two stacks (B: ``ONEDNN_MAX_CPU_ISA=AVX2``, oneDNN kept
off AVX-512) measured two ways: interleaved in A/B sessions, and as separate plain sessions of each stack compared
afterwards (``report compare``, and the interval two sessions can state given the spread of session medians).

    python scripts/ab_vs_sessions.py run OUT      # ~25 min on the 2-core VM; every session's results.json in OUT/<name>
    python scripts/ab_vs_sessions.py table OUT    # the Markdown of docs/data/ab_<date>.md, to stdout

The sessions run in a fixed interleaved order (A/A, plain A, plain B, A/B, ...) so that a drift of the host over the
run moves every kind alike. The interval of the two-session method is ``exp(log(mB/mA) +- z * sqrt(2) * s)``, with
``s`` the pooled standard deviation of the log session medians of each stack over its repeated plain sessions and
``z`` the normal quantile of the A/B bound's own level: it is the narrowest a two-session comparison could honestly
state with the spread known (the spread of three sessions is only estimated, which would widen it further).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from scipy import stats

REPO = Path(__file__).resolve().parents[1]
SETTING = "ONEDNN_MAX_CPU_ISA=AVX2"
ORDER = ("aa1", "plainA1", "plainB1", "ab1", "aa2", "plainB2", "plainA2", "aa3", "plainA3", "plainB3", "aa-load")
COMMON = ["-p", "no:randomly", "-p", "no:cacheprovider", "-q"]


def session_args(name: str, out: Path) -> tuple[list[str], dict[str, str]]:
    """The pytest arguments and extra environment of session ``name``."""
    report = [f"--report-dir={out / name}"]
    if name.startswith("aa"):
        return ["-m", "cpu", f"--ab-python={sys.executable}", *report], {}
    if name.startswith("ab"):
        return ["-m", "cpu", "--ab-env", SETTING, *report], {}
    empty = out / "empty-baselines"
    empty.mkdir(parents=True, exist_ok=True)
    key, value = SETTING.split("=")
    env = {key: value} if name.startswith("plainB") else {}
    return ["-m", "cpu and throughput", f"--baseline-dir={empty}", "--no-history", *report], env


def run(out: Path) -> None:
    """Run every session of :data:`ORDER` into ``out`` (a session already there is kept)."""
    for name in ORDER:
        if (out / name / "results.json").is_file():
            continue
        args, env = session_args(name, out)
        loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)] \
            if name.endswith("load") else []
        started = time.time()
        try:
            done = subprocess.run([sys.executable, "-m", "pytest", *COMMON, *args], cwd=REPO,
                                  env={**os.environ, **env}, capture_output=True, text=True, check=False)
        finally:
            for loop in loops:
                loop.kill()
        (out / name).mkdir(parents=True, exist_ok=True)
        (out / name / "pytest.log").write_text(done.stdout + done.stderr)
        print(f"{name}: rc {done.returncode} in {time.time() - started:.0f} s; "
              f"{done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ''}", flush=True)


def records(out: Path, name: str) -> dict[str, dict[str, Any]]:
    """Session ``name``'s measured throughput records by test id."""
    data = json.loads((out / name / "results.json").read_text())
    return {r["test_id"]: r for r in data["records"] if r.get("family") == "throughput" and r.get("throughput")}


def short(test_id: str) -> str:
    return test_id.split("[", 1)[1].rstrip("]")


def aa_table(out: Path) -> list[str]:
    lines = ["| session | tests | regression | improvement | pass | unstable | B/A range | widest interval |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name in [n for n in ORDER if n.startswith("aa")]:
        found = [r for r in records(out, name).values() if r.get("ab")]
        verdicts = [r["verdict"] for r in found]
        ratios = [r["ab"]["ratio"] for r in found if r["ab"].get("ratio")]
        widths = [r["ab"]["ratio_high"] - r["ab"]["ratio_low"] for r in found
                  if r["ab"].get("ratio_high") is not None and r["ab"].get("ratio_low") is not None]
        lines.append(f"| {name} | {len(found)} | {verdicts.count('regression')} | {verdicts.count('improvement')} | "
                     f"{verdicts.count('pass')} | {verdicts.count('unstable')} | "
                     f"{min(ratios):.3f}-{max(ratios):.3f} | {max(widths):.3f} |")
    return lines


def two_session_interval(a: list[float], b: list[float], alpha: float) -> tuple[float, float, float]:
    """(ratio, low, high) of B over A from repeated sessions' medians ``a`` and ``b`` (samples/s): the ratio of the
    geometric means and the interval of one two-session comparison at one-sided level ``alpha`` per bound."""
    log_a, log_b = [math.log(v) for v in a], [math.log(v) for v in b]
    pooled = (sum((v - statistics.fmean(log_a)) ** 2 for v in log_a)
              + sum((v - statistics.fmean(log_b)) ** 2 for v in log_b)) / (len(a) + len(b) - 2)
    centre = statistics.fmean(log_b) - statistics.fmean(log_a)
    half = float(stats.norm.ppf(1 - alpha)) * math.sqrt(2 * pooled)
    return math.exp(centre), math.exp(centre - half), math.exp(centre + half)


def difference_table(out: Path) -> list[str]:
    lines = ["| test | A/B: B/A [bounds] (pairs, process pairs, verdict) | two sessions: B/A per repeat | "
             "two sessions: "
             "interval | width two sessions / A/B |", "| --- | --- | --- | --- | --- |"]
    plain_a = [records(out, f"plainA{i}") for i in (1, 2, 3)]
    plain_b = [records(out, f"plainB{i}") for i in (1, 2, 3)]
    ab_session = records(out, "ab1")
    for test in sorted(ab_session):
        ab1 = ab_session[test].get("ab") or {}
        if ab1.get("ratio_low") is None or not all(test in s for s in plain_a + plain_b):
            continue
        a = [s[test]["throughput"] for s in plain_a]
        b = [s[test]["throughput"] for s in plain_b]
        ratio, low, high = two_session_interval(a, b, ab1["alpha"])
        cell = (f"{ab1['ratio']:.3f} [{ab1['ratio_low']:.3f}, {ab1['ratio_high']:.3f}] ({ab1['pairs_kept']}, "
                f"{ab1['units']}, {ab_session[test]['verdict']})")
        repeats = ", ".join(f"{y / x:.3f}" for x, y in zip(a, b, strict=True))
        width_ab = ab1["ratio_high"] - ab1["ratio_low"]
        lines.append(f"| {short(test)} | {cell} | {repeats} | {ratio:.3f} [{low:.3f}, {high:.3f}] | "
                     f"{(high - low) / width_ab:.1f} |")
    return lines


def compare_lines(out: Path) -> list[str]:
    """``report compare plainA1 plainB1``'s verdict line per test, as a user of two sessions would read them."""
    page = out / "compare-A1-B1.html"
    done = subprocess.run([sys.executable, "-m", "hwregress", "report", "compare", "-o", str(page),
                           str(out / "plainA1" / "results.json"), str(out / "plainB1" / "results.json")],
                          cwd=REPO, capture_output=True, text=True, check=False)
    return ["```", *(done.stdout + done.stderr).strip().splitlines(), "```"]


def table(out: Path) -> str:
    parts = ["## A/A sessions (the same interpreter on both sides; aa-load under two busy loops)", "",
             *aa_table(out), "", f"## B = {SETTING} against A, interleaved and as separate sessions", "",
             *difference_table(out), "", "## report compare plainA1 plainB1", "", *compare_lines(out)]
    return "\n".join(parts) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("run", "table"))
    parser.add_argument("out", type=Path)
    options = parser.parse_args()
    if options.command == "run":
        run(options.out)
    else:
        sys.stdout.write(table(options.out))


if __name__ == "__main__":
    main()

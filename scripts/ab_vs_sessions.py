"""The A/B session measured on this machine (issue 29): A/A sessions over the CPU tier (no false regression), and a
real difference between two stacks (B: ``ONEDNN_MAX_CPU_ISA=AVX2``, oneDNN kept off AVX-512) measured two ways:
interleaved in an A/B session, and as one plain session of each stack compared afterwards (``report compare``, and
the interval one session of each can state given how far unchanged sessions move on this machine).

    python scripts/ab_vs_sessions.py run OUT         # every session's results.json in OUT/<name> (an A/A: ~15 min)
    python scripts/ab_vs_sessions.py table OUT --spread BEFORE_AFTER_JSON   # the Markdown, to stdout

The sessions run in a fixed interleaved order (A/A, plain A, plain B, A/B, ...) so that a drift of the host over the
run moves every kind alike. The interval of the two-session method is ``exp(log(mB/mA) +- z * sqrt(2) * s)``: ``s``
the pooled standard deviation of each test's log session median over the unchanged sessions of a
``scripts/before_after.py`` run on this machine, ``z`` the normal quantile of the A/B bound's own level. It is the
narrowest a two-session comparison could honestly state with the spread known.
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
    for name in [n for n in ORDER if n.startswith("aa") and (out / n / "results.json").is_file()]:
        found = [r for r in records(out, name).values() if r.get("ab")]
        verdicts = [r["verdict"] for r in found]
        ratios = [r["ab"]["ratio"] for r in found if r["ab"].get("ratio")]
        widths = [r["ab"]["ratio_high"] - r["ab"]["ratio_low"] for r in found
                  if r["ab"].get("ratio_high") is not None and r["ab"].get("ratio_low") is not None]
        lines.append(f"| {name} | {len(found)} | {verdicts.count('regression')} | {verdicts.count('improvement')} | "
                     f"{verdicts.count('pass')} | {verdicts.count('unstable')} | "
                     f"{min(ratios):.3f}-{max(ratios):.3f} | {max(widths):.3f} |")
    return lines


def session_spread(path: Path) -> dict[str, float]:
    """Per test, the standard deviation of the log session median between unchanged sessions of one stack on this
    machine: from a ``scripts/before_after.py`` run's JSON (its ``aa`` sessions' ratios to their tree's baseline),
    pooled over its trees."""
    data = json.loads(path.read_text())
    logs: dict[str, dict[str, list[float]]] = {}
    for session in data["sessions"]:
        if session["kind"] == "aa":
            for test, record in session["records"].items():
                if record.get("ratio"):
                    logs.setdefault(test, {}).setdefault(session["tree"], []).append(math.log(record["ratio"]))
    spread = {}
    for test, trees in logs.items():
        squares = sum(sum((v - statistics.fmean(values)) ** 2 for v in values) for values in trees.values())
        freedom = sum(len(values) - 1 for values in trees.values())
        if freedom:
            spread[test] = math.sqrt(squares / freedom)
    return spread


def two_session_interval(a: float, b: float, spread: float, alpha: float) -> tuple[float, float, float]:
    """(ratio, low, high) of B over A from one session of each (medians ``a``, ``b``, samples/s) whose log medians
    vary between sessions by ``spread``: ``exp(log(b/a) +- z(1 - alpha) * sqrt(2) * spread)``."""
    half = float(stats.norm.ppf(1 - alpha)) * math.sqrt(2) * spread
    centre = math.log(b / a)
    return math.exp(centre), math.exp(centre - half), math.exp(centre + half)


def difference_table(out: Path, spread_path: Path) -> list[str]:
    lines = ["| test | A/B: B/A [bounds] (pairs, process pairs, verdict) | two sessions: B/A | session spread "
             "(log SD) | "
             "two sessions: interval | width two sessions / A/B |", "| --- | --- | --- | --- | --- | --- |"]
    spread = session_spread(spread_path)
    plain_a, plain_b, ab_session = records(out, "plainA1"), records(out, "plainB1"), records(out, "ab1")
    for test in sorted(ab_session):
        ab = ab_session[test].get("ab") or {}
        if ab.get("ratio_low") is None or test not in plain_a or test not in plain_b or test not in spread:
            continue
        ratio, low, high = two_session_interval(plain_a[test]["throughput"], plain_b[test]["throughput"],
                                                spread[test], ab["alpha"])
        width_ab = ab["ratio_high"] - ab["ratio_low"]
        lines.append(f"| {short(test)} | {ab['ratio']:.3f} [{ab['ratio_low']:.3f}, {ab['ratio_high']:.3f}] "
                     f"({ab['pairs_kept']}, {ab['units']}, {ab_session[test]['verdict']}) | {ratio:.3f} | "
                     f"{spread[test]:.3f} | [{low:.3f}, {high:.3f}] | {(high - low) / width_ab:.1f} |")
    return lines


def compare_lines(out: Path) -> list[str]:
    """``report compare plainA1 plainB1``'s verdict line per test, as a user of two sessions would read them."""
    page = out / "compare-A1-B1.html"
    done = subprocess.run([sys.executable, "-m", "hwregress", "report", "compare", "-o", str(page),
                           str(out / "plainA1" / "results.json"), str(out / "plainB1" / "results.json")],
                          cwd=REPO, capture_output=True, text=True, check=False)
    return ["```", *(done.stdout + done.stderr).strip().splitlines(), "```"]


def table(out: Path, spread_path: Path) -> str:
    parts = ["## A/A sessions (the same interpreter on both sides; aa-load under two busy loops)", "",
             *aa_table(out), "", f"## B = {SETTING} against A, interleaved and as separate sessions", "",
             *difference_table(out, spread_path), "", "## report compare plainA1 plainB1", "", *compare_lines(out)]
    return "\n".join(parts) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("run", "table"))
    parser.add_argument("out", type=Path)
    parser.add_argument("--spread", type=Path, help="table: a scripts/before_after.py run's JSON, whose unchanged "
                        "sessions give each test's spread between sessions")
    options = parser.parse_args()
    if options.command == "run":
        run(options.out)
    else:
        sys.stdout.write(table(options.out, options.spread))


if __name__ == "__main__":
    main()

"""The day-one check of issue 30 on this machine: a fleet built from real sessions of the CPU tier, then a new host
judged against it, once quiet and once under two busy loops.

    python scripts/fleet_check.py OUT [--fleet 4]

1. ``--fleet`` quiet sessions of ``pytest -m cpu`` (recording into ``OUT/recorded``, no store); each session's
   results.json is pushed into ``OUT/fleet.sqlite`` as another host (``fleet-N``: its machine id and hostname
   rewritten, nothing else): real figures of this machine, a fleet of identical hosts;
2. one quiet session judged as a new host (no baselines of its own: ``--baseline-dir OUT/none``, ``--store`` the
   fleet): day-one verdicts and ``meta.host_check`` (expected: not defective);
3. one session under two busy loops (``python -c "while True: pass"`` twice), judged the same way (expected:
   ``defective``, with its evidence).

Prints each judged session's verdicts and host check as Markdown; every results.json stays under OUT.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hwregress.store.database import open_store

PYTEST = [sys.executable, "-m", "pytest", "-m", "cpu", "-p", "no:randomly", "-p", "no:cacheprovider", "-q"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--fleet", type=int, default=4, help="quiet sessions that become the fleet's hosts")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    (out / "none").mkdir(parents=True, exist_ok=True)
    fleet_url = f"sqlite:///{out / 'fleet.sqlite'}"
    for index in range(args.fleet):
        results = _session(out / f"fleet-{index}", "--store=none", f"--baseline-dir={out / 'recorded'}",
                           "--update-baselines")
        _push_as_host(fleet_url, results, index)
    for name, busy in (("new-quiet", 0), ("new-busy", 2)):
        with _busy_loops(busy):
            results = _session(out / name, f"--store={fleet_url}", f"--baseline-dir={out / 'none'}")
        print(_table(name, results))
    return 0


def _session(report_dir: Path, *args: str) -> dict[str, Any]:
    subprocess.run([*PYTEST, f"--report-dir={report_dir}", *args], check=False)
    return json.loads((report_dir / "results.json").read_text())


def _push_as_host(url: str, results: dict[str, Any], index: int) -> None:
    meta = results["meta"]
    meta.update(machine_id=f"{index + 1:032x}", hostname=f"fleet-{index}", session=f"fleet-{index}-{meta['session']}")
    store = open_store(url)
    try:
        store.push(results)
    finally:
        store.close()


@contextmanager
def _busy_loops(count: int) -> Iterator[None]:
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


def _table(name: str, results: dict[str, Any]) -> str:
    lines = [f"### {name}", "", f"verdicts: {dict(Counter(r['verdict'] for r in results['records']))}", "",
             "| test | verdict | ratio | message |", "| --- | --- | --- | --- |"]
    for record in results["records"]:
        if record.get("ratio") is not None:
            message = (record.get("message") or "").replace("|", "/")[:160]
            lines.append(f"| {record['test_id'].split('[')[-1].rstrip(']')} | {record['verdict']} | "
                         f"{record['ratio']:.3f} | {message} |")
    for check in results["meta"].get("host_check", []):
        lines += ["", f"host check ({check['hardware_key']}): defective={check['defective']}: {check['message']}"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())

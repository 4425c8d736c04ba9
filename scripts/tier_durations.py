"""Extract the measured per-test durations of a session's ``results.json`` into a tier durations fixture (the file
the tier estimate's self-test compares with: ``tests/data/tier_durations/``), and print the estimate beside it.

The fixture keeps, per test, its id, family, model, mode, batch, dtype, verdict, ``duration_s`` and its window's
rounds, extended rounds and seconds, and in its header where, when and how the session ran (hardware key, device,
host, software, the pytest command line, the source file) and ``--note`` for what the records do not say.

Usage:
    PYTHONPATH=src:. python scripts/tier_durations.py reports/results.json -o tests/data/tier_durations/x.json \\
        --note "one NVIDIA H200 (141 GB HBM3e, 4.8 TB/s), transformers 5.17"
    PYTHONPATH=src:. python scripts/tier_durations.py --compare tests/data/tier_durations/*.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from hwregress.cli.common import CliError, command_inputs, load_results, output_path, write_output
from hwregress.plugin import tier_assumptions, tier_durations, tier_estimate


def extract(results: str, output: str, note: str) -> None:
    """Write the fixture of ``results`` to ``output``."""
    target = output_path(output, command_inputs([results]))
    fixture = tier_durations.extract(load_results(Path(results)), Path(results).name, note)
    write_output(target, json.dumps(fixture, indent=1) + "\n")
    print(f"wrote {target}: {len(fixture['tests'])} tests, session {fixture['session_s']:.1f} s")


def compare(paths: list[str]) -> None:
    """Print the estimate beside each fixture, per family and for the session."""
    for path in paths:
        measured = tier_durations.load(path)
        assumptions = tier_assumptions.for_hardware(measured.hardware_key)
        result = tier_estimate.estimate(measured.cases(), assumptions, visits=measured.visits_setting)
        print(f"\n{path} ({measured.measured['command']}) on {assumptions.name}:\n")
        print(tier_durations.comparison_table(tier_durations.compare(result, measured)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", help="a results.json (with -o), or fixtures (with --compare)")
    parser.add_argument("-o", "--output", help="the fixture to write")
    parser.add_argument("--note", default="", help="what the records do not say (datasheet figures, versions)")
    parser.add_argument("--compare", action="store_true", help="print the estimate beside each fixture")
    args = parser.parse_args()
    try:
        if args.compare:
            compare(args.files)
        elif args.output and len(args.files) == 1:
            extract(args.files[0], args.output, args.note)
        else:
            parser.error("give one results.json and -o FIXTURE, or fixtures with --compare")
    except (CliError, ValueError, KeyError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

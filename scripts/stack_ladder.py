"""Write a ladder of interpreter wrappers for ``python -m hwregress bisect --stacks``: ``COUNT`` executable scripts in
DIR, each running PYTHON, those from CULPRIT on with SETTINGS in their environment (one step: a thread count, an oneDNN
ISA), those before it with the same keys unset: a probe's stack B inherits stack A's environment (the reference runs
the A/B session), so each wrapper sets or unsets every key the ladder varies. Prints the stacks, comma-separated, for
--stacks.

Usage: python scripts/stack_ladder.py DIR --count 16 --culprit 11 --setting ONEDNN_MAX_CPU_ISA=AVX2 [--python PY]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hwregress.bisect.wrappers import write_wrapper


def write_ladder(folder: Path, count: int, culprit: int, settings: list[str], python: str) -> list[Path]:
    """The wrappers ``folder/py00`` .. ``py<count - 1>`` (:func:`hwregress.bisect.wrappers.write_wrapper`); from
    ``culprit`` on each exports ``settings`` (KEY=VALUE), before it each unsets their keys.

    Raises:
        ValueError: a key that is not an environment variable name.
    """
    sets = dict(setting.split("=", 1) for setting in settings)
    return [write_wrapper(folder / f"py{index:02d}", python, sets if index >= culprit else {}, unsets=list(sets))
            for index in range(count)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--count", type=int, default=16)
    parser.add_argument("--culprit", type=int, required=True)
    parser.add_argument("--setting", action="append", default=[], help="KEY=VALUE of the bad stacks (repeatable)")
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args()
    if not 0 < args.culprit < args.count or not all("=" in setting for setting in args.setting):
        parser.error("give 0 < --culprit < --count and each --setting as KEY=VALUE")
    try:
        stacks = write_ladder(args.folder, args.count, args.culprit, args.setting, args.python)
    except ValueError as error:
        parser.error(f"--setting: {error}")
    print(",".join(str(path) for path in stacks))


if __name__ == "__main__":
    main()

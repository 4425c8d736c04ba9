"""Write a ladder of commits for ``python -m hwregress bisect --repo`` and ``git bisect run``: a git repository of a
small model package, ``ladder_model``, whose workload ``ladder_mlp`` (an MLP of ``--blocks`` Linear+ReLU blocks of
512 features) gets more blocks at commit ``--culprit``: ``ceil(slowdown / BLOCK_SHARE)`` of them, each about 3.1% of
a forward (infer, batch 8, on the 2-core VM: 2 more blocks of 20 measured B/A 0.941 in a bisection's first probe, a
forward 6.3% longer), so a slowdown of 0.10 adds 4 blocks (about 12% longer). Elsewhere a block's share differs: the
endpoints' probe states the real step. Every other commit changes a note only. A ``--broken`` commit adds a file
``BROKEN`` (removed by the next commit), on which the setup command printed below fails: a commit that does not
build.

Prints the first and last commits, the setup command and the pytest selection. Shas are the same on every run (fixed
author, committer and dates).

Usage: python scripts/commit_ladder.py DIR --count 16 --culprit 11 [--slowdown 0.10] [--broken 5]
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
from pathlib import Path

WORKLOAD = "ladder_mlp"
BLOCK_SHARE = 0.031  # of a forward of ladder_mlp infer bs8 on the 2-core VM, per block (module doc)
SELECTION = ("bench_tests/test_throughput.py", "-m", "cpu", "--workloads", "ladder_model.hw", "--models", WORKLOAD,
             "--modes", "infer", "--batch-sizes", "8")
# a setup that fails on a commit with a BROKEN file, else leaves a wrapper with the worktree on PYTHONPATH
SETUP = ("test ! -e {worktree}/BROKEN && printf '#!/bin/sh\\nPYTHONPATH=%s exec %s \"$@\"\\n' {worktree} "
         "\"$LADDER_PYTHON\" > {python} && chmod +x {python}")
_HW = '''"""The ladder's workload: BLOCKS Linear+ReLU blocks of 512 features over 1x32x32 inputs, 10 classes."""

from torch import nn

from hwregress.workloads import Workload, register

from ladder_model import BLOCKS

FEATURES = 512


def build() -> nn.Module:
    """``[N, 1, 32, 32] -> [N, 10]`` logits, random weights."""
    layers = [nn.Flatten(), nn.Linear(32 * 32, FEATURES), nn.ReLU()]
    for _ in range(BLOCKS):
        layers += [nn.Linear(FEATURES, FEATURES), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(FEATURES, 10))


register(Workload(name="{workload}", build=build, input_shape=(1, 32, 32), num_classes=10), replace=True)
'''


def _git(folder: Path, *args: str, when: int = 0) -> str:
    stamp = f"{1_780_000_000 + 60 * when} +0000"
    env = {**os.environ, "GIT_AUTHOR_NAME": "ladder", "GIT_AUTHOR_EMAIL": "ladder@example.com",
           "GIT_COMMITTER_NAME": "ladder", "GIT_COMMITTER_EMAIL": "ladder@example.com", "GIT_AUTHOR_DATE": stamp,
           "GIT_COMMITTER_DATE": stamp}
    return subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def _write_package(folder: Path, blocks: int, note: int) -> None:
    package = folder / "ladder_model"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(f'"""The bisection ladder\'s model package."""\n\nBLOCKS = {blocks}\n'
                                         f"NOTE = {note}  # what changed at this commit\n")
    (package / "hw.py").write_text(_HW.replace("{workload}", WORKLOAD))


def make_ladder(folder: Path, count: int = 16, culprit: int = 11, slowdown: float = 0.10, blocks: int = 20,
                broken: tuple[int, ...] = ()) -> list[str]:
    """A new repository in ``folder`` of ``count`` commits (module doc); returns their shas, oldest first.

    Raises:
        ValueError: a culprit or broken commit outside 1..count-1, a broken culprit, or a folder that is not empty.
    """
    if not 0 < culprit < count or any(not 0 < b < count or b == culprit for b in broken):
        raise ValueError(f"give 0 < culprit < count ({culprit}, {count}) and broken commits in between, not the "
                         f"culprit ({broken})")
    folder.mkdir(parents=True, exist_ok=True)
    if any(folder.iterdir()):
        raise ValueError(f"{folder} is not empty: give a new folder for the ladder")
    _git(folder, "init", "-q", "-b", "main")
    slow_blocks = blocks + math.ceil(slowdown / BLOCK_SHARE - 1e-9)
    shas = []
    for index in range(count):
        _write_package(folder, slow_blocks if index >= culprit else blocks, index)
        (folder / "BROKEN").unlink(missing_ok=True)
        if index in broken:
            (folder / "BROKEN").write_text("this commit does not build\n")
        _git(folder, "add", "-A")
        what = "more blocks" if index == culprit else ("a commit that does not build" if index in broken else "a note")
        _git(folder, "commit", "-q", "-m", f"commit {index:02d}: {what}", when=index)
        shas.append(_git(folder, "rev-parse", "HEAD"))
    return shas


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--count", type=int, default=16)
    parser.add_argument("--culprit", type=int, required=True)
    parser.add_argument("--slowdown", type=float, default=0.10, help="the culprit's slowdown, a fraction (module doc)")
    parser.add_argument("--blocks", type=int, default=20)
    parser.add_argument("--broken", type=int, action="append", default=[], help="a commit that does not build")
    args = parser.parse_args()
    try:
        shas = make_ladder(args.folder, args.count, args.culprit, args.slowdown, args.blocks, tuple(args.broken))
    except ValueError as error:
        parser.error(str(error))
    print(f"good {shas[0]}\nbad {shas[-1]}\nculprit {shas[args.culprit]}")
    print(f"setup (with LADDER_PYTHON set to an interpreter with hwregress): {SETUP}")
    print(f"selection: {' '.join(SELECTION)}")


if __name__ == "__main__":
    main()

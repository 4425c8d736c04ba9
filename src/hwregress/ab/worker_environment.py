"""The environment and command line of a stack's worker process: the session's environment, with this hwregress's
source first on the path, glibc malloc's thresholds fixed, and the stack's own settings on top; ``python -c``
:data:`WORKER_BOOT`. Torch-free."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import hwregress
from hwregress.ab.stacks import Stack


def checkout_root() -> str | None:
    """The folder this hwregress is imported from when it is a source checkout (``<checkout>/src``: an editable
    install or ``PYTHONPATH``), None when it is installed in a ``site-packages`` (which would bring this
    interpreter's other packages, torch among them, onto another interpreter's path)."""
    root = Path(hwregress.__file__).resolve().parent.parent
    return None if root.name in ("site-packages", "dist-packages") else str(root)


# glibc malloc's thresholds, fixed in every worker unless the session or the stack sets them: by default glibc raises
# its mmap threshold as a process frees large blocks, so when a training step's activations stop being mmapped (and
# page-faulted afresh at every step) depends on the process's own allocation history; two workers of one stack then
# differed by up to 8% for the life of the process (resnet18 train bs8 on the 2-core VM, medians of 16 pairs over
# fresh pairs of processes: 0.92, 0.96, 0.99, 1.00, 1.05; with these: 0.99, 1.00, 1.00, 1.01). Setting the threshold
# turns the dynamic adjustment off (glibc's mallopt(3), M_MMAP_THRESHOLD); 32 MiB is its 64-bit maximum.
MALLOC_SETTINGS = {"MALLOC_MMAP_THRESHOLD_": str(32 * 2**20), "MALLOC_TRIM_THRESHOLD_": str(4 * 2**30)}

WORKER_MODULE = "hwregress.ab.worker"
# `python -m WORKER_MODULE` with the garbage collector off while the worker imports: torch's ~340,000 objects are
# traversed again and again as they are created otherwise, an eighth of a worker's imports (2.0 s -> 1.75 s of user
# CPU on the idle 2-core VM, medians of 5); the worker's main() freezes them out of the collector's sight and turns it
# on. Run as __main__ with sys altered, as -m does (the worker's dataclasses look their module up in sys.modules)
# `python -c` puts the working folder ('') first on sys.path, before the stack's own PYTHONPATH: a session run in a
# checkout (bisect-step under git bisect run) would have both stacks import the checkout's modules, whatever each
# stack's path says. The working folder goes last instead: the stack's path first, the folder still a last resort.
WORKING_FOLDER_LAST = "import sys; sys.path.append(sys.path.pop(0)) if sys.path[:1] == [''] else None; "
WORKER_BOOT = (WORKING_FOLDER_LAST + "import gc, runpy; gc.disable(); "
               f"runpy.run_module({WORKER_MODULE!r}, run_name='__main__', alter_sys=True)")


def worker_environment(stack: Stack, base: Mapping[str, str]) -> dict[str, str]:
    """The worker's environment: ``base`` with :data:`MALLOC_SETTINGS` where it sets neither, this hwregress's
    :func:`checkout_root` first on ``PYTHONPATH`` (so a worker runs the same hwregress source as the session), then the
    stack's settings on top (a stack that sets ``PYTHONPATH`` or a malloc setting itself gets exactly its own)."""
    path = [entry for entry in (checkout_root(), base.get("PYTHONPATH", "")) if entry]
    return stack.environment({**MALLOC_SETTINGS, **base, "PYTHONPATH": os.pathsep.join(path)})

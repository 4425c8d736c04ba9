"""Loaded first (``-p selftest_gc``, before the plugin's entry point imports torch) by the self-tests' pytest sessions
in subprocesses, never in the self-tests' own process: otherwise garbage collection takes half of such a session.

The ~360,000 objects of the imports (torch, scipy, torchvision) never become garbage, yet every full collection
traverses them: the automatic ones while they are imported, and the ``gc.collect()`` before each window (three per
test, ~0.2 s each). So the collector stays off until the session starts; then torchvision, which the first window
would import anyway, is imported, everything alive is frozen out of the collector's sight (``gc.freeze``) and the
collector is on again. Its ``-n`` workers, where the self-tests give it a zygote (:data:`ZYGOTE_PYTHON`), are forked
from that zygote instead of each starting a fresh interpreter. The processes the session starts inherit
:data:`FREEZE`: a rank of a distributed test or a Spark Python worker freezes what it has imported when it imports
``selftest_support`` (``--workloads``).
"""

import gc
import os

FREEZE = "HWREGRESS_SELFTEST_FREEZE"
ZYGOTE_PYTHON = "HWREGRESS_SELFTEST_ZYGOTE_PYTHON"  # support.zygote.PYTHON_VARIABLE (that module is not on this path)

gc.disable()
os.environ[FREEZE] = "1"


def pytest_sessionstart(session):
    from hwregress.workloads.registry import import_torchvision

    import_torchvision()
    gc.freeze()
    gc.enable()


def pytest_configure(config):
    """This session's ``-n`` workers forked from the self-test worker's zygote, when it has one (support/zygote.py):
    xdist reads its ``popen`` specs when the session starts, after every plugin's configure."""
    python = os.environ.get(ZYGOTE_PYTHON)
    specs = getattr(config.option, "tx", None)
    if python and specs:
        config.option.tx = [f"popen//python={python}" if spec == "popen" else spec for spec in specs]

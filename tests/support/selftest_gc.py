"""Loaded first (``-p selftest_gc``, before the plugin's entry point imports torch) by the self-tests' pytest sessions
in subprocesses, never in the self-tests' own process: otherwise garbage collection takes half of such a session.

The ~360,000 objects of the imports (torch, scipy, torchvision) never become garbage, yet every full collection
traverses them: the automatic ones while they are imported, and the ``gc.collect()`` before each window (three per
test, ~0.2 s each). So the collector stays off until the session starts; then torchvision, which the first window
would import anyway, is imported, everything alive is frozen out of the collector's sight (``gc.freeze``) and the
collector is on again. The processes the session starts inherit :data:`FREEZE`: a rank of a distributed test or a
Spark Python worker freezes what it has imported when it imports ``selftest_support`` (``--workloads``).
"""

import gc
import os

FREEZE = "HWREGRESS_SELFTEST_FREEZE"

gc.disable()
os.environ[FREEZE] = "1"


def pytest_sessionstart(session):
    from hwregress.workloads.registry import import_torchvision

    import_torchvision()
    gc.freeze()
    gc.enable()

"""Judging: statistics of samples, change points, the comparison of a measurement with its baseline, physical
plausibility, diagnosis with evidence, the health rules, trends over the history, the baseline lifecycle and the
session pipeline that turns a record into a verdict. Pure: it imports neither torch nor pytest (a self-test
checks the whole import graph, lazy imports included); it may import ``store/`` and the torch-free facts of
``hardware/`` (``facts``, ``roofline``, ``health``). This ``__init__`` imports nothing."""

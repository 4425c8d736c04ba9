"""The test families, one module each behind one protocol (:mod:`~hwregress.plugin.families.protocol`) and one
registry (:mod:`~hwregress.plugin.families.registry`), as pytest-xdist keeps its schedulers behind
``xdist/scheduler/protocol.py``: each family owns its cases, its measurement, the sub-record it fills and the name of
its report view. This ``__init__`` imports nothing."""

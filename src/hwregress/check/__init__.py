"""``python -m hwregress check``: does hwregress measure this machine right? An acceptance run for a new runner.

Each module of this room is one check of the measurement itself on the machine at hand (the device timer, the
allocator's peak, the NVML handle, the energy counter, strict fp32, the quantization state, a cold compile, a known
contender, the published peaks, test isolation); :mod:`hwregress.check.runner` runs them and
:mod:`hwregress.check.command` prints the table. This ``__init__`` imports nothing.
"""

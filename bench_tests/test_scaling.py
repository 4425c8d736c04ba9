"""Data-parallel training over world sizes (DistributedDataParallel; NCCL on GPUs, gloo on the CPU), launched with
torch.distributed's elastic launcher: global and per-device throughput, scaling efficiency against W=1 in the same
session, communication share, asserted against this hardware's baseline.

The tests ship in the package (:mod:`hwregress.suite.test_scaling`); this file re-exports them so that the
repository's ``pytest -m cpu`` collects them here, under readable ids."""

from hwregress.suite.test_scaling import test_scaling

__all__ = ["test_scaling"]

"""The A/B options (``--ab-python``, ``--ab-env``, ``--ab-threshold``, ``--ab-looks``, ``--ab-pairs-per-process``,
``--ab-seed``, ``--ab-timeout`` and their ini twins) validated into :class:`ABSettings`: whether this session is an
interleaved A/B of two software stacks (docs/ab.md), the two stacks and how each test's pairs are planned.
Torch-free."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from hwregress.ab.session import DEFAULT_ALPHA, PairPlan
from hwregress.ab.stacks import Stack, stacks_for
from hwregress.plugin.options import list_of, number_of, source_of, value_of

AB_FLAGS = ("--ab-python", "--ab-env")


@dataclass(frozen=True)
class ABSettings:
    """An A/B session's settings.

    Attributes:
        stacks: stack A (this interpreter, the session's environment) and stack B (``--ab-python``, ``--ab-env``).
        threshold: the change of B against A that counts (fraction).
        looks: the planned cumulative pair counts (even, increasing, multiples of ``pairs_per_process``).
        pairs_per_process: pairs each fresh pair of worker processes runs (even).
        seed: the seed of the balanced AB/BA order.
        timeout_s: s, the longest one request to a worker may take.
    """

    stacks: tuple[Stack, Stack]
    threshold: float
    looks: tuple[int, ...]
    pairs_per_process: int
    seed: int
    timeout_s: float

    def plan(self, window_s: float, max_threshold: float) -> PairPlan:
        """One test's plan: steps calibrated to windows of at least ``window_s`` (s), the gross-drop cap
        ``max_threshold`` (fraction), this session's looks, seed and threshold at alpha 0.01."""
        return PairPlan(steps=None, seed=self.seed, threshold=self.threshold, looks=self.looks, alpha=DEFAULT_ALPHA,
                        max_threshold=max(max_threshold, self.threshold), window_s=window_s,
                        pairs_per_process=self.pairs_per_process)

    def meta(self) -> dict[str, Any]:
        """The session's ``meta["ab"]`` in results.json: both stacks as given, the threshold, looks and seed."""
        return {"stacks": {stack.label: {"python": stack.python, "env": dict(stack.env)} for stack in self.stacks},
                "threshold": self.threshold, "looks": list(self.looks), "pairs_per_process": self.pairs_per_process,
                "seed": self.seed}


def ab_settings(config: pytest.Config, update_mode: str | None, nnodes: int) -> ABSettings | None:
    """The A/B settings when ``--ab-python`` or ``--ab-env`` (or an ini twin) is given, else None.

    Raises:
        pytest.UsageError: a bad interpreter, setting, threshold, look or seed (the message names the value, the
            option and the fix); A/B with ``--update-baselines`` (an A/B test judges B against A, not this machine
            against its baseline, so it records nothing) or with ``--nnodes`` above 1.
    """
    python = value_of(config, "hwregress_ab_python")[0]
    env_cli = config.getoption("hwregress_ab_env")
    env = list(env_cli) if env_cli is not None else list(config.getini("hwregress_ab_env"))
    if python is None and not env:
        if value_of(config, "hwregress_ab_python_a")[0] is not None:
            raise pytest.UsageError("--ab-python-a without --ab-python or --ab-env: stack A's interpreter is for an "
                                    "A/B session; give stack B with --ab-python, or drop --ab-python-a")
        return None
    if update_mode is not None:
        raise pytest.UsageError("--update-baselines with --ab-python/--ab-env: an A/B session judges stack B against "
                                "stack A and records no baseline; run the recording as a session of its own")
    if nnodes > 1:
        raise pytest.UsageError(f"--nnodes {nnodes} with --ab-python/--ab-env: an A/B session runs on one node; drop "
                                "--nnodes")
    try:
        python_a = value_of(config, "hwregress_ab_python_a")[0]
        stacks = stacks_for(None if python is None else str(python), env, None if python_a is None else str(python_a))
    except ValueError as error:
        raise pytest.UsageError(str(error)) from None
    per_process = number_of(config, "hwregress_ab_pairs_per_process", int, 2, 100_000)
    return ABSettings(stacks=stacks, threshold=number_of(config, "hwregress_ab_threshold", float, 0.0, 0.99),
                      looks=_looks(config, per_process), pairs_per_process=per_process,
                      seed=number_of(config, "hwregress_ab_seed", int, 0, 2**63 - 1),
                      timeout_s=number_of(config, "hwregress_ab_timeout", float, 1.0, 86_400.0))


def _looks(config: pytest.Config, pairs_per_process: int) -> tuple[int, ...]:
    source = source_of(config, "hwregress_ab_looks")
    entries = list_of(config, "hwregress_ab_looks") or []
    try:
        looks = tuple(int(entry) for entry in entries)
    except ValueError:
        raise pytest.UsageError(f"{source}={','.join(entries)!r}: give whole pair counts, e.g. 10,20,40") from None
    try:
        PairPlan(steps=None, seed=0, threshold=0.0, looks=looks, pairs_per_process=pairs_per_process)
    except ValueError as error:
        raise pytest.UsageError(f"{source}={','.join(entries)!r} with --ab-pairs-per-process {pairs_per_process}: "
                                f"{error}") from None
    return looks

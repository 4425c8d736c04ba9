"""The A/B plan of each probe of a bisection: its threshold and its budget of pairs.

A probe must decide both ways: ``regression`` where the candidate carries the slowdown, and ``pass`` (the ratio's
interval inside the threshold both ways) where it does not. A pass needs more pairs than a regression of the same
size, so a probe's looks go further than a plain A/B test's (:data:`hwregress.ab.session.DEFAULT_LOOKS`, 20 and 40
pairs): 20, 40 and 80 pairs (10, 20 and 40 process pairs), each look at alpha / 3. The threshold is the smallest
slowdown a bisection looks for: 5% by default, half the 10% step the seeded ladders of tests/bisect plant.
"""

from __future__ import annotations

from hwregress.ab.session import PairPlan

DEFAULT_THRESHOLD = 0.05
DEFAULT_LOOKS = (20, 40, 80)


def probe_plan(seed: int, threshold: float = DEFAULT_THRESHOLD, looks: tuple[int, ...] = DEFAULT_LOOKS,
               steps: int | None = None) -> PairPlan:
    """The :class:`hwregress.ab.session.PairPlan` of one probe: ``seed`` for its balanced order (each probe its own),
    ``threshold`` (fraction) and ``looks`` (cumulative pair counts) as the module doc says, ``steps`` per window
    (None: calibrated).

    Raises:
        ValueError: as :class:`hwregress.ab.session.PairPlan` (a threshold outside [0, 1), looks that are not
            increasing even counts).
    """
    return PairPlan(steps=steps, seed=seed, threshold=threshold, looks=looks)

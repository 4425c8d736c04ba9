"""What a verdict could catch: the minimum detectable slowdown (MDS) of a comparison against a baseline.

The throughput verdict (:func:`hwregress.judge.stats.compare`) calls a window a regression when the ratio of medians
lies below ``1 - threshold`` and the one-sided Mann-Whitney test is significant at ``alpha``, or when the ratio lies
below ``1 - cap`` whatever the test says (a gross drop). The MDS is the smallest true slowdown ``s`` (a fraction of
the baseline's throughput: 0.12 means 12% slower) that this rule calls a regression with probability ``power``
(0.9 by default), for the noise the test will see.

The model, in the log of throughput (Kalibera & Jones, "Rigorous benchmarking in reasonable time", ISMM 2013, split
the variance into levels; here two):

    round r of a session:   log x_r = mu + b + w_r,   w_r ~ N(0, sw^2) within the session (the window's own noise)
    a session's level:      b ~ N(0, sb^2), one draw per session (between sessions: it does not shrink with rounds)

with ``sw`` the window's robust relative spread (MAD x 1.4826 / median, :func:`hwregress.judge.stats.robust_spread`)
and ``sb`` the spread of the baseline's session medians since its last level shift (the same figure its history
bound uses; 0 with fewer than 3 sessions, when it is not known). A slowdown ``s`` moves the current session's level
by ``d = -log(1 - s)``. Then, with ``n`` rounds now, ``m`` baseline samples and ``k`` baseline sessions:

    ratio:  D = -log(median ratio) ~ N(d, sb^2 (1 + 1/k) + (pi/2) sw^2 (1/n + 1/m))
            (the current session's level, the baseline's mean level, and two sample medians, whose variance is
            pi/2 times the mean's under normal noise)
    test:   Z ~ N(kn d, 1 + kn^2 sb^2 (1 + 1/k)),  kn = sqrt(12 n m / (n + m + 1)) / sqrt(2 pi (sx^2 + sy^2))
            (the Mann-Whitney statistic standardized under H0, its slope at small shifts for normal samples of
            spreads sx, sy: Pitman efficiency 3/pi against the t-test when they are equal; Lehmann,
            "Nonparametrics", 1975, ch. 2)
    cov(D, Z) = kn sb^2 (1 + 1/k) + rho0 sqrt(pi/2 sw^2 (1/n + 1/m)),  rho0 = sqrt(2/3)
            (the session levels move both; the median difference and the Hodges-Lehmann shift the test's
            statistic follows correlate as sqrt(efficiency(median) / efficiency(HL)) = sqrt((2/pi) / (3/pi)))

    P(regression | d) = P(D > tau, Z > z_alpha) + P(D > c) - P(D > c, Z > z_alpha)
            tau = -log(1 - threshold), c = -log(1 - max(threshold, cap)), z_alpha the normal quantile of 1 - alpha

and the MDS is the ``d`` where this equals ``power``, as ``1 - exp(-d)``. The seeded simulation in
tests/test_reach.py draws sessions from the same model through the real rule (baselines built as sessions record
them) and catches a slowdown equal to the stated MDS in 90% +- 3% of trials.

A window too short for the exact test ever to reach ``alpha`` (its smallest p-value, ``1 / C(n + m, n)``, is above
it: 4 rounds against 4 give 1/70) has no MDS of the significance path: only a drop beyond the cap counts, and
:class:`Reach` says so instead of giving a number.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize
from scipy import stats as scipy_stats

from hwregress.judge.changepoints import since_last_change
from hwregress.judge.stats import MIN_HISTORY, robust_spread

POWER = 0.9
MEDIAN_VARIANCE = math.pi / 2  # var(sample median) / var(sample mean) for normal samples
RHO_MEDIAN_HL = math.sqrt(2.0 / 3.0)  # corr(median difference, Hodges-Lehmann shift) for normal samples
MAX_SHIFT = 5.0  # log units: a 99.3% slowdown; nothing the rule misses beyond it is worth a number


@dataclass(frozen=True)
class Reach:
    """What one comparison could catch.

    Attributes:
        mds: the minimum detectable slowdown, a fraction of the baseline's throughput (0.12: 12% slower), caught
            with probability ``power``; None when the window cannot reach ``alpha`` (``why_none`` says so).
        power: the probability the MDS is defined by.
        alpha: the significance level of the test.
        within: the window's relative spread (MAD x 1.4826 / median).
        between: the baseline's session-to-session relative spread (0 when fewer than 3 sessions).
        rounds: (rounds now, baseline samples).
        why_none: why there is no MDS, or None.
    """

    mds: float | None
    power: float
    alpha: float
    within: float
    between: float
    rounds: tuple[int, int]
    why_none: str | None = None


def smallest_p(n: int, m: int) -> float:
    """The smallest one-sided p-value the exact Mann-Whitney test can give for ``n`` against ``m`` samples (every
    current sample below every baseline one): ``1 / C(n + m, n)``."""
    return math.exp(-(math.lgamma(n + m + 1) - math.lgamma(n + 1) - math.lgamma(m + 1)))


def reach(current: Sequence[float], baseline: Sequence[float], history: Sequence[float], threshold: float,
          cap: float, alpha: float, power: float = POWER) -> Reach:
    """The :class:`Reach` of comparing ``current`` (this window's per-round throughput, higher is better) with
    ``baseline`` (the entry's samples, same unit) whose sessions had the medians ``history``, under the verdict's
    ``threshold`` and ``cap`` (fractions) at ``alpha``.

    Raises:
        ValueError: fewer than 2 samples on a side, or ``power`` / ``alpha`` outside (0, 1).
    """
    if len(current) < 2 or len(baseline) < 2:
        raise ValueError(f"a reach needs >= 2 samples on each side, got {len(current)} and {len(baseline)}")
    recent = since_last_change(history) if history else []
    between = robust_spread(recent) if len(recent) >= MIN_HISTORY else 0.0
    return reach_of(len(current), len(baseline), robust_spread(current), robust_spread(baseline), between,
                    max(len(recent), 1), threshold, cap, alpha, power)


def reach_of(n: int, m: int, within: float, baseline_spread: float, between: float, sessions: int,
             threshold: float, cap: float, alpha: float, power: float = POWER) -> Reach:
    """The :class:`Reach` for ``n`` rounds of relative spread ``within`` against ``m`` baseline samples of relative
    spread ``baseline_spread`` pooled from ``sessions`` sessions whose levels spread by ``between`` (all relative
    standard deviations), under ``threshold`` and ``cap`` (fractions) at ``alpha``; see the module doc.

    Raises:
        ValueError: ``power`` or ``alpha`` outside (0, 1), fewer than 2 rounds on a side, or a negative spread.
    """
    if not (0 < power < 1 and 0 < alpha < 1):
        raise ValueError(f"power and alpha must be in (0, 1), got {power} and {alpha}")
    if n < 2 or m < 2 or min(within, baseline_spread, between) < 0:
        raise ValueError(f"need >= 2 rounds a side and spreads >= 0, got {n}, {m}, {within}, {baseline_spread}, "
                         f"{between}")
    made = Reach(None, power, alpha, within, between, (n, m))
    cap = max(threshold, cap)
    if smallest_p(n, m) >= alpha:
        return _replace(made, why_none=(
            f"{n} rounds against {m} cannot reach p < {alpha:g} (the exact Mann-Whitney test's smallest p is "
            f"1/{round(1 / smallest_p(n, m))}): only a drop beyond the {cap:.0%} cap counts; run more rounds"))
    model = _Model(n, m, within, baseline_spread, between, sessions, threshold, cap, alpha)
    if model.probability(MAX_SHIFT) < power:
        return _replace(made, why_none=f"no slowdown up to 99% is caught with {power:.0%} probability here")
    shift = optimize.brentq(lambda d: model.probability(d) - power, 0.0, MAX_SHIFT, xtol=1e-6)
    return _replace(made, mds=1.0 - math.exp(-shift))


def _replace(made: Reach, **changes: object) -> Reach:
    from dataclasses import replace

    return replace(made, **changes)


class _Model:
    """P(regression | shift d) of the module doc, for one comparison's figures."""

    def __init__(self, n: int, m: int, within: float, baseline_spread: float, between: float, sessions: int,
                 threshold: float, cap: float, alpha: float) -> None:
        session_var = between**2 * (1.0 + 1.0 / sessions)
        median_var = MEDIAN_VARIANCE * within**2 * (1.0 / n + 1.0 / m)
        spread = math.sqrt(within**2 + baseline_spread**2) or 1e-12
        self.kn = math.sqrt(12.0 * n * m / (n + m + 1)) / (math.sqrt(2.0 * math.pi) * spread)
        self.sd_d = math.sqrt(session_var + median_var) or 1e-12
        self.sd_z = math.sqrt(1.0 + self.kn**2 * session_var)
        covariance = self.kn * session_var + RHO_MEDIAN_HL * math.sqrt(median_var)
        self.rho = max(-0.999, min(0.999, covariance / (self.sd_d * self.sd_z)))
        self.tau, self.gross = -math.log(1.0 - threshold), -math.log(1.0 - cap)
        self.z_alpha = float(scipy_stats.norm.isf(alpha))

    def probability(self, d: float) -> float:
        ratio_at = (d - self.tau) / self.sd_d
        gross_at = (d - self.gross) / self.sd_d
        test_at = (self.kn * d - self.z_alpha) / self.sd_z
        both = _both(ratio_at, test_at, self.rho)
        gross = float(scipy_stats.norm.cdf(gross_at))
        return both + gross - _both(gross_at, test_at, self.rho)


def _both(a: float, b: float, rho: float) -> float:
    """P(X < a, Y < b) for standard normals of correlation ``rho``."""
    return float(scipy_stats.multivariate_normal(mean=[0.0, 0.0], cov=[[1.0, rho], [rho, 1.0]]).cdf(np.array([a, b])))

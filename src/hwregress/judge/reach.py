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
            pi/2 times the mean's under normal noise; the median of the pooled rounds weighs the k levels between
            their mean, 1/k, and their median, up to 1.5/k: the mean's is kept here)
    test:   Z ~ N(kn d, 1 + kn^2 sb^2 (1 + 1/k)),  kn = sqrt(12 n m / (n + m + 1)) / sqrt(2 pi (sx^2 + sy^2))
            (the Mann-Whitney statistic standardized under H0, its slope at small shifts for normal samples of
            spreads sx, sy: Pitman efficiency 3/pi against the t-test when they are equal; Lehmann,
            "Nonparametrics", 1975, ch. 2)
    cov(D, Z) = kn sb^2 (1 + 1/k) + rho0 sqrt(pi/2 sw^2 (1/n + 1/m)),  rho0 = sqrt(3)/2
            (the session levels move both; the median difference and the rank statistic correlate through their
            influence functions, sign(x) / (2 f(0)) and (F(x) - 1/2) / int f^2: E[sign(X)(F(X) - 1/2)] = 1/4,
            var(sign X) = 1, var(F(X)) = 1/12, so rho0 = (1/4) / sqrt(1/12) = sqrt(3)/2 for every continuous law
            symmetric about its median (Hettmansperger & McKean, "Robust Nonparametric Statistical Methods", 2nd ed.
            2011, ch. 1-2); ``tests/judge/test_reach.py`` measures it on simulated samples. The ratio of efficiencies'
            square root, sqrt((2/pi) / (3/pi)) = sqrt(2/3), is the correlation only where one estimator is
            efficient, as the mean is under normal noise, not between these two)

    P(regression | d) = P(D > tau, Z > z_alpha) + P(D > c) - P(D > c, Z > z_alpha)
            tau = -log(1 - threshold), c = -log(1 - max(threshold, cap)), z_alpha the normal quantile of 1 - alpha

and the MDS is the ``d`` where this equals ``power``, as ``1 - exp(-d)``. The seeded simulation in
tests/judge/test_reach.py draws sessions from the same model through the real rule (baselines built as sessions record
them) and catches a slowdown equal to the stated MDS in 90% +- 3% of trials.

A window too short for the exact test ever to reach ``alpha`` (its smallest p-value, ``1 / C(n + m, n)``, is above
it: 4 rounds against 4 give 1/70) has no MDS of the significance path: only a drop beyond the cap counts, and
:class:`Reach` says so instead of giving a number; so does a window of fewer than 2 rounds, whose noise is not known.

The threshold rules (:func:`threshold_reach`: a judged latency, a scaling or co-location efficiency, a speedup;
:func:`hwregress.judge.compare.judge`) have no significance test: a figure regresses when its ratio to the baseline's
figure crosses the threshold. One session's figure (a latency p50, an efficiency T(W) / (W T(1)), a speedup) is, in
logs, the session's level plus the noise of the medians it is made of, in the same two-level model:

    log F = mu + b + e,   b ~ N(0, sb^2) between sessions,   e ~ N(0, W),   W = (pi/2) (sw^2 / n + sr^2 / r)

with ``sw`` and ``n`` the relative spread and count of the window's rounds (a latency's too: a decode step's time is
the inverse of its rate; a Spark stream's micro-batch rates also vary with each batch's rows, so there ``W`` errs
large), ``sr`` and ``r`` those of the same-session reference the figure divides by (an efficiency's
T(1) or solo runs or plain torch, a speedup's CPU side; none for a latency), and ``sb`` the spread of the figure's
recorded sessions since their last level shift (0 with fewer than 3: not known). The baseline's figure is the median
of its ``k`` recorded sessions (a speedup's is the one session that recorded it, ``k = 1``), so the judged change

    D = log(F / F_baseline) (latency) or -log(F / F_baseline) (higher is better) ~ N(d, (sb^2 + W) (1 + c_k/k))

with ``c_k/k`` the variance of the median of ``k`` normal draws (:data:`MEDIAN_OF_K`: ``c_k`` = 1 for k = 1 and 2,
1.346 for k = 3, towards pi/2), not the mean's 1/k (which made the stated MDS slightly optimistic),

is a regression when ``D > tau`` (``tau = log(1 + threshold)`` for a latency, ``-log(1 - threshold)`` otherwise),
with probability ``Phi((d - tau) / sd)``. The MDS is ``d = tau + z_power sd``, given in the figure's own direction:
``1 - exp(-d)`` of an efficiency or speedup (a loss: 0.12 is 12% lower), ``exp(d) - 1`` of a latency (a rise: 0.12 is
12% longer). The recorded sessions' spread holds each session's own noise too, so ``sb`` from it errs large. A seeded
simulation in tests/judge/test_reach.py judges a decode latency and a scaling efficiency drawn from this model through
the real :func:`hwregress.judge.compare.judge` and catches a change equal to the stated MDS in 90% +- 3% of trials.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from scipy import optimize, special

from hwregress.judge.changepoints import since_last_change
from hwregress.judge.stats import MIN_HISTORY, robust_spread
from hwregress.store.metrics import DIRECTIONS

POWER = 0.9
MEDIAN_VARIANCE = math.pi / 2  # var(sample median) / var(sample mean) for normal samples, as n grows
RHO_MEDIAN_HL = math.sqrt(3.0) / 2.0  # corr(median difference, the rank statistic): symmetric laws (module doc)
# k x var(median of k iid N(0, 1)), k = 1..20 (the entries' history length): order statistics' moments integrated
# numerically (scipy.integrate.quad and dblquad over the normal order-statistic densities); an even k's median is the
# mean of the two middle ones. tests/judge/test_reach.py checks them by simulation. Beyond 20: pi/2.
MEDIAN_OF_K = (1.0, 1.0, 1.346, 1.1928, 1.4342, 1.2885, 1.4731, 1.3454, 1.4949, 1.3833, 1.5088, 1.4102, 1.5184,
               1.4303, 1.5254, 1.446, 1.5308, 1.4585, 1.535, 1.4687)


def median_of_k_variance(k: int) -> float:
    """var(median of ``k`` iid draws) / var(one draw) for normal draws: :data:`MEDIAN_OF_K` ``/ k`` (pi / (2k) beyond
    20).

    Raises:
        ValueError: ``k`` below 1.
    """
    if k < 1:
        raise ValueError(f"the median of {k} draws: k must be >= 1")
    return (MEDIAN_OF_K[k - 1] if k <= len(MEDIAN_OF_K) else MEDIAN_VARIANCE) / k
MAX_SHIFT = 5.0  # log units: a 99.3% slowdown; nothing the rule misses beyond it is worth a number
FIGURES = ("throughput", "latency", "efficiency", "speedup")  # the judged figures a Reach may belong to
LOWER_IS_BETTER = ("latency",)


@dataclass(frozen=True)
class Reach:
    """What one judged figure's verdict could catch.

    Attributes:
        mds: the minimum detectable change of the figure, caught with probability ``power``: a fraction of the
            baseline's figure, lost (throughput, efficiency, speedup: 0.12 is 12% lower) or added (latency: 0.12 is
            12% longer); None when there is none to give (``why_none`` says why).
        power: the probability the MDS is defined by.
        alpha: the significance level of the test; None for a threshold rule (no test).
        within: the window's relative spread (MAD x 1.4826 / median of its rounds).
        between: the baseline's session-to-session relative spread (0 when fewer than 3 sessions: not known).
        rounds: (rounds now, the other side's count: the baseline's samples for a throughput, the same-session
            reference's rounds for an efficiency or speedup, 0 for a latency).
        why_none: why there is no MDS, or None.
        threshold: the verdict's threshold the MDS was computed at (fraction).
        sessions: the baseline sessions ``between`` and the baseline's level come from (k of the module doc).
        reference_within: the same-session reference's relative spread (efficiency, speedup), else None.
        figure: one of :data:`FIGURES`.
    """

    mds: float | None
    power: float
    alpha: float | None
    within: float
    between: float
    rounds: tuple[int, int]
    why_none: str | None = None
    threshold: float | None = None
    sessions: int = 0
    reference_within: float | None = None
    figure: str = "throughput"


def smallest_p(n: int, m: int) -> float:
    """The smallest one-sided p-value the exact Mann-Whitney test can give for ``n`` against ``m`` samples (every
    current sample below every baseline one): ``1 / C(n + m, n)``."""
    return math.exp(-(math.lgamma(n + m + 1) - math.lgamma(n + 1) - math.lgamma(m + 1)))


def reach(current: Sequence[float], baseline: Sequence[float], history: Sequence[float], threshold: float,
          cap: float, alpha: float, power: float = POWER) -> Reach:
    """The :class:`Reach` of comparing ``current`` (this window's per-round throughput, higher is better) with
    ``baseline`` (the entry's samples, same unit) whose sessions had the medians ``history``, under the verdict's
    ``threshold`` and ``cap`` (fractions) at ``alpha``. Fewer than 2 samples on a side: no MDS (the noise is not
    known), ``why_none`` says so.

    Raises:
        ValueError: ``power`` / ``alpha`` outside (0, 1), or a history median that is not finite and > 0.
    """
    recent = since_last_change(history) if history else []
    between = robust_spread(recent) if len(recent) >= MIN_HISTORY else 0.0
    sessions = max(len(recent), 1)
    if len(current) < 2 or len(baseline) < 2:
        _check_probabilities(power, alpha)
        return Reach(None, power, alpha, robust_spread(current), between, (len(current), len(baseline)),
                     why_none=f"{len(current)} round(s) against {len(baseline)} baseline sample(s): a window needs at "
                              "least 2 on each side for its noise to be known; run more rounds",
                     threshold=threshold, sessions=sessions)
    return reach_of(len(current), len(baseline), robust_spread(current), robust_spread(baseline), between,
                    sessions, threshold, cap, alpha, power)


def reach_of(n: int, m: int, within: float, baseline_spread: float, between: float, sessions: int,
             threshold: float, cap: float, alpha: float, power: float = POWER) -> Reach:
    """The :class:`Reach` for ``n`` rounds of relative spread ``within`` against ``m`` baseline samples of relative
    spread ``baseline_spread`` pooled from ``sessions`` sessions whose levels spread by ``between`` (all relative
    standard deviations), under ``threshold`` and ``cap`` (fractions) at ``alpha``; see the module doc.

    Raises:
        ValueError: ``power`` or ``alpha`` outside (0, 1), fewer than 2 rounds on a side, or a negative spread.
    """
    _check_probabilities(power, alpha)
    if n < 2 or m < 2 or min(within, baseline_spread, between) < 0:
        raise ValueError(f"need >= 2 rounds a side and spreads >= 0, got {n}, {m}, {within}, {baseline_spread}, "
                         f"{between}")
    made = Reach(None, power, alpha, within, between, (n, m), threshold=threshold, sessions=sessions)
    cap = max(threshold, cap)
    if smallest_p(n, m) >= alpha:
        return replace(made, why_none=(
            f"{n} rounds against {m} cannot reach p < {alpha:g} (the exact Mann-Whitney test's smallest p is "
            f"1/{round(1 / smallest_p(n, m))}): only a drop beyond the {cap:.0%} cap counts; run more rounds"))
    model = _Model(n, m, within, baseline_spread, between, sessions, threshold, cap, alpha)
    if model.probability(MAX_SHIFT) < power:
        return replace(made, why_none=f"no slowdown up to 99% is caught with {power:.0%} probability here")
    shift = optimize.brentq(lambda d: model.probability(d) - power, 0.0, MAX_SHIFT, xtol=1e-6)
    return replace(made, mds=1.0 - math.exp(-shift))


def threshold_reach(figure: str, current: Sequence[float], history: Sequence[float], threshold: float,
                    reference: Sequence[float] = (), power: float = POWER, direction: str | None = None) -> Reach:
    """The :class:`Reach` of a threshold rule (module doc) on ``figure`` (``latency``, ``efficiency`` or
    ``speedup``): ``current`` is the window's per-round throughput (its spread stands for the figure's own noise),
    ``history`` the figure's recorded session values whose median the baseline's figure is (empty for a speedup: one
    session), ``reference`` the same-session reference's per-round throughput the figure divides by (empty for a
    latency; fewer than 2 rounds: its noise is not counted, as the judge's threshold does not count it), under the
    verdict's ``threshold`` (fraction). Fewer than 2 rounds now: no MDS, ``why_none`` says so. A metric a project
    declares (:func:`hwregress.store.metrics.register`) gives its ``direction`` (``higher`` or ``lower`` is better) and
    may have any name; a built-in figure's direction is its own.

    Raises:
        ValueError: an unknown figure without a direction, a direction not ``higher`` or ``lower``, ``power`` outside
            (0, 1), a threshold outside [0, 1), or a history value that is not finite and > 0.
    """
    recent = since_last_change(history) if history else []
    between = robust_spread(recent) if len(recent) >= MIN_HISTORY else 0.0
    sessions = max(len(history), 1)
    counted = len(reference) >= 2
    if len(current) < 2:
        _check_figure(figure, threshold, power, direction)
        return Reach(None, power, None, 0.0, between, (len(current), len(reference)),
                     why_none=f"{len(current)} round(s): the {figure}'s own noise is not known; run more rounds",
                     threshold=threshold, sessions=sessions,
                     reference_within=robust_spread(reference) if counted else None, figure=figure)
    return threshold_reach_of(figure, len(current), robust_spread(current), between, sessions, threshold,
                              len(reference) if counted else 0, robust_spread(reference) if counted else None, power,
                              direction)


def threshold_reach_of(figure: str, n: int, within: float, between: float, sessions: int, threshold: float,
                       reference_rounds: int = 0, reference_within: float | None = None,
                       power: float = POWER, direction: str | None = None) -> Reach:
    """The :class:`Reach` of a threshold rule on ``figure`` for a window of ``n`` rounds of relative spread
    ``within``, a same-session reference of ``reference_rounds`` rounds of relative spread ``reference_within``
    (0 rounds or None: none), and a baseline figure that is the median of ``sessions`` sessions whose levels spread
    by ``between`` (relative standard deviations), under ``threshold`` (fraction); see the module doc. ``direction``:
    as :func:`threshold_reach`'s.

    Raises:
        ValueError: an unknown figure without a direction, a bad direction, ``power`` outside (0, 1), a threshold
            outside [0, 1), fewer than 1 round or session, or a negative spread.
    """
    _check_figure(figure, threshold, power, direction)
    lower_is_better = figure in LOWER_IS_BETTER if direction is None else direction == "lower"
    if n < 1 or sessions < 1 or reference_rounds < 0 or min(within, between, reference_within or 0.0) < 0:
        raise ValueError(f"need >= 1 round and session and spreads >= 0, got {n}, {sessions}, {within}, "
                         f"{between}, {reference_within}")
    own = within**2 / n + ((reference_within or 0.0) ** 2 / reference_rounds if reference_rounds else 0.0)
    sd = math.sqrt((between**2 + MEDIAN_VARIANCE * own) * (1.0 + median_of_k_variance(sessions)))
    tau = math.log1p(threshold) if lower_is_better else -math.log1p(-threshold)
    shift = tau + float(special.ndtri(power)) * sd
    made = Reach(None, power, None, within, between, (n, reference_rounds), threshold=threshold, sessions=sessions,
                 reference_within=reference_within if reference_rounds else None, figure=figure)
    if shift > MAX_SHIFT:
        return replace(made, why_none=f"no change of the {figure} up to 99% is caught with {power:.0%} probability "
                                      "here")
    return replace(made, mds=math.expm1(shift) if lower_is_better else -math.expm1(-shift))


def _check_probabilities(power: float, alpha: float) -> None:
    if not (0 < power < 1 and 0 < alpha < 1):
        raise ValueError(f"power and alpha must be in (0, 1), got {power} and {alpha}")


def _check_figure(figure: str, threshold: float, power: float, direction: str | None = None) -> None:
    if direction is not None and direction not in DIRECTIONS:
        raise ValueError(f"the {figure}'s direction must be 'higher' or 'lower', got {direction!r}")
    if direction is None and figure not in FIGURES[1:]:
        raise ValueError(f"a threshold rule judges one of {', '.join(FIGURES[1:])}, got {figure!r}")
    if not (0 < power < 1 and 0 <= threshold < 1):
        raise ValueError(f"power must be in (0, 1) and the threshold in [0, 1), got {power} and {threshold}")


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
        self.z_alpha = float(special.ndtri(1.0 - alpha))

    def probability(self, d: float) -> float:
        ratio_at = (d - self.tau) / self.sd_d
        gross_at = (d - self.gross) / self.sd_d
        test_at = (self.kn * d - self.z_alpha) / self.sd_z
        both = _both(ratio_at, test_at, self.rho)
        gross = float(special.ndtr(gross_at))
        return both + gross - _both(gross_at, test_at, self.rho)


def _both(a: float, b: float, rho: float) -> float:
    """P(X < a, Y < b) for standard normals of correlation ``rho`` (``|rho| < 1``), through Owen's T function (Owen,
    "Tables for computing bivariate normal probabilities", Ann. Math. Statist. 1956, eq. 2.1):
    ``Phi(a)/2 + Phi(b)/2 - T(a, (b - rho a) / (a s)) - T(b, (a - rho b) / (b s)) - [a b < 0] / 2``, ``s = sqrt(1 -
    rho^2)``; a bound at 0 moves by 1e-12 (the formula divides by it; the probability moves by less than 1e-12)."""
    a, b = a or 1e-12, b or 1e-12
    s = math.sqrt(1.0 - rho * rho)
    owen = special.owens_t(a, (b - rho * a) / (a * s)) + special.owens_t(b, (a - rho * b) / (b * s))
    return float(0.5 * special.ndtr(a) + 0.5 * special.ndtr(b) - owen - (0.5 if a * b < 0 else 0.0))

"""The verdict of stack B against stack A on the log-ratios of an interleaved A/B session's pairs.

Each kept pair (:mod:`hwregress.ab.pairs`) gives ``x_i = log(B_i / A_i)``: B's window's throughput over A's, both
measured in the same stretch of the session, so a drift of the host that moves both windows cancels in ``x_i``, and
the balanced order (:mod:`hwregress.ab.order`) cancels what the first window of a pair does to the second. Under no
difference between the stacks A and B are exchangeable within a pair, so with the order drawn at random each ``x_i``
is symmetric about 0; a change of stack B multiplies its throughput by ``r``, shifting every ``x_i`` by ``log r``.
That is the one-sample location problem of the signed-rank test, the judgement Chromium's Pinpoint gives its pairwise
jobs (google/skia-buildbot, pinpoint/go/compare/stats/wilcoxon_signed_rank.go: on the log-transformed pairs):

- the test (:func:`signed_rank_p`): Wilcoxon's signed-rank test (Wilcoxon 1945), one-sided, by
  ``scipy.stats.wilcoxon``: its exact law for n <= 50 without ties or zeros, else its normal approximation (a
  permutation law for n <= 13 with ties or zeros). Distribution-free for symmetric noise, a pair spoiled by a
  background job weighs one rank however far off it is, and it loses little against the t-test on normal noise
  (efficiency 3/pi: Lehmann, "Nonparametrics", 1975, ch. 4);
- the estimate and interval (:func:`hodges_lehmann`): the Hodges-Lehmann estimate, the median of the Walsh averages
  ``(x_i + x_j) / 2, i <= j`` (Hodges & Lehmann 1963, Ann. Math. Statist. 34(2)), and the interval whose ends are the
  k-th smallest and k-th largest Walsh averages, k from the signed-rank statistic's exact null law (Hollander, Wolfe
  & Chicken, "Nonparametric Statistical Methods", 3rd ed. 2014, section 3.3; Bauer 1972, JASA 67(339)). It is the
  set of shifts the test does not reject (Tukey: the statistic W+ counts the Walsh averages above 0), so the one-sided
  (1 - alpha) upper bound lies below 0 exactly when the test "B slower" gives p < alpha (tests/ab/test_ab_paired.py
  checks this against scipy's p-values);
- the verdict (:func:`paired_decision`): a regression or an improvement needs the test AND a ratio beyond the
  threshold (asv's rule, as :func:`hwregress.judge.stats.compare`); a pass needs both one-sided bounds inside the
  threshold: no difference of the threshold or more either way, by two one-sided tests (Schuirmann 1987,
  J. Pharmacokinet. Biopharm. 15(6): the (1 - 2 alpha) interval inside the equivalence margins);
- what it could catch (:func:`paired_reach`): the minimum detectable slowdown of that rule (module doc of
  :mod:`hwregress.judge.reach` for the single-stack one).

Exact zeros (a pair whose windows gave the same throughput, e.g. a timer's resolution) go to scipy as Pratt's method
treats them (``zero_method="pratt"``: ranked with the others, then left out of the sum; Pratt 1959, JASA 54(287)):
Wilcoxon's way drops them, judging fewer pairs than ran, and Pratt showed that dropping them can give paradoxical
conclusions; ranked, they stay part of the data, as they are in the Hodges-Lehmann interval's Walsh averages.
With zeros or ties the interval and scipy's p-value no longer correspond exactly; throughputs measured to a float's
precision rarely tie.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np
from scipy import optimize, special
from scipy import stats as scipy_stats

from hwregress.judge.changepoints import MAD_TO_SIGMA
from hwregress.judge.reach import MAX_SHIFT, POWER, Reach, _both
from hwregress.judge.stats import DEFAULT_MAX_THRESHOLD
from hwregress.store.verdicts import Verdict
from hwregress.summary import median_of

EXACT_MAX = 50  # the largest n whose law is counted exactly, as scipy's "auto" method does
GROSS_MIN_PAIRS = 4  # two balanced blocks: the fewest pairs on which a gross drop alone is a regression
HL_VARIANCE = math.pi / 3  # n var(Hodges-Lehmann estimate) / sigma^2 for normal noise (efficiency 3/pi)
ALTERNATIVES = ("less", "greater", "two-sided")


class HodgesLehmann(NamedTuple):
    """The Hodges-Lehmann estimate of the log-ratios' centre and its interval (log units, as the log-ratios);
    ``lower`` and ``upper`` are None when the series is too short for the interval's level (:func:`hodges_lehmann`)."""

    estimate: float
    lower: float | None
    upper: float | None


def critical_count(n: int, tail: float) -> int | None:
    """The largest count ``c`` with ``P(W+ <= c) < tail`` for the signed-rank statistic ``W+`` of ``n`` log-ratios
    under no difference (symmetric about 0); None when even ``P(W+ = 0) = 2^-n`` is not below ``tail``. Exact for
    ``n <= 50`` (the subset-sum counts of :func:`_subset_sum_counts`), else the normal law ``W+ ~ N(n(n+1)/4,
    n(n+1)(2n+1)/24)`` without continuity correction, as ``scipy.stats.wilcoxon``'s default methods compute the
    p-value, so that ``P(W+ <= w)`` is scipy's one-sided p-value of an observed ``w``.

    Raises:
        ValueError: ``n`` < 1 or ``tail`` outside (0, 1).
    """
    if n < 1 or not 0 < tail < 1:
        raise ValueError(f"need n >= 1 log-ratios and a tail probability in (0, 1), got n={n}, tail={tail}")
    if n <= EXACT_MAX:
        total, largest = 2**n, None
        for count_sum, below in enumerate(_cumulative_counts(n)):
            if below / total >= tail:  # exact: below < 2^53 and total a power of 2, the float scipy's law sums to
                break
            largest = count_sum
        return largest
    mean, sd = n * (n + 1) / 4.0, math.sqrt(n * (n + 1) * (2 * n + 1) / 24.0)
    largest = math.ceil(mean + sd * float(special.ndtri(tail))) - 1
    return largest if largest >= 0 else None


@functools.lru_cache(maxsize=EXACT_MAX + 1)
def _subset_sum_counts(n: int) -> tuple[int, ...]:
    """``counts[s]``: the subsets of ``{1, ..., n}`` whose elements sum to ``s``, ``s = 0 .. n(n+1)/2`` (2^n in
    all): the null law of ``W+`` times ``2^n``, as each rank is positive or negative with probability 1/2."""
    counts = [1]
    for rank in range(1, n + 1):
        grown = counts + [0] * rank
        for total, count in enumerate(counts):
            grown[total + rank] += count
        counts = grown
    return tuple(counts)


def walsh_averages(x: Sequence[float]) -> np.ndarray:
    """The ``n(n+1)/2`` Walsh averages ``(x_i + x_j) / 2, i <= j`` of ``x``, sorted ascending."""
    values = np.asarray(x, dtype=float)
    first, second = np.triu_indices(values.size)
    return np.sort((values[first] + values[second]) / 2.0)


def hodges_lehmann(x: Sequence[float], confidence: float) -> HodgesLehmann:
    """The Hodges-Lehmann estimate of the centre of ``x`` (log-ratios) and its two-sided interval at ``confidence``
    (module doc): the k-th smallest and k-th largest Walsh averages, ``k = c + 1`` with ``c`` the
    :func:`critical_count` of the tail ``(1 - confidence) / 2``. Each bound alone is a one-sided bound at
    ``(1 + confidence) / 2``: the one-sided (1 - alpha) bounds a verdict at level alpha needs are the interval at
    ``confidence = 1 - 2 alpha``. The bounds are None when the series is too short for the level (``2^-n`` not below
    the tail): no interval of that confidence exists, and a verdict that needs one stays undecided.

    Raises:
        ValueError: ``x`` empty or not finite, or ``confidence`` outside (0, 1).
    """
    values = _checked(x)
    if not 0 < confidence < 1:
        raise ValueError(f"confidence {confidence} is not a level in (0, 1); give e.g. 0.98")
    return _estimate_and_bounds(values, (1.0 - confidence) / 2.0)


def _estimate_and_bounds(values: np.ndarray, tail: float) -> HodgesLehmann:
    """The Hodges-Lehmann estimate of ``values`` and its one-sided bounds, each of level ``1 - tail``."""
    walsh = walsh_averages(values)
    estimate = median_of(walsh)
    below = critical_count(values.size, tail)
    if below is None:
        return HodgesLehmann(estimate, None, None)
    return HodgesLehmann(estimate, float(walsh[below]), float(walsh[walsh.size - 1 - below]))


def signed_rank_p(x: Sequence[float], alternative: str) -> float:
    """The p-value of Wilcoxon's signed-rank test on ``x`` (log-ratios) against no difference, from
    ``scipy.stats.wilcoxon`` with Pratt's treatment of zeros (module doc): ``alternative`` ``"less"`` tests "B
    slower" (the centre below 0), ``"greater"`` "B faster", ``"two-sided"`` either. Log-ratios all 0 give 1.0 (no
    evidence either way; scipy's normal approximation has no spread to divide by there).

    Raises:
        ValueError: ``x`` empty or not finite, or an unknown ``alternative``.
    """
    values = _checked(x)
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative {alternative!r} is none of {', '.join(ALTERNATIVES)}")
    if not np.any(values):
        return 1.0
    exact = _exact_one_sided_p(values, alternative)
    if exact is not None:
        return exact
    return float(scipy_stats.wilcoxon(values, zero_method="pratt", alternative=alternative).pvalue)


def _exact_one_sided_p(values: np.ndarray, alternative: str) -> float | None:
    """scipy's exact one-sided p-value where scipy uses its exact law (n <= :data:`EXACT_MAX`, no zeros, no ties
    among ``|x|``), from the subset-sum counts; None elsewhere. The same float as scipy's: ``k / 2^n`` with
    ``k < 2^53`` is exact, as is every partial sum of scipy's law; scipy's argument handling costs ~2 ms a call, most
    of a planned look's check in the A/B simulations."""
    n = values.size
    magnitudes = np.abs(values)
    if alternative == "two-sided" or n > EXACT_MAX or not np.all(magnitudes) or np.unique(magnitudes).size != n:
        return None
    ranks = np.empty(n, dtype=np.int64)
    ranks[np.argsort(magnitudes)] = np.arange(1, n + 1)
    w_plus = int(ranks[values > 0].sum())
    at_most = _cumulative_counts(n)  # at_most[w]: the sign patterns with W+ <= w
    if alternative == "less":
        return at_most[w_plus] / 2**n
    return (2**n - (at_most[w_plus - 1] if w_plus else 0)) / 2**n


@functools.lru_cache(maxsize=EXACT_MAX + 1)
def _cumulative_counts(n: int) -> tuple[int, ...]:
    """``at_most[w]``: the subsets of ``{1, ..., n}`` summing to ``w`` or less (:func:`_subset_sum_counts`)."""
    total, at_most = 0, []
    for count in _subset_sum_counts(n):
        total += count
        at_most.append(total)
    return tuple(at_most)


@dataclass(frozen=True)
class PairedComparison:
    """Stack B against stack A on the log-ratios of ``pairs`` pairs, at one look's level.

    Attributes:
        pairs: the log-ratios judged (kept pairs).
        ratio: ``exp`` of the Hodges-Lehmann estimate: B's throughput over A's (0.9 is 10% slower).
        ratio_low: the one-sided (1 - ``alpha``) lower bound of the ratio; None when the pairs are too few for it.
        ratio_high: the one-sided (1 - ``alpha``) upper bound of the ratio; None likewise.
        p_slower: the one-sided signed-rank p-value of "B slower".
        p_faster: the one-sided signed-rank p-value of "B faster".
        alpha: the look's significance level.
        threshold: the relative change that counts (fraction).
        max_threshold: the gross-drop cap (fraction), or None for no gross-drop rule.
        gross: the ratio lies below ``1 - max(threshold, max_threshold)`` on at least :data:`GROSS_MIN_PAIRS` pairs.
        verdict: what the look decides (:func:`paired_decision`), or None: undecided.
    """

    pairs: int
    ratio: float
    ratio_low: float | None
    ratio_high: float | None
    p_slower: float
    p_faster: float
    alpha: float
    threshold: float
    max_threshold: float | None
    gross: bool
    verdict: Verdict | None


def paired_compare(x: Sequence[float], threshold: float, alpha: float,
                   max_threshold: float | None = DEFAULT_MAX_THRESHOLD) -> PairedComparison:
    """The :class:`PairedComparison` of the log-ratios ``x`` (``log(B / A)`` per kept pair) under ``threshold``
    (fraction) at ``alpha`` (the look's level: :func:`hwregress.judge.looks.look_alpha`); the verdict is
    :func:`paired_decision`'s.

    Raises:
        ValueError: ``x`` empty or not finite, ``threshold`` outside [0, 1), ``alpha`` outside (0, 0.5), or
            ``max_threshold`` outside (0, 1).
    """
    values = _checked(x)
    _check_rule(threshold, alpha, max_threshold)
    centre = _estimate_and_bounds(values, alpha)  # the interval at 1 - 2 alpha, alpha not rounded
    ratio = math.exp(centre.estimate)
    low = None if centre.lower is None else math.exp(centre.lower)
    high = None if centre.upper is None else math.exp(centre.upper)
    p_slower, p_faster = signed_rank_p(values, "less"), signed_rank_p(values, "greater")
    # a gross drop never overrules the test: it decides where the pairs are too few for the upper bound, or where that
    # bound agrees B is slower (an A/A session under heavy load had a third of its windows 50x slower on either side:
    # the ratio 0.41, its bounds [0.14, 1.01], and the rule alone called it a regression)
    gross = (max_threshold is not None and values.size >= GROSS_MIN_PAIRS
             and ratio < 1.0 - max(threshold, max_threshold) and (high is None or high < 1.0))
    if gross or (p_slower < alpha and ratio < 1.0 - threshold):
        verdict: Verdict | None = Verdict.REGRESSION
    elif p_faster < alpha and ratio > 1.0 + threshold:
        verdict = Verdict.IMPROVEMENT
    elif low is not None and high is not None and low > 1.0 - threshold and high < 1.0 + threshold:
        verdict = Verdict.PASS
    else:
        verdict = None
    return PairedComparison(values.size, ratio, low, high, p_slower, p_faster, alpha, threshold, max_threshold, gross,
                            verdict)


def paired_decision(x: Sequence[float], threshold: float, alpha: float,
                    max_threshold: float | None = DEFAULT_MAX_THRESHOLD) -> Verdict | None:
    """What a look at an A/B session decides on the log-ratios ``x`` (``log(B / A)`` of each kept pair:
    :func:`hwregress.ab.pairs.log_ratios`) at significance level ``alpha`` (the look's:
    :func:`hwregress.judge.looks.look_alpha`), with ``threshold`` the relative change that counts (fraction):

    - ``regression``: the one-sided signed-rank test "B slower" is significant at ``alpha`` and the Hodges-Lehmann
      ratio lies below ``1 - threshold``, or the drop is gross: the ratio lies below ``1 - max(threshold,
      max_threshold)`` on at least :data:`GROSS_MIN_PAIRS` pairs, where the pairs are too few for the (1 - ``alpha``)
      upper bound (no test: a halved throughput still counts) or that bound lies below 1 (never against the test;
      None turns the rule off);
    - ``improvement``: the test "B faster" is significant at ``alpha`` and the ratio lies above ``1 + threshold``;
    - ``pass``: the (1 - ``alpha``) lower bound of the ratio lies above ``1 - threshold`` AND the (1 - ``alpha``)
      upper bound lies below ``1 + threshold``: no difference of the threshold or more either way, at confidence
      1 - ``alpha`` each (two one-sided tests; a ``threshold`` of 0 never passes);
    - None: none of these; the session runs more pairs, to its next look.

    Raises:
        ValueError: as :func:`paired_compare`.
    """
    return paired_compare(x, threshold, alpha, max_threshold).verdict


def log_spread(x: Sequence[float]) -> float:
    """The robust standard deviation of the log-ratios ``x``: MAD x 1.4826 (log units: 0.02 is about 2% per pair);
    0 for fewer than 2 values."""
    values = np.asarray(x, dtype=float)
    if values.size < 2:
        return 0.0
    return MAD_TO_SIGMA * median_of(np.abs(values - median_of(values)))


def paired_reach(x: Sequence[float], threshold: float, alpha: float, power: float = POWER,
                 max_threshold: float | None = DEFAULT_MAX_THRESHOLD, unit: str = "pair") -> Reach:
    """The :class:`hwregress.judge.reach.Reach` of :func:`paired_decision` on the log-ratios ``x`` at ``alpha``:
    :func:`paired_reach_of` for ``len(x)`` pairs whose noise is :func:`log_spread` of ``x``. Fewer than 2 pairs: no
    MDS (the noise is not known), ``why_none`` says so, calling each value a ``unit`` (``"process pair"``: a
    process pair's mean log-ratio).

    Raises:
        ValueError: as :func:`paired_reach_of`, or ``x`` not finite.
    """
    values = np.asarray(x, dtype=float)
    if values.size < 2:
        _check_rule(threshold, alpha, max_threshold, power)
        return Reach(None, power, alpha, 0.0, 0.0, (values.size, values.size), threshold=threshold, sessions=1,
                     why_none=f"{values.size} {unit}(s): the noise of the log-ratios is not known; run more {unit}s")
    return paired_reach_of(values.size, log_spread(_checked(values)), threshold, alpha, power, max_threshold, unit)


def paired_reach_of(n: int, sigma: float, threshold: float, alpha: float, power: float = POWER,
                    max_threshold: float | None = DEFAULT_MAX_THRESHOLD, unit: str = "pair") -> Reach:
    """The minimum detectable slowdown of :func:`paired_decision` for ``n`` pairs whose log-ratios have standard
    deviation ``sigma`` (log units), at ``alpha`` with ``power``. The model (normal log-ratios ``x_i ~ N(-d, sigma^2)``
    under a slowdown ``s = 1 - exp(-d)``; no between-session term: both windows of a pair share the session, which is
    the point of interleaving):

        estimate:  D = -(Hodges-Lehmann estimate) ~ N(d, (pi/3) sigma^2 / n)   (efficiency 3/pi against the mean)
        test:      significant when W+ <= c, c = critical_count(n, alpha); W+ = sum over i <= j of [x_i + x_j > 0]
                   is near normal with E W+ = n p1 + n(n-1)/2 p2 and var W+ = n p1 (1-p1) + n(n-1)/2 p2 (1-p2)
                   + 2n(n-1)(p3 - p1 p2) + n(n-1)(n-2)(p4 - p2^2) (Lehmann 1975, ch. 4), p1 = P(x > 0),
                   p2 = P(x_1 + x_2 > 0), p3 = P(x_1 > 0, x_1 + x_2 > 0), p4 = P(x_1 + x_2 > 0, x_1 + x_3 > 0)
                   (bivariate normal: :func:`hwregress.judge.reach._both`); at small shifts its power is the
                   t-test's at 3/pi of the pairs (Lehmann 1975)
        P(regression | d) = max(min(P(D > tau), P(W+ <= c)), P(D > gross))
                   tau = -log(1 - threshold), gross = -log(1 - max(threshold, max_threshold)) from 4 pairs

    taking the two conditions of "significant AND beyond the threshold" as one normal variable: the estimate is the
    root of the test's statistic, and the two are asymptotically equivalent (Hodges & Lehmann 1963), so each holds
    when the more demanding one does. The MDS is the ``s`` where that is ``power``. Pairs too few for the exact test
    ever to reach ``alpha`` (``2^-n`` not below it) have none on the significance path; :class:`Reach`'s
    ``why_none`` says so (only a gross drop counts there), calling each of the ``n`` a ``unit``. ``Reach.within``
    holds ``sigma``, ``between`` 0 and ``rounds`` (n, n).

    Raises:
        ValueError: ``power`` outside (0, 1), a rule outside :func:`paired_compare`'s bounds, ``n`` < 2 or
            ``sigma`` < 0.
    """
    _check_rule(threshold, alpha, max_threshold, power)
    if n < 2 or not sigma >= 0:
        raise ValueError(f"need >= 2 pairs and a spread >= 0, got {n} pairs and spread {sigma}")
    made = Reach(None, power, alpha, sigma, 0.0, (n, n), threshold=threshold, sessions=1)
    below = critical_count(n, alpha)
    if below is None:
        gross = (f"only a gross drop beyond the {max(threshold, max_threshold):.0%} cap counts"
                 if max_threshold is not None and n >= GROSS_MIN_PAIRS else "no slowdown counts")
        return replace(made, why_none=(f"{n} {unit}s cannot reach p < {alpha:g} (the exact signed-rank test's smallest "
                                       f"p is 1/{2**n}): {gross}; run more {unit}s"))
    model = _PairedModel(n, sigma, threshold, alpha, below, max_threshold)
    if model.probability(MAX_SHIFT) < power:
        return replace(made, why_none=f"no slowdown up to 99% is caught with {power:.0%} probability here")
    shift = optimize.brentq(lambda d: model.probability(d) - power, 0.0, MAX_SHIFT, xtol=1e-7)
    return replace(made, mds=-math.expm1(-shift))


class _PairedModel:
    """P(regression | shift d) of :func:`paired_reach_of`'s model."""

    def __init__(self, n: int, sigma: float, threshold: float, alpha: float, below: int,
                 max_threshold: float | None) -> None:
        self.n, self.sigma, self.below = n, max(sigma, 1e-12), below
        self.sd_estimate = math.sqrt(HL_VARIANCE / n) * self.sigma
        self.tau = -math.log1p(-threshold)
        gross_on = max_threshold is not None and n >= GROSS_MIN_PAIRS
        self.gross = -math.log1p(-max(threshold, max_threshold)) if gross_on else math.inf  # type: ignore[arg-type]

    def probability(self, d: float) -> float:
        beyond = float(special.ndtr((d - self.tau) / self.sd_estimate))
        gross = float(special.ndtr((d - self.gross) / self.sd_estimate)) if math.isfinite(self.gross) else 0.0
        return max(min(beyond, self.significant(d)), gross)

    def significant(self, d: float) -> float:
        """P(W+ <= c) for log-ratios N(-d, sigma^2): the normal law of W+ with its moments under the shift, a
        continuity correction of 1/2."""
        n, delta = self.n, -d / self.sigma
        p1, p2 = float(special.ndtr(delta)), float(special.ndtr(math.sqrt(2.0) * delta))
        p3 = _both(delta, math.sqrt(2.0) * delta, math.sqrt(0.5))
        p4 = _both(math.sqrt(2.0) * delta, math.sqrt(2.0) * delta, 0.5)
        mean = n * p1 + n * (n - 1) / 2.0 * p2
        variance = (n * p1 * (1 - p1) + n * (n - 1) / 2.0 * p2 * (1 - p2) + 2.0 * n * (n - 1) * (p3 - p1 * p2)
                    + n * (n - 1) * (n - 2) * (p4 - p2 * p2))
        return float(special.ndtr((self.below + 0.5 - mean) / math.sqrt(max(variance, 1e-24))))


def _checked(x: Sequence[float]) -> np.ndarray:
    values = np.asarray(x, dtype=float)
    if values.ndim != 1 or values.size == 0:
        raise ValueError("no log-ratios to judge: every pair was dropped or none ran (kept_in_balance says why); "
                         "run pairs whose two windows both finish")
    if not np.all(np.isfinite(values)):
        raise ValueError(f"log-ratio {values[~np.isfinite(values)][0]} is not finite; a pair's throughputs must be "
                         "finite numbers > 0 (log_ratios checks them)")
    return values


def _check_rule(threshold: float, alpha: float, max_threshold: float | None, power: float = POWER) -> None:
    if not 0 <= threshold < 1:
        raise ValueError(f"threshold {threshold} is not a fraction in [0, 1); give e.g. 0.05 for 5%")
    if not 0 < alpha < 0.5:
        raise ValueError(f"alpha {alpha} is not a one-sided significance level in (0, 0.5); give e.g. 0.01")
    if max_threshold is not None and not 0 < max_threshold < 1:
        raise ValueError(f"max_threshold {max_threshold} is not a fraction in (0, 1); give e.g. 0.25, or None")
    if not 0 < power < 1:
        raise ValueError(f"power {power} is not a probability in (0, 1); give e.g. 0.9")

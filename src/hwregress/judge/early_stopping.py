"""How many requests a latency percentile needs before it can be stated: MLPerf Inference's early-stopping rule.

A run of ``n`` requests, ``t`` of which took longer than a latency ``L``, supports the claim "the ``q``-th percentile
is at most ``L``" at confidence ``c`` when ``t`` or fewer requests over ``L`` would be that unlikely were the true
share over ``L`` as large as ``1 - q``:

    P(Binomial(n, 1 - q) <= t) <= 1 - c

(MLPerf Inference LoadGen, ``loadgen/early_stopping.cc``: ``odds`` and ``find_min_passing``, with its tolerance
``d = 0``; the rules' early-stopping appendix). At ``c = 0.99`` a p99 needs 459, 662 and 838 requests with 0, 1 and
2 over the bound, a p90 44, 64 and 81. Read the other way, with ``n`` requests the largest ``t`` that still passes
makes the ``(t + 1)``-th largest latency an upper bound of the percentile at confidence ``c``: MLPerf's "early
stopping estimate" of the percentile, which this module returns where a run has enough requests and None where it
has not (a p99 of 100 requests is not stated: its value would be the largest request's, with nothing behind it).

The binomial's CDF is SciPy's (``scipy.stats.binom.cdf``), not LoadGen's series for the regularized beta.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from scipy.stats import binom

CONFIDENCE = 0.99  # MLPerf Inference's early-stopping confidence


def _check(percentile: float, confidence: float) -> None:
    if not 0.0 < percentile < 1.0:
        raise ValueError(f"percentile {percentile!r} is not a fraction in (0, 1): give 0.99 for a p99")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence {confidence!r} is not a fraction in (0, 1): MLPerf uses {CONFIDENCE}")


def holds(requests: int, overs: int, percentile: float, confidence: float = CONFIDENCE) -> bool:
    """Whether ``requests`` requests of which ``overs`` exceeded a latency bound show, at ``confidence``, that the
    ``percentile`` (a fraction: 0.99 for p99) of the latency is within that bound.

    Raises:
        ValueError: ``percentile`` or ``confidence`` outside (0, 1), or counts that are negative or ``overs >
            requests``.
    """
    _check(percentile, confidence)
    if requests < 0 or not 0 <= overs <= requests:
        raise ValueError(f"{overs} requests over the bound of {requests}: the counts must satisfy 0 <= overs <= "
                         "requests")
    return requests > 0 and float(binom.cdf(overs, requests, 1.0 - percentile)) <= 1.0 - confidence


def min_requests(overs: int, percentile: float, confidence: float = CONFIDENCE) -> int:
    """The fewest requests that state the ``percentile`` within a bound that ``overs`` of them exceeded.

    Returns:
        ``n``, the least count with :func:`holds` true: 459 for ``overs=0, percentile=0.99``, 662 with one over,
        838 with two; 44, 64 and 81 for a p90 (MLPerf Inference's published table at confidence 0.99).

    Raises:
        ValueError: as :func:`holds`, or ``overs`` negative.
    """
    _check(percentile, confidence)
    if overs < 0:
        raise ValueError(f"overs {overs!r} is negative: it counts the requests over the latency bound")
    low = max(overs + 1, math.ceil(math.log(1.0 - confidence) / math.log(percentile)))  # overs = 0 in closed form
    high = low
    while not holds(high, overs, percentile, confidence):  # the CDF falls as n grows: double, then bisect
        low, high = high + 1, high * 2
    while low < high:
        middle = (low + high) // 2
        if holds(middle, overs, percentile, confidence):
            high = middle
        else:
            low = middle + 1
    return low


def stated_overs(requests: int, percentile: float, confidence: float = CONFIDENCE) -> int | None:
    """The most requests over a bound with which ``requests`` still state the ``percentile``: None where even none
    over would not (fewer than :func:`min_requests` ``(0, percentile)``).

    Raises:
        ValueError: as :func:`holds`.
    """
    if not holds(requests, 0, percentile, confidence):
        return None
    overs = int(binom.ppf(1.0 - confidence, requests, 1.0 - percentile))  # near the answer; settle it exactly
    while overs > 0 and not holds(requests, overs, percentile, confidence):
        overs -= 1
    while overs < requests and holds(requests, overs + 1, percentile, confidence):
        overs += 1
    return overs


def percentile_bound(values: Sequence[float], percentile: float, confidence: float = CONFIDENCE) -> float | None:
    """MLPerf's early-stopping estimate of a latency percentile: the ``(t + 1)``-th largest of ``values`` with ``t``
    from :func:`stated_overs`, an upper bound of the ``percentile`` at ``confidence``; None where ``values`` are too
    few to state it (a p99 needs 459).

    Args:
        values: one latency per request, any unit (the bound is in the same unit).

    Raises:
        ValueError: as :func:`holds`.
    """
    overs = stated_overs(len(values), percentile, confidence)
    if overs is None:
        return None
    return sorted(values)[len(values) - overs - 1]

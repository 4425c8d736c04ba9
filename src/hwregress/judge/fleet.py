"""Day-one verdicts: a test's fleet baseline over the hosts of one hardware key, and a new host judged against it.

The fleet baseline is built as SuperBench builds its fleet criteria (Xiong et al., "SuperBench: Improving Cloud AI
Infrastructure Reliability with Proactive Validation", USENIX ATC 2024; github.com/microsoft/superbenchmark,
``superbench/analyzer/baseline_generation.py``, ``fix_threshold_outlier_detection``, and docs/user-tutorial
``baseline-generation.md``/``data-diagnosis.md``): the baseline is the mean over the machines; every machine that breaks
the metric's rule is dropped, and the mean is taken again over the rest, until no machine breaks it.

SuperBench's rule is a fixed ``variance`` against the mean (``(value - criteria) / criteria`` beyond a condition such
as -0.05). Centred on the mean, one wild host (a reading 100x too high) moves the mean past every healthy host, and
the loop drops the healthy hosts instead of the wild one. Here the rule is centred on the robust figures: a host
breaks it when ``|value - median| > max(ROBUST_K x MAD, FLOOR x median)`` over the hosts still kept, the MAD scaled
to a normal standard deviation (:func:`normal_mad`, ``scipy.stats.median_abs_deviation(scale="normal")``'s
figure). At least half the hosts of a
round lie within one MAD of its median, so a round never drops more than half of them, the median host is always
kept, and the loop ends within as many rounds as there are hosts. Rounds can still whittle a fleet whose hosts
disagree down to a minority: such a baseline gives no verdict (:attr:`FleetBaseline.has_majority`). The value
reported is SuperBench's: the mean of the hosts kept. The rule is two-sided: a host far faster than its fleet is not
the same machine either (another power limit or clock, a misread hardware key), and it would lift the expectation
every new host is held to. The page: docs/fleet-verdicts.md, 'The fleet baseline'.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from statistics import median as median_of

from hwregress.store.verdicts import Verdict

# Iglewicz & Hoaglin, "How to Detect and Handle Outliers" (ASQC, 1993): a modified z-score (0.6745 (x - median) /
# MAD, i.e. (x - median) / normal-scaled MAD) beyond 3.5 marks an outlier.
ROBUST_K = 3.5
LIMIT_ROUNDING = 1e-9  # relative: a value this close to the limit is at it, not beyond (rounding)
# SuperBench's default variance rule (-0.05, its data-diagnosis docs) and hwregress's accelerator threshold
# (Tolerances.throughput): hosts within 5% of the fleet's median are never dropped, however tight the others are, so
# that a fleet of near-identical hosts (MAD near 0) does not shed healthy hosts 1% apart.
FLOOR = 0.05
# The smallest threshold a day-one verdict uses: the accelerator threshold of a host judged against its own baseline.
MIN_THRESHOLD = 0.05
# scipy.stats.median_abs_deviation's scale="normal": the MAD of a normal distribution is 0.6745 of its sd
NORMAL_MAD_SCALE = 1 / NormalDist().inv_cdf(0.75)
# Fewer hosts give no usable MAD (two hosts: the MAD is half their distance), so no day-one verdict.
MIN_FLEET_HOSTS = 3


@dataclass(frozen=True)
class FleetBaseline:
    """One test's fleet baseline over the hosts of a hardware key.

    Attributes:
        test_id: the test.
        value: the mean of the kept hosts' medians (the test's unit, e.g. samples/s).
        median: the median of the kept hosts' medians.
        spread: their MAD scaled to a normal standard deviation (the test's unit).
        kept: the hosts the value stands on, sorted.
        dropped: the hosts that broke the rule in some round, sorted.
        rounds: rounds of the loop (the last drops nobody).
        sessions: sessions behind the kept hosts' medians (0 where the caller gave no counts).
    """

    test_id: str
    value: float
    median: float
    spread: float
    kept: tuple[str, ...]
    dropped: tuple[str, ...]
    rounds: int
    sessions: int = 0

    @property
    def n(self) -> int:
        """How many hosts the value stands on."""
        return len(self.kept)

    @property
    def has_majority(self) -> bool:
        """Whether the kept hosts are more than half of the hosts: rounds can whittle a fleet whose hosts disagree
        (1, 1, 2, 5, 8 keeps the two 1s), and a value a minority stands on is no fleet's."""
        return 2 * self.n > self.n + len(self.dropped)

    @property
    def relative_spread(self) -> float:
        """The spread as a fraction of the median (0.02: the hosts spread 2%)."""
        return self.spread / self.median


@dataclass(frozen=True)
class FleetVerdict:
    """A host's figure judged against its fleet (:func:`judge_against_fleet`).

    Attributes:
        test_id: the test.
        verdict: ``regression`` below ``1 - threshold`` of the fleet value, ``improvement`` above ``1 + threshold``,
            ``pass`` between; ``new`` where the fleet is too small (fewer than :data:`MIN_FLEET_HOSTS` kept) or
            has no majority (:attr:`FleetBaseline.has_majority`).
        value: the host's figure (the test's unit).
        fleet_value: the fleet baseline's value.
        ratio: value / fleet value.
        threshold: the relative change the verdict tolerated (fraction).
        n_hosts: the hosts of the fleet.
        message: one sentence naming the fleet ("against a fleet of 9 hosts").
    """

    test_id: str
    verdict: Verdict
    value: float
    fleet_value: float
    ratio: float
    threshold: float
    n_hosts: int
    message: str


def fleet_baseline(host_medians: Mapping[str, float], test_id: str = "",
                   sessions: Mapping[str, int] | None = None) -> FleetBaseline:
    """The fleet baseline of one test (module doc: SuperBench's loop with the robust rule).

    Args:
        host_medians: host id -> that host's latest median of the test (a throughput: higher is better, > 0).
        test_id: the test, for the result and error messages.
        sessions: host id -> sessions behind its median, summed over the kept hosts into ``sessions``.

    Raises:
        ValueError: no host, or a median that is not a positive finite number (names the host and the test).
    """
    if not host_medians:
        raise ValueError(f"fleet baseline of {test_id or 'a test'}: no host has a median; pass at least one")
    for host, value in host_medians.items():
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise ValueError(f"fleet baseline of {test_id or 'a test'}: host {host!r} has median {value!r}, not a "
                             "positive finite throughput; leave the host out of the fleet or fix its session")
    # sorted by value then host: the result is the same whatever the hosts' order
    kept = sorted(((float(v), h) for h, v in host_medians.items()))
    rounds = 0
    while True:
        rounds += 1
        values = [v for v, _ in kept]  # sorted
        median = median_of(values)
        limit = max(ROBUST_K * normal_mad(values, median), FLOOR * median)
        # "beyond the limit" by more than rounding: a host exactly at the 5% floor stays (1 / (1.05 x) against 1 / x
        # is 5% of the median, and the subtraction lands a few ulps above it)
        within = [(v, h) for v, h in kept if abs(v - median) <= limit * (1 + LIMIT_ROUNDING)]
        if len(within) == len(kept):
            break
        kept = within
    # the last round kept every host it looked at: its values and median are the kept hosts'
    hosts = tuple(sorted(h for _, h in kept))
    # the division rounds: the mean of three 1.9s is 1.8999999999999997, below every host it averages
    mean = min(max(math.fsum(values) / len(values), values[0]), values[-1])
    return FleetBaseline(
        test_id=test_id, value=mean, median=median,
        spread=normal_mad(values, median), kept=hosts,
        dropped=tuple(sorted(set(host_medians) - set(hosts))), rounds=rounds,
        sessions=sum((sessions or {}).get(h, 0) for h in hosts))


def normal_mad(values: Sequence[float], median: float) -> float:
    """The median absolute deviation of ``values`` from their ``median``, scaled to a normal standard deviation: the
    figure of ``scipy.stats.median_abs_deviation(values, scale="normal")``, without its 0.7 ms of argument handling
    per call (a fleet's defective hosts take a baseline per figure per host). The standard library's median: on a
    fleet's few values NumPy's costs 50 times more in argument handling, and the middle two's mean is the same
    ``(a + b) / 2``."""
    return median_of([abs(v - median) for v in values]) * NORMAL_MAD_SCALE


def fleet_baselines(by_test: Mapping[str, Mapping[str, float]], exclude: str | None = None,
                    sessions: Mapping[str, int] | None = None) -> dict[str, FleetBaseline]:
    """:func:`fleet_baseline` of each test (test id -> host id -> latest median), leaving out host ``exclude`` (the
    host judged against its fleet); a test no other host has is left out."""
    out = {}
    for test_id, hosts in by_test.items():
        others = {host: value for host, value in hosts.items() if host != exclude}
        if others:
            out[test_id] = fleet_baseline(others, test_id, sessions)
    return out


def fleet_threshold(baseline: FleetBaseline, min_threshold: float = MIN_THRESHOLD) -> float:
    """The relative change a host may show against ``baseline`` before it is a regression (fraction):
    ``max(min_threshold, ROBUST_K x relative spread x sqrt(1 + 1/N))``. A new host is one more draw from the fleet,
    not its mean: the prediction interval of one draw widens the hosts' spread by sqrt(1 + 1/N) for the fleet
    value's own uncertainty. The spread is that of the kept hosts, each a session median: it holds both the hosts'
    differences and their sessions' noise."""
    return max(min_threshold, ROBUST_K * baseline.relative_spread * math.sqrt(1 + 1 / baseline.n))


def judge_against_fleet(value: float, baseline: FleetBaseline, min_threshold: float = MIN_THRESHOLD) -> FleetVerdict:
    """A host's ``value`` (a throughput of ``baseline``'s test; higher is better) judged against the fleet.

    Peak memory (lower is better) has its own rule, a ceiling (:func:`fleet_memory_ceiling`).

    Raises:
        ValueError: ``value`` is not a positive finite number.
    """
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{baseline.test_id or 'a test'}: the host's value {value!r} is not a positive finite "
                         "throughput; judge only measured figures against the fleet")
    ratio = value / baseline.value
    threshold = fleet_threshold(baseline, min_threshold)
    fleet = (f"against a fleet of {baseline.n} hosts (mean {baseline.value:.4g}, hosts spread "
             f"{baseline.relative_spread:.1%} by MAD, {len(baseline.dropped)} dropped)")
    if baseline.n < MIN_FLEET_HOSTS:
        return FleetVerdict(baseline.test_id, Verdict.NEW, value, baseline.value, ratio, threshold, baseline.n,
                            f"no day-one verdict: a fleet of {baseline.n} hosts is too few to judge against "
                            f"({MIN_FLEET_HOSTS} needed); {ratio:.3f} x its mean")
    if not baseline.has_majority:
        return FleetVerdict(baseline.test_id, Verdict.NEW, value, baseline.value, ratio, threshold, baseline.n,
                            f"no day-one verdict: the fleet has no majority, {baseline.n} of "
                            f"{baseline.n + len(baseline.dropped)} hosts agree; {ratio:.3f} x their mean")
    if ratio < 1 - threshold:
        verdict, where = Verdict.REGRESSION, f"below the fleet by more than the {threshold:.1%} threshold"
    elif ratio > 1 + threshold:
        verdict, where = Verdict.IMPROVEMENT, f"above the fleet by more than the {threshold:.1%} threshold"
    else:
        verdict, where = Verdict.PASS, f"within the {threshold:.1%} threshold"
    return FleetVerdict(baseline.test_id, verdict, value, baseline.value, ratio, threshold, baseline.n,
                        f"{ratio:.3f} x the fleet, {where}, {fleet}")


@dataclass(frozen=True)
class FleetMemoryCeiling:
    """The peak-memory ceiling of one test on a new host, from its fleet (:func:`fleet_memory_ceiling`).

    Attributes:
        test_id: the test.
        base_bytes: the largest latest peak among the kept hosts, bytes.
        ceiling_bytes: ``base_bytes x (1 + tolerance) + slack_bytes``, bytes.
        tolerance: relative growth tolerated (fraction); slack_bytes: absolute growth tolerated, bytes.
        n: hosts kept; dropped: hosts the fleet baseline dropped.
    """

    test_id: str
    base_bytes: float
    ceiling_bytes: float
    tolerance: float
    slack_bytes: float
    n: int
    dropped: int

    def exceeded_by(self, peak_bytes: float) -> str | None:
        """The sentence of ``peak_bytes`` above the ceiling; None within it."""
        if peak_bytes <= self.ceiling_bytes:
            return None
        mib = 2**20
        slack = f" + {self.slack_bytes / mib:.0f} MiB slack" if self.slack_bytes else ""
        return (f"peak memory {peak_bytes / mib:.1f} MiB exceeds the fleet's ceiling {self.ceiling_bytes / mib:.1f} "
                f"MiB (the largest latest peak of a fleet of {self.n} hosts, {self.base_bytes / mib:.1f} MiB, x "
                f"(1 + {self.tolerance:.0%}){slack}; {self.dropped} dropped)")


def fleet_memory_ceiling(host_peaks: Mapping[str, float], test_id: str, tolerance: float,
                         slack_bytes: float = 0.0) -> FleetMemoryCeiling | None:
    """The ceiling a new host's peak memory of ``test_id`` is held to on its first day, as a host's own baseline
    holds it (:mod:`hwregress.judge.compare`'s peak-memory rule: the largest recent peak x (1 + tolerance) + slack),
    the hosts standing in for the sessions: the largest latest peak of the hosts the fleet baseline keeps, built on
    the reciprocals ``1 / peak`` (a host using far more or far less memory than the others is dropped, never the
    base); None with fewer than :data:`MIN_FLEET_HOSTS` usable hosts or no majority.

    Args:
        host_peaks: host id -> that host's latest peak memory of the test, bytes (non-positive or non-finite: unused).
        tolerance: relative growth tolerated (fraction); slack_bytes: absolute growth tolerated (bytes).
    """
    usable = {host: float(peak) for host, peak in host_peaks.items() if math.isfinite(peak) and peak > 0}
    if len(usable) < MIN_FLEET_HOSTS:
        return None
    baseline = fleet_baseline({host: 1 / peak for host, peak in usable.items()}, test_id)
    if baseline.n < MIN_FLEET_HOSTS or not baseline.has_majority:
        return None
    base = max(usable[host] for host in baseline.kept)
    return FleetMemoryCeiling(test_id, base, base * (1 + tolerance) + slack_bytes, tolerance, slack_bytes, baseline.n,
                              len(baseline.dropped))

"""The significance level each planned look at a timed window may spend.

A window judged against a baseline is looked at after planned numbers of rounds
(:meth:`hwregress.measure.timing.TimingPlan.look_rounds`), and stops at the first look that decides
(:func:`hwregress.judge.window_verdict.look_decision`). Every look tests, so the false-regression rate of the whole
window is the probability that any look's test rejects. Spending ``alpha / K`` at each of the ``K`` planned looks
(Bonferroni) bounds it by the union bound:

    P(a false regression at any look) <= sum over k of P(look k rejects) <= K x alpha / K = alpha

whatever the correlation between the looks (they share their first rounds) and whichever looks are never taken (a
window the time budget ends early, or one that decided, spends less), PROVIDED each look's test has size at most
``alpha / K``. That is the Mann-Whitney test's own assumption: under no change the window's rounds and the baseline's
samples are exchangeable independent draws. It does not hold by construction here: a host's level drifts within a
session, so rounds are autocorrelated; the baseline pools several sessions at their own levels, each thinned to a
few quantiles (:func:`hwregress.judge.lifecycle.session_quantiles`); and the gross-drop path (a ratio below
``1 - cap`` is a regression with no test) spends no alpha at all. What the thresholds (a tolerance raised by the
baseline's noise and history) add is what holds the rate there. Measured (``scripts/looks_simulation.py``, 10,000 A/A
windows a noise model, docs/data/looks_simulation.md): with the thresholds 0.00-0.03% false regressions, none by the
gross-drop path; with the test alone 0.21-0.25% where the rounds are independent or the host's slow phases are short,
and 35.54% where the level drifts (autocorrelated rounds): there the bound is the thresholds', not the test's.

Group-sequential boundaries (Pocock 1977, Biometrika 64(2); O'Brien & Fleming 1979, Biometrics 35(3); the
alpha-spending functions of Lan & DeMets 1983, Biometrika 70(3); Jennison & Turnbull, "Group Sequential Methods with
Applications to Clinical Trials", 2000) spend alpha more efficiently, but their levels
come from the joint normal law of the looks' statistics with independent increments, which rounds of a host with
slow phases do not have; and O'Brien-Fleming's tiny early levels would also make the early looks' pass (the same
level's confidence bound) rare, so clear windows would run long. docs/verdicts.md, 'Planned looks', says more.
"""

from __future__ import annotations


def look_alpha(look: int, looks: int, alpha: float) -> float:
    """The significance level of look ``look`` (1 to ``looks``) of ``looks`` planned: ``alpha / looks`` (Bonferroni,
    see the module doc). The same level serves the look's confidence bound of a pass (``1 - alpha / looks``).

    Raises:
        ValueError: ``look`` outside 1 to ``looks`` (a look the plan does not have), or ``alpha`` outside (0, 1).
    """
    if not 1 <= look <= looks:
        raise ValueError(f"look {look} of {looks} planned: a look is numbered from 1 to the planned looks")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha {alpha} is not a significance level; give one in (0, 1), e.g. 0.01")
    return alpha / looks

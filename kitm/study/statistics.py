"""Statistics of a multi-seed study: t intervals over seeds, paired comparisons against a baseline, their power.

Pure numpy/scipy (no TensorFlow), on the handful of numbers a study produces (one figure per run).

**Interval of a mean** (:func:`t_interval`). For the n values x_1..x_n of one metric over seeds:
``mean = sum(x) / n``, the sample standard deviation ``s = sqrt(sum((x - mean)^2) / (n - 1))`` (ddof = 1),
and the 95% Student t interval ``mean +- h`` with ``h = t_{0.975, n-1} * s / sqrt(n)`` (``t_{0.975, n-1}`` =
``scipy.stats.t.ppf(0.975, n - 1)``; e.g. 4.302653 for n = 3). It covers the mean over seeds of the training
procedure (same data, same flags, seeds drawn at random) 95% of the time if the per-seed figures are roughly
normal. n = 1: s and h are undefined (NaN); n = 0: everything is NaN.

**Paired comparison** (:func:`paired_comparison`). A configuration and its baseline are compared on the seeds
both have, as differences ``d_s = candidate_s - baseline_s`` (a seed fixes the data order, augmentation and
initialisation for both, so pairing removes that shared variation). Reported: the t interval of mean(d) as above,
the paired t-test p (``scipy.stats.ttest_rel``, two-sided) and the exact Wilcoxon signed-rank p
(``scipy.stats.wilcoxon(d, method="exact")``, two-sided, zero differences dropped as Wilcoxon proposed). With n
non-zero differences the exact Wilcoxon p is at least ``2 / 2^n`` (every difference with the same sign): 0.25 for
n = 3, 0.0625 for n = 5, 0.03125 for n = 6, so below 6 seeds it can never reach 0.05
(:func:`wilcoxon_smallest_p`). Degenerate cases are decided here, not by scipy's warnings: all differences zero ->
both p = 1; all differences equal and non-zero -> t-test p = 0 (t is infinite) and a zero-width interval.

**Power** (:func:`paired_t_power`, :func:`detectable_effect`, :func:`seeds_needed`). How large a true mean
improvement delta the paired comparison can see: with the observed SD of the differences, the two-sided paired
t-test at alpha 0.05 (the same event as the 95% interval excluding 0) rejects with probability
``P(|T| > t_c)``, ``T ~ nct(n - 1, delta sqrt(n) / sd)``, computed exactly from scipy's noncentral t. Reported per
claim part: the smallest delta with power 0.8 at the study's seeds, and the smallest number of seeds whose power
reaches 0.8 for the paper's reported gain. The observed SD from a handful of seeds is itself uncertain (with 4
seeds, its 95% interval spans about 0.57 to 3.7 times it), so these are planning figures, not guarantees.

**Orientation.** ``improvement`` is the difference turned so that positive is better: ``d`` for metrics where
higher is better, ``-d`` for rank metrics (medr, meanr; :func:`kitm.study.metrics.lower_is_better`). Claim
verdicts (:mod:`kitm.study.claims`) read only the improvement interval.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
from scipy import stats

CONFIDENCE = 0.95


@dataclasses.dataclass(frozen=True)
class Interval:
    """Mean of a sample with its t interval ``[mean - half_width, mean + half_width]``.

    ``std`` is the sample standard deviation (ddof = 1); ``std`` and ``half_width`` are NaN when n < 2 and every
    field but n is NaN when n = 0.
    """

    n: int
    mean: float
    std: float
    half_width: float

    @property
    def low(self) -> float:
        return self.mean - self.half_width

    @property
    def high(self) -> float:
        return self.mean + self.half_width

    @property
    def defined(self) -> bool:
        """Whether the interval exists (n >= 2)."""
        return math.isfinite(self.half_width)

    def negated(self) -> "Interval":
        """The interval of -x: the mean changes sign, the spread does not."""
        return Interval(self.n, -self.mean, self.std, self.half_width)

    def as_dict(self) -> dict[str, float | int]:
        return {"n": self.n, "mean": self.mean, "std": self.std, "half_width": self.half_width, "low": self.low,
                "high": self.high}


def t_quantile(n: int, confidence: float = CONFIDENCE) -> float:
    """``t_{(1 + confidence) / 2, n - 1}``: the two-sided Student t critical value for n values (NaN for n < 2)."""
    if n < 2:
        return math.nan
    return float(stats.t.ppf(0.5 + confidence / 2.0, n - 1))


def t_interval(values: Iterable[float], confidence: float = CONFIDENCE) -> Interval:
    """Mean, sample std (ddof = 1) and t interval half-width ``t_quantile(n) * std / sqrt(n)`` of `values`.

    >>> interval = t_interval([1.0, 2.0, 3.0])  # mean 2, std 1, half-width 4.302653 / sqrt(3)
    >>> interval.mean, interval.std, round(interval.half_width, 6)
    (2.0, 1.0, 2.484138)
    """
    x = np.asarray(list(values), dtype=np.float64)
    if x.ndim != 1:
        raise ValueError(f"t_interval takes a flat sequence of numbers; got shape {x.shape}.")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"t_interval takes finite numbers; got {x.tolist()}.")
    n = int(x.size)
    if n == 0:
        return Interval(0, math.nan, math.nan, math.nan)
    mean = float(x.mean())
    if n == 1:
        return Interval(1, mean, math.nan, math.nan)
    std = float(x.std(ddof=1))
    return Interval(n, mean, std, t_quantile(n, confidence) * std / math.sqrt(n))


def wilcoxon_smallest_p(n: int) -> float:
    """Smallest two-sided p the exact Wilcoxon signed-rank test can give with n non-zero differences: 2 / 2^n."""
    return 1.0 if n < 1 else min(1.0, 2.0 / 2.0**n)


def paired_t_test_p(differences: np.ndarray) -> float:
    """Two-sided paired t-test p of the differences (``scipy.stats.ttest_rel`` on candidate and baseline).

    Equal differences have no variance: p = 1 when they are all zero, 0 when not (t is +-infinity).
    """
    d = np.asarray(differences, dtype=np.float64)
    if d.size < 2:
        return math.nan
    if np.all(d == d[0]):
        return 1.0 if d[0] == 0 else 0.0
    # ttest_rel(a, b) is the one-sample t-test of a - b against 0; pass d and zeros to keep that identity visible.
    with warnings.catch_warnings():  # nearly equal differences: scipy warns of precision loss; p is still right
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(stats.ttest_rel(d, np.zeros_like(d)).pvalue)


def wilcoxon_p(differences: np.ndarray) -> float:
    """Two-sided exact Wilcoxon signed-rank p of the differences (zero differences dropped); 1 if all are zero."""
    d = np.asarray(differences, dtype=np.float64)
    if d.size == 0:
        return math.nan
    if np.all(d == 0):
        return 1.0
    with warnings.catch_warnings():  # scipy warns about small samples and ties; the report states the limits
        warnings.simplefilter("ignore")
        return float(stats.wilcoxon(d, method="exact").pvalue)


@dataclasses.dataclass(frozen=True)
class PairedComparison:
    """A configuration against its baseline on the seeds both have.

    ``difference`` is the t interval of candidate - baseline; ``improvement`` the same turned so that positive
    is better (``difference`` itself unless ``lower_is_better``).
    """

    seeds: tuple[int, ...]
    difference: Interval
    lower_is_better: bool
    t_test_p: float
    wilcoxon_p: float

    @property
    def improvement(self) -> Interval:
        return self.difference.negated() if self.lower_is_better else self.difference

    @property
    def wilcoxon_smallest_p(self) -> float:
        return wilcoxon_smallest_p(len(self.seeds))

    def as_dict(self) -> dict[str, object]:
        return {"seeds": list(self.seeds), "n": len(self.seeds), "lower_is_better": self.lower_is_better,
                "difference": self.difference.as_dict(), "improvement": self.improvement.as_dict(),
                "t_test_p": self.t_test_p, "wilcoxon_p": self.wilcoxon_p,
                "wilcoxon_smallest_p": self.wilcoxon_smallest_p}


def paired_comparison(candidate: Mapping[int, float], baseline: Mapping[int, float], *,
                      lower_is_better: bool = False, confidence: float = CONFIDENCE) -> PairedComparison:
    """Compare per-seed figures {seed: value} of a candidate and its baseline on their common seeds.

    Seeds only one side has are left out (a failed or missing run removes its pair, not the whole comparison).
    """
    seeds = tuple(sorted(set(candidate) & set(baseline)))
    d = np.array([float(candidate[s]) - float(baseline[s]) for s in seeds], dtype=np.float64)
    return PairedComparison(seeds=seeds, difference=t_interval(d, confidence), lower_is_better=bool(lower_is_better),
                            t_test_p=paired_t_test_p(d), wilcoxon_p=wilcoxon_p(d))


def blocked_interval(blocks: Sequence[Iterable[float]], confidence: float = CONFIDENCE) -> Interval:
    """The mean paired difference over several blocks (worlds), each block a fixed effect, with its t interval.

    With blocks w = 1..W of n_w differences d_ws (e.g. the seeds of one configuration pair in world w):

        mean = (1 / W) sum_w dbar_w                      (every block weighs the same)
        s_p^2 = sum_w sum_s (d_ws - dbar_w)^2 / df,  df = sum_w (n_w - 1)   (the variance within blocks)
        SE = s_p sqrt(sum_w 1 / n_w) / W,  interval = mean +- t(1 - alpha / 2, df) SE

    the least-squares estimate of the mean of the block means in the model d_ws = mu_w + e_ws (a one-way layout
    with the block as a fixed effect; e.g. Montgomery, *Design and Analysis of Experiments*, randomized blocks): the
    spread between worlds is not error, and the interval speaks of these worlds. ``std`` is s_p, ``n`` the number
    of differences. Blocks with no difference are left out; the interval is undefined when df < 1.
    """
    arrays = [np.asarray(list(block), dtype=np.float64) for block in blocks]
    arrays = [a for a in arrays if a.size]
    n = int(sum(a.size for a in arrays))
    if not arrays:
        return Interval(0, math.nan, math.nan, math.nan)
    means = np.array([a.mean() for a in arrays])
    mean = float(means.mean())
    df = sum(a.size - 1 for a in arrays)
    if df < 1:
        return Interval(n, mean, math.nan, math.nan)
    pooled = math.sqrt(sum(float(((a - a.mean()) ** 2).sum()) for a in arrays) / df)
    standard_error = pooled * math.sqrt(sum(1.0 / a.size for a in arrays)) / len(arrays)
    half = float(stats.t.ppf(0.5 + confidence / 2, df)) * standard_error
    return Interval(n, mean, pooled, half)


def random_effect_interval(blocks: Sequence[Iterable[float]], confidence: float = CONFIDENCE) -> Interval:
    """The mean paired difference over several blocks (worlds) with the block as a *random* effect, and its interval.

    In the model d_ws = mu + b_w + e_ws (worlds drawn from a population of worlds, b_w ~ N(0, sigma_b^2)), the mean
    of the W block means dbar_w estimates mu, and with the same number of differences in every block its variance is
    estimated without bias by the variance of the block means over W (Montgomery, *Design and Analysis of
    Experiments*, the random-effects model; the Hartung-Knapp form of a meta-analysis' interval):

        mean = (1 / W) sum_w dbar_w,   s_b^2 = sum_w (dbar_w - mean)^2 / (W - 1)
        interval = mean +- t(1 - alpha / 2, W - 1) s_b / sqrt(W)

    so the spread *between* worlds is error here: the interval speaks of a new world drawn by the same generator,
    where :func:`blocked_interval`'s speaks of these worlds. With three worlds it has 2 degrees of freedom (t = 4.30)
    and is wide. ``std`` is s_b, ``n`` the number of blocks. Blocks with no difference are left out; the interval is
    undefined with fewer than two blocks.
    """
    arrays = [np.asarray(list(block), dtype=np.float64) for block in blocks]
    means = np.array([a.mean() for a in arrays if a.size])
    if means.size == 0:
        return Interval(0, math.nan, math.nan, math.nan)
    mean = float(means.mean())
    if means.size < 2:
        return Interval(int(means.size), mean, math.nan, math.nan)
    spread = float(means.std(ddof=1))
    half = float(stats.t.ppf(0.5 + confidence / 2, means.size - 1)) * spread / math.sqrt(means.size)
    return Interval(int(means.size), mean, spread, half)


def blocked_comparison(pairs: Sequence[tuple[str, Mapping[int, float], Mapping[int, float]]], *,
                       lower_is_better: bool = False, confidence: float = CONFIDENCE) -> PairedComparison:
    """A candidate against its baseline in several blocks (label, candidate {seed: value}, baseline {seed: value}),
    paired by seed within each block and pooled with the block as a fixed effect (:func:`blocked_interval`).
    ``seeds`` are ``"<label>/<seed>"``; the t-test p is that of the blocked t statistic; the Wilcoxon p is not
    defined for blocks (NaN)."""
    blocks, seeds = [], []
    for label, candidate, baseline in pairs:
        common = sorted(set(candidate) & set(baseline))
        blocks.append([float(candidate[s]) - float(baseline[s]) for s in common])
        seeds += [f"{label}/{s}" for s in common]
    interval = blocked_interval(blocks, confidence)
    p = math.nan
    if interval.defined:
        df = sum(len(b) - 1 for b in blocks if b)
        se = interval.half_width / float(stats.t.ppf(0.5 + confidence / 2, df))
        p = (1.0 if interval.mean == 0 else 0.0) if se == 0 else float(2 * stats.t.sf(abs(interval.mean) / se, df))
    return PairedComparison(seeds=tuple(seeds), difference=interval, lower_is_better=bool(lower_is_better),
                            t_test_p=p, wilcoxon_p=math.nan)


# ------------------------------------------------------------------------------------------------------- power

ALPHA = round(1.0 - CONFIDENCE, 12)  # the two-sided level of the paired t-test whose 95% interval the verdicts read
POWER = 0.8  # the power a study should have to detect the effect it looks for (Cohen's convention)
MAX_SEEDS = 100_000  # seeds_needed gives up (None) beyond this


def paired_t_power(effect: float, sd: float, n: int, alpha: float = ALPHA) -> float:
    """Power of the two-sided paired t-test at level `alpha` to detect a true mean difference `effect` when the
    paired differences have standard deviation `sd` and there are `n` pairs (seeds).

    With ``df = n - 1``, ``t_c = t_{1 - alpha/2, df}`` and the noncentrality ``nc = effect * sqrt(n) / sd``, the
    test statistic ``T = mean(d) / (s / sqrt(n))`` follows the noncentral t distribution ``nct(df, nc)``, and the
    test rejects when ``|T| > t_c``::

        power = P(T > t_c) + P(T < -t_c) = nct.sf(t_c, df, nc) + nct.cdf(-t_c, df, nc)

    (exact, no normal approximation; the sign of `effect` does not matter). Rejecting at level alpha is the same
    event as the (1 - alpha) t interval excluding 0, which is what the "improves" rule reads. scipy returns NaN for
    the far tail ``nct.cdf(-t_c, df, nc)`` when it is below about 1e-20; since ``T < -t_c`` needs ``Z + |nc| < 0``
    with Z standard normal, that tail is at most ``Phi(-|nc|)``, so it is taken as 0 then (error < Phi(-|nc|)).

    Edge cases: n < 2 (no test) or a NaN input -> NaN; sd = 0 -> 1 for a non-zero effect (every difference equals
    it: T is infinite), alpha for a zero one.
    """
    if n < 2 or not (math.isfinite(effect) and math.isfinite(sd)) or sd < 0:
        return math.nan
    if sd == 0:
        return 1.0 if effect != 0 else alpha
    df = n - 1
    t_critical = float(stats.t.ppf(1.0 - alpha / 2.0, df))
    nc = abs(effect) * math.sqrt(n) / sd
    upper = float(stats.nct.sf(t_critical, df, nc))
    lower = float(stats.nct.cdf(-t_critical, df, nc))
    if not math.isfinite(lower):
        lower = 0.0
    lower = min(lower, float(stats.norm.cdf(-nc)))
    if not math.isfinite(upper):  # not seen in practice; the upper tail is then 1 to double precision
        upper = 1.0 if nc > t_critical else math.nan
    return min(1.0, upper + lower)


def detectable_effect(sd: float, n: int, alpha: float = ALPHA, power: float = POWER) -> float:
    """The smallest true mean difference the two-sided paired t-test detects with probability `power` at level
    `alpha` with `n` seeds when the paired differences have standard deviation `sd`.

    Solves ``paired_t_power(delta, sd, n, alpha) = power`` for delta > 0 with ``scipy.optimize.brentq``: the power
    rises from alpha at delta = 0 to 1 as delta grows (the noncentral t's mass moves past t_c), so the root is
    unique. It scales with sd: ``detectable_effect(sd, n) = sd * detectable_effect(1, n)``: 11.55 sd at n = 2,
    3.26 sd at n = 3, 2.13 sd at n = 4, 1.00 sd at n = 10, 0.53 sd at n = 30. n < 2 or a NaN sd -> NaN; sd = 0 -> 0.
    """
    if not 0.0 < alpha < power < 1.0:
        raise ValueError(f"need 0 < alpha < power < 1; got alpha {alpha}, power {power}.")
    if n < 2 or not math.isfinite(sd) or sd < 0:
        return math.nan
    if sd == 0:
        return 0.0
    from scipy import optimize

    def shortfall(standardized: float) -> float:
        return paired_t_power(standardized, 1.0, n, alpha) - power

    high = 1.0
    while shortfall(high) < 0:  # power at delta = 0 is alpha < power: bracket the root from above
        high *= 2.0
    return sd * float(optimize.brentq(shortfall, 0.0, high, xtol=1e-12, rtol=1e-12))


def seeds_needed(effect: float, sd: float, alpha: float = ALPHA, power: float = POWER,
                 max_seeds: int = MAX_SEEDS) -> int | None:
    """The smallest number of seeds n >= 2 at which the two-sided paired t-test has at least `power` to detect a
    true mean difference `effect` with paired differences of standard deviation `sd` (:func:`paired_t_power`).

    The power grows with n (the noncentrality effect * sqrt(n) / sd grows and t_c shrinks), so the smallest such n
    is found by doubling and then bisection. Textbook check: effect / sd = 0.5 (Cohen's medium d) needs 34 pairs.
    None when more than `max_seeds` would be needed, when effect is 0, or for a NaN input; sd = 0 -> 2.
    """
    if not (math.isfinite(effect) and math.isfinite(sd)) or sd < 0 or effect == 0:
        return None
    if paired_t_power(effect, sd, 2, alpha) >= power:
        return 2
    low, high = 2, 4  # power(low) < power <= power(high) once high is found
    while paired_t_power(effect, sd, high, alpha) < power:
        low, high = high, high * 2
        if low > max_seeds:
            return None
    while high - low > 1:
        middle = (low + high) // 2
        if paired_t_power(effect, sd, middle, alpha) >= power:
            high = middle
        else:
            low = middle
    return high if high <= max_seeds else None


@dataclasses.dataclass(frozen=True)
class Power:
    """How large an effect a paired comparison could see: the observed SD of the paired differences over the n
    seeds, the smallest effect detectable at n (:func:`detectable_effect`), and for a reference effect (a paper's
    reported gain) the power at n seeds and the seeds it needs (:func:`seeds_needed`)."""

    n: int
    sd: float
    detectable: float
    effect: float | None = None
    power_at_effect: float = math.nan
    seeds_for_effect: int | None = None
    alpha: float = ALPHA
    target_power: float = POWER

    def as_dict(self) -> dict[str, object]:
        return {"n": self.n, "sd": self.sd, "detectable_effect": self.detectable, "paper_effect": self.effect,
                "power_at_paper_effect": self.power_at_effect, "seeds_for_paper_effect": self.seeds_for_effect,
                "alpha": self.alpha, "power": self.target_power}


def power_of(difference: Interval, effect: float | None = None, alpha: float = ALPHA,
             power: float = POWER) -> Power:
    """The :class:`Power` of a paired comparison whose differences have the interval `difference` (its std is the
    sample SD of the differences, ddof 1), for an optional reference `effect`."""
    n, sd = difference.n, difference.std
    if effect is None:
        return Power(n, sd, detectable_effect(sd, n, alpha, power), alpha=alpha, target_power=power)
    return Power(n, sd, detectable_effect(sd, n, alpha, power), effect, paired_t_power(effect, sd, n, alpha),
                 seeds_needed(effect, sd, alpha, power), alpha, power)

"""Statistics of a multi-seed study: t intervals over seeds and paired comparisons against a baseline.

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

**Orientation.** ``improvement`` is the difference turned so that positive is better: ``d`` for metrics where
higher is better, ``-d`` for rank metrics (medr, meanr; :func:`kitm.study.metrics.lower_is_better`). Claim
verdicts (:mod:`kitm.study.claims`) read only the improvement interval.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Iterable, Mapping

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

"""Verdicts on a study's claims, read off the 95% interval of each paired improvement.

A claim says that a configuration *improves* some metrics over a baseline and *keeps* others (no worse than the
baseline by more than a tolerance). Each part is judged on the paired comparison of
:mod:`kitm.study.statistics`: ``[low, high]`` is the 95% t interval of the mean improvement over the seeds both
configurations have (candidate - baseline, turned so that positive is better; for medr and meanr that is a
decrease).

- improves metric m: **supports** if ``low > 0`` (the whole interval above zero); **contradicts** if
  ``high < 0`` (the whole interval below zero: significantly worse); **inconclusive** otherwise.
- keeps metric m within tolerance tau >= 0 (in m's own units, e.g. percent points): **supports** if
  ``low >= -tau`` (any loss is smaller than tau at 95%); **contradicts** if ``high < -tau`` (the loss is larger
  than tau at 95%); **inconclusive** otherwise.
- An undefined interval (fewer than two paired seeds) or a metric without figures is **inconclusive**.

The claim **holds** if every part supports, **does not hold** if any part contradicts, and is **inconclusive**
otherwise. These are interval checks, not multiplicity-corrected tests: a claim with many parts is judged part by
part at 95% each.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping

from kitm.study.statistics import Interval, PairedComparison

SUPPORTS = "supports"
CONTRADICTS = "contradicts"
INCONCLUSIVE = "inconclusive"
HOLDS = "holds"
DOES_NOT_HOLD = "does not hold"

IMPROVES = "improves"
KEEPS = "keeps"

RULES = (
    "improves m: supports if the 95% interval of the paired improvement lies entirely above 0, contradicts if it "
    "lies entirely below 0, inconclusive otherwise.",
    "keeps m within tau: supports if the interval's lower bound is >= -tau, contradicts if its upper bound is "
    "< -tau, inconclusive otherwise.",
    "Improvement = candidate - baseline, negated for metrics where lower is better (medr, meanr); the interval is "
    "mean +- t(0.975, n-1) * std / sqrt(n) over the n seeds both configurations have; n < 2 is inconclusive.",
    "The claim holds if every part supports, does not hold if any part contradicts, and is inconclusive otherwise.",
)


def improves_verdict(improvement: Interval) -> str:
    """Verdict on "improves": the interval of the improvement above 0, below 0, or straddling it."""
    if not improvement.defined:
        return INCONCLUSIVE
    if improvement.low > 0:
        return SUPPORTS
    if improvement.high < 0:
        return CONTRADICTS
    return INCONCLUSIVE


def keeps_verdict(improvement: Interval, tolerance: float) -> str:
    """Verdict on "keeps within `tolerance`": any loss provably smaller than it, provably larger, or neither."""
    if not (math.isfinite(tolerance) and tolerance >= 0):
        raise ValueError(f"a keep tolerance must be a finite number >= 0; got {tolerance!r}.")
    if not improvement.defined:
        return INCONCLUSIVE
    if improvement.low >= -tolerance:
        return SUPPORTS
    if improvement.high < -tolerance:
        return CONTRADICTS
    return INCONCLUSIVE


def claim_verdict(part_verdicts: list[str]) -> str:
    """holds if every part supports, does not hold if any contradicts, else inconclusive (no parts: inconclusive)."""
    if any(v == CONTRADICTS for v in part_verdicts):
        return DOES_NOT_HOLD
    if part_verdicts and all(v == SUPPORTS for v in part_verdicts):
        return HOLDS
    return INCONCLUSIVE


@dataclasses.dataclass(frozen=True)
class ClaimPart:
    """One metric of a claim, its rule, the numbers behind the verdict, and the verdict."""

    kind: str  # IMPROVES or KEEPS
    metric: str
    tolerance: float | None
    comparison: PairedComparison | None  # None: no run of either configuration has this metric
    verdict: str
    note: str = ""

    def as_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "metric": self.metric, "tolerance": self.tolerance, "verdict": self.verdict,
                "note": self.note, "comparison": None if self.comparison is None else self.comparison.as_dict()}


@dataclasses.dataclass(frozen=True)
class ClaimResult:
    name: str
    configuration: str
    baseline: str
    parts: tuple[ClaimPart, ...]

    @property
    def verdict(self) -> str:
        return claim_verdict([part.verdict for part in self.parts])

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "configuration": self.configuration, "baseline": self.baseline,
                "verdict": self.verdict, "parts": [part.as_dict() for part in self.parts]}


def judge_claim(name: str, configuration: str, baseline: str, improves: list[str], keeps: list[str],
                tolerances: Mapping[str, float],
                compare: Callable[[str, str, str], PairedComparison | None]) -> ClaimResult:
    """Judge every part of a claim; ``compare(configuration, baseline, metric)`` gives the paired comparison, or
    None when the metric has no figures in either configuration's runs."""
    parts = []
    for kind, metrics in ((IMPROVES, improves), (KEEPS, keeps)):
        for metric in metrics:
            tolerance = float(tolerances[metric]) if kind == KEEPS else None
            comparison = compare(configuration, baseline, metric)
            if comparison is None:
                parts.append(ClaimPart(kind, metric, tolerance, None, INCONCLUSIVE,
                                       f"no run of {configuration} or {baseline} has figures for {metric}"))
                continue
            improvement = comparison.improvement
            verdict = improves_verdict(improvement) if kind == IMPROVES else keeps_verdict(improvement, tolerance)
            note = "" if improvement.defined else f"{len(comparison.seeds)} paired seed(s): no interval"
            parts.append(ClaimPart(kind, metric, tolerance, comparison, verdict, note))
    return ClaimResult(name, configuration, baseline, tuple(parts))

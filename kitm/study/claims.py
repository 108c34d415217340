"""Verdicts on a study's claims, read off the 95% interval of each paired improvement, against the paper's own effect.

A claim says that a configuration *improves* some metrics over a baseline and *keeps* others (no worse than the
baseline by more than a tolerance). Each part is judged on the paired comparison of
:mod:`kitm.study.statistics`: ``[low, high]`` is the 95% t interval of the mean improvement over the seeds both
configurations have (candidate - baseline, turned so that positive is better; for medr and meanr that is a
decrease).

**Parts.**

- improves metric m: **supports** if ``low > 0`` (the whole interval above zero); **contradicts** if
  ``high < 0`` (the whole interval below zero: significantly worse); **inconclusive** otherwise. When the spec
  gives the paper's own gain g_m for m (``paper_effect``, fixed before any run), the part also **excludes the
  paper's effect** if ``high < g_m``: an improvement as large as the paper reports is ruled out at 95%.
- keeps metric m within tolerance tau >= 0 (in m's own units, e.g. percent points): **supports** if
  ``low >= -tau`` (any loss is smaller than tau at 95%); **contradicts** if ``high < -tau`` (the loss is larger
  than tau at 95%); **inconclusive** otherwise.
- An undefined interval (fewer than two paired seeds) or a metric without figures is **inconclusive** (and
  excludes nothing).

**The truth control** (optional ``truth_control``): a configuration that trains the claim's method on the world's
exact relevance. It **beats the baseline** if every one of its ``truth_control_metrics`` (default: the claim's
"improves") has an improvement interval above 0 against the claim's baseline, **does not beat the baseline** if
some defined interval does not lie above 0, and is **unavailable** when it lacks figures or paired seeds. A control
that does not beat the baseline says that this world and model cannot show graded relevance helping at all.

**The claim** ends as exactly one of, in this order of precedence (the first that applies):

1. **mixed**: some part supports and some part contradicts (the claim holds on these parts and not on those; the
   reason names both, part by part);
2. **does not hold**: some part contradicts (an improvement interval entirely below 0, or a kept metric's interval
   entirely below -tau) and no part supports;
3. **holds**: every part supports (every improvement interval above 0, every kept metric's lower bound >= -tau);
4. **untestable here**: the truth control does not beat the baseline;
5. **below the paper's effect**: some improvement interval excludes the paper's gain for its metric;
6. **inconclusive**: none of these; the report then gives the seeds the observed SD of the paired differences
   needs to detect the paper's effect (:func:`kitm.study.statistics.seeds_needed`).

Why this order. "mixed", "does not hold" and "holds" are findings about the method's direction that stand on
their own: an interval entirely on one side of 0 (or of -tau) is evidence whatever the control did. A paper
reports several figures for one claim (CS at K = 100 and 1000, both directions; R@K kept while NCS rises), and a
method can move them in opposite directions; "mixed" says so instead of letting one contradicted part stand for
the claim (the rule before session 14, under which any contradicted part made the claim "does not hold"). A
holding claim is reported as holding even when the truth control fails (the method helps where even the exact
relevance did not; the reason text says so). "below the paper's effect" is a finding about size, and a
paper's size is only a fair yardstick where graded relevance can pay off at all: the paper measured its gain on
real data where it does. When the method's own truth-relevance variant does not beat the baseline either, a gain
smaller than the paper's says something about the world and the model, not about the method, so "untestable here"
comes first (the reason text and the JSON still say which parts excluded the paper's effect). A holding claim whose
gain is significantly smaller than the paper's is "holds" with that caveat in its reason: the claim as stated (it
improves) is true here; how much is the interval's business.

Claims without ``paper_effect`` never reach outcome 4 and claims without ``truth_control`` never reach 3: they
end as holds, does not hold or inconclusive exactly as under the earlier rules. These are interval checks, not
multiplicity-corrected tests: a claim with many parts is judged part by part at 95% each.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence

from kitm.study.bootstrap import QueryBootstrap
from kitm.study.metrics import decimals
from kitm.study.statistics import ALPHA, POWER, Interval, PairedComparison, Power, power_of

SUPPORTS = "supports"
CONTRADICTS = "contradicts"
INCONCLUSIVE = "inconclusive"
HOLDS = "holds"
MIXED = "mixed"
DOES_NOT_HOLD = "does not hold"
BELOW_PAPER = "below the paper's effect"
UNTESTABLE = "untestable here"
COLLAPSES = "does not hold: training collapses"  # a study's collapse rule (kitm.study.spec.VerdictRules)
OUTCOMES = (COLLAPSES, MIXED, DOES_NOT_HOLD, HOLDS, UNTESTABLE, BELOW_PAPER, INCONCLUSIVE)  # in order of precedence

CONTROL_BEATS = "beats the baseline"
CONTROL_FAILS = "does not beat the baseline"
CONTROL_UNAVAILABLE = "unavailable"

IMPROVES = "improves"
KEEPS = "keeps"
VIEW = "view"  # a figure shown beside a claim (judged as "improves" for display) that never decides it

RULES = (
    "improves m: supports if the 95% interval of the paired improvement lies entirely above 0, contradicts if it "
    "lies entirely below 0, inconclusive otherwise; with the paper's gain g for m, it excludes the paper's effect "
    "if its upper bound is < g.",
    "keeps m within tau: supports if the interval's lower bound is >= -tau, contradicts if its upper bound is "
    "< -tau, inconclusive otherwise.",
    "Improvement = candidate - baseline, negated for metrics where lower is better (medr, meanr); the interval is "
    "mean +- t(0.975, n-1) * std / sqrt(n) over the n seeds both configurations have; n < 2 is inconclusive.",
    "Truth control: beats the baseline if each of its metrics' improvement intervals against the claim's baseline "
    "lies above 0; a control that does not says this world and model cannot show graded relevance helping.",
    "The claim, first rule that applies: mixed if some part supports and some part contradicts; does not hold if "
    "some part contradicts and none supports; holds if every part supports; "
    "untestable here if the truth control does not beat the baseline; below the paper's effect if some "
    "improvement interval excludes the paper's gain; inconclusive otherwise.",
    f"Power: two-sided paired t-test at alpha {ALPHA:.2f}, power {POWER:.1f}, exact (noncentral t: power = "
    "P(|T| > t_c), T ~ nct(n-1, delta sqrt(n) / sd)), with sd the observed SD of the paired differences.",
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


def excludes_effect(improvement: Interval, effect: float | None) -> bool:
    """Whether the improvement interval rules out the paper's gain `effect` (its upper bound lies below it)."""
    return effect is not None and improvement.defined and improvement.high < effect


def claim_verdict(part_verdicts: list[str]) -> str:
    """The direction rules alone: mixed if some part supports and some contradicts, does not hold if some
    contradicts and none supports, holds if every part supports, else inconclusive (no parts: inconclusive).
    :func:`claim_outcome` adds the truth control and the paper's effect."""
    if any(v == CONTRADICTS for v in part_verdicts):
        return MIXED if any(v == SUPPORTS for v in part_verdicts) else DOES_NOT_HOLD
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
    paper_effect: float | None = None  # the paper's gain (improves parts whose claim gives one)
    power: Power | None = None  # None without figures
    bootstrap: QueryBootstrap | None = None  # None: no per-query data (bootstrap_note says why)
    bootstrap_note: str = ""
    paper_source: str = ""  # where the paper reports this part (table and cell), when it does
    # With several worlds and the study's random-effect rule: the improvement with the world as a random effect
    # (kitm.study.statistics.random_effect_interval), shown beside the pooled (fixed-block) verdict, never deciding it.
    random_effect: Interval | None = None

    @property
    def excludes_paper_effect(self) -> bool:
        return self.comparison is not None and excludes_effect(self.comparison.improvement, self.paper_effect)

    def as_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "metric": self.metric, "tolerance": self.tolerance, "verdict": self.verdict,
                "note": self.note, "comparison": None if self.comparison is None else self.comparison.as_dict(),
                "paper_effect": self.paper_effect, "excludes_paper_effect": self.excludes_paper_effect,
                "power": None if self.power is None else self.power.as_dict(),
                "bootstrap": None if self.bootstrap is None else self.bootstrap.as_dict(),
                "bootstrap_note": self.bootstrap_note, "paper_source": self.paper_source,
                "random_effect": None if self.random_effect is None else _interval_dict(self.random_effect)}


def _interval_dict(interval: Interval) -> dict[str, object]:
    return {"n": interval.n, "mean": interval.mean, "low": interval.low, "high": interval.high}


@dataclasses.dataclass(frozen=True)
class Collapse:
    """A study's collapse rule applied to a claim's configuration: ``collapsed`` of its ``runs`` (every world) ended
    with the image embeddings' mean pairwise cosine at or above ``threshold`` (the collapse monitor's statistic,
    from ``lowest`` to ``highest`` over the runs)."""

    configurations: tuple[str, ...]
    collapsed: int
    runs: int
    threshold: float
    share: float  # the rule's share: the claim collapses when collapsed / runs >= share
    lowest: float
    highest: float

    @property
    def applies(self) -> bool:
        return self.runs > 0 and self.collapsed / self.runs >= self.share

    @property
    def text(self) -> str:
        return (f"{self.collapsed} of {self.runs} runs of {', '.join(self.configurations)} ended with the image "
                f"embeddings' mean pairwise cosine >= {self.threshold:g} (the collapse monitor; {self.lowest:.4f} to "
                f"{self.highest:.4f} over the runs)")

    def as_dict(self) -> dict[str, object]:
        return {"configurations": list(self.configurations), "collapsed": self.collapsed, "runs": self.runs,
                "threshold": self.threshold, "share": self.share, "lowest": self.lowest, "highest": self.highest,
                "applies": self.applies}


@dataclasses.dataclass(frozen=True)
class TruthControl:
    """The claim's truth-relevance configuration against the claim's baseline, one "improves" part per metric."""

    configuration: str
    baseline: str
    parts: tuple[ClaimPart, ...]

    @property
    def verdict(self) -> str:
        """beats the baseline / does not beat the baseline / unavailable (module docstring)."""
        defined = [p for p in self.parts if p.comparison is not None and p.comparison.improvement.defined]
        if any(p.verdict != SUPPORTS for p in defined):
            return CONTROL_FAILS
        if len(defined) < len(self.parts) or not self.parts:
            return CONTROL_UNAVAILABLE
        return CONTROL_BEATS

    @property
    def failing(self) -> tuple[ClaimPart, ...]:
        """The control's parts whose interval is defined and not above 0."""
        return tuple(p for p in self.parts if p.comparison is not None and p.comparison.improvement.defined
                     and p.verdict != SUPPORTS)

    def as_dict(self) -> dict[str, object]:
        return {"configuration": self.configuration, "baseline": self.baseline, "verdict": self.verdict,
                "parts": [part.as_dict() for part in self.parts]}


def _number(value: float, metric: str) -> str:
    return f"{value:.{decimals(metric)}f}" if math.isfinite(value) else "n/a"


def describe_interval(part: ClaimPart) -> str:
    """``i2t_CS@100 -0.0067 [-0.0208, 0.0074]`` (the metric, mean improvement and interval)."""
    if part.comparison is None:
        return f"{part.metric} (no figures)"
    interval = part.comparison.improvement
    if not interval.defined:
        return f"{part.metric} {_number(interval.mean, part.metric)} (no interval: {interval.n} paired seed(s))"
    return (f"{part.metric} {_number(interval.mean, part.metric)} [{_number(interval.low, part.metric)}, "
            f"{_number(interval.high, part.metric)}]")


def _seeds_text(part: ClaimPart) -> str:
    power = part.power
    if power is None or part.paper_effect is None:
        return ""
    needed = power.seeds_for_effect
    if needed is None:
        return f"{part.metric}: no number of seeds (SD {_number(power.sd, part.metric)})"
    return (f"{part.metric}: {needed} seeds for the paper's {_number(part.paper_effect, part.metric)} at the "
            f"observed SD {_number(power.sd, part.metric)} (power at {power.n} seeds: {power.power_at_effect:.2f})")


def claim_outcome(parts: Sequence[ClaimPart], control: TruthControl | None = None) -> tuple[str, str, int | None]:
    """(verdict, reason, index of the key part) of a claim from its judged parts and its truth control, by the
    precedence of the module docstring. The key part is the one the verdict rests on (the summary table's
    interval): the first contradicting part, the first part excluding the paper's effect, else the first part."""
    parts = list(parts)
    key = 0 if parts else None
    failing_control = control is not None and control.verdict == CONTROL_FAILS
    control_text = ""
    if failing_control:
        control_text = (f"the truth control `{control.configuration}` does not beat `{control.baseline}` on "
                        + "; ".join(describe_interval(p) for p in control.failing))
    below = [i for i, p in enumerate(parts) if p.kind == IMPROVES and p.excludes_paper_effect]
    below_text = "; ".join(f"{describe_interval(parts[i])} excludes the paper's "
                           f"{_number(parts[i].paper_effect, parts[i].metric)}" for i in below)

    wrong = [i for i, p in enumerate(parts) if p.verdict == CONTRADICTS]
    if wrong:
        texts = [f"{describe_interval(parts[i])} lies below "
                 + ("0" if parts[i].kind == IMPROVES else f"-{_number(parts[i].tolerance, parts[i].metric)}")
                 for i in wrong]
        right = [i for i, p in enumerate(parts) if p.verdict == SUPPORTS]
        if right:
            held = "; ".join(describe_interval(parts[i]) + (" lies above 0" if parts[i].kind == IMPROVES else
                                                            f" keeps within {_number(parts[i].tolerance, parts[i].metric)}")
                             for i in right)
            return MIXED, f"holds on {held}; does not hold on " + "; ".join(texts), wrong[0]
        return DOES_NOT_HOLD, "; ".join(texts), wrong[0]
    if parts and all(p.verdict == SUPPORTS for p in parts):
        reason = "every improvement interval lies above 0 and every kept metric within its tolerance"
        if below:
            reason += f"; but the gain is smaller than the paper's: {below_text}"
        if failing_control:
            reason += f"; the method helps although {control_text}"
        return HOLDS, reason, key
    if failing_control:
        reason = f"{control_text}: this world and model cannot show graded relevance helping"
        if below:
            reason += f" (the method's {below_text})"
        return UNTESTABLE, reason, key
    if below:
        return BELOW_PAPER, below_text, below[0]
    undecided = [p for p in parts if p.verdict != SUPPORTS]
    needs = [text for p in undecided if (text := _seeds_text(p))]
    if needs:
        reason = "detecting the paper's effect needs " + "; ".join(needs)
    else:
        detectable = [f"{p.metric} {_number(p.power.detectable, p.metric)}" for p in undecided
                      if p.power is not None and math.isfinite(p.power.detectable)]
        n = next((p.power.n for p in undecided if p.power is not None), 0)
        reason = (f"smallest effects detectable at {n} seeds (power {POWER:.1f}): " + ", ".join(detectable)
                  if detectable else "too few paired seeds for an interval")
    if control is not None and control.verdict == CONTROL_UNAVAILABLE:
        reason += f"; the truth control `{control.configuration}` has no interval"
    return INCONCLUSIVE, reason, key


@dataclasses.dataclass(frozen=True)
class ClaimResult:
    name: str
    configuration: str
    baseline: str
    parts: tuple[ClaimPart, ...]
    truth_control: TruthControl | None = None
    paper_effect_source: str | None = None
    views: tuple[ClaimPart, ...] = ()  # secondary figures: shown, never part of the verdict
    per_block: tuple[tuple[str, "ClaimResult"], ...] = ()  # each world's own verdict, when the claim spans several
    collapse: Collapse | None = None  # the study's collapse rule, when it has one

    @property
    def block_note(self) -> str:
        """"" with one block or when every block's verdict is the pooled one; else which world says what."""
        verdicts = [(label, result.verdict) for label, result in self.per_block]
        if not verdicts or all(verdict == self.verdict for _, verdict in verdicts):
            return ""
        return "the worlds disagree: " + "; ".join(f"{label} {verdict}" for label, verdict in verdicts)

    @property
    def outcome(self) -> tuple[str, str, int | None]:
        if self.collapse is not None and self.collapse.applies:
            return (COLLAPSES, f"{self.collapse.text}; its parts are shown for information only",
                    0 if self.parts else None)
        return claim_outcome(self.parts, self.truth_control)

    @property
    def verdict(self) -> str:
        return self.outcome[0]

    @property
    def reason(self) -> str:
        return self.outcome[1]

    @property
    def key_part(self) -> ClaimPart | None:
        index = self.outcome[2]
        return None if index is None else self.parts[index]

    def as_dict(self) -> dict[str, object]:
        key = self.key_part
        return {"name": self.name, "configuration": self.configuration, "baseline": self.baseline,
                "verdict": self.verdict, "reason": self.reason, "key_metric": None if key is None else key.metric,
                "paper_effect_source": self.paper_effect_source,
                "truth_control": None if self.truth_control is None else self.truth_control.as_dict(),
                "parts": [part.as_dict() for part in self.parts], "views": [view.as_dict() for view in self.views],
                "per_block": [{"label": label, "verdict": result.verdict, "reason": result.reason,
                               "parts": [part.as_dict() for part in result.parts]}
                              for label, result in self.per_block],
                "block_note": self.block_note,
                "collapse": None if self.collapse is None else self.collapse.as_dict()}


def _judge_part(kind: str, metric: str, configuration: str, baseline: str, tolerance: float | None,
                paper_effect: float | None, compare: Callable[[str, str, str], PairedComparison | None],
                bootstrap: Callable[[str, str, str], tuple[QueryBootstrap | None, str]] | None,
                paper_source: str = "") -> ClaimPart:
    comparison = compare(configuration, baseline, metric)
    if comparison is None:
        return ClaimPart(kind, metric, tolerance, None, INCONCLUSIVE,
                         f"no run of {configuration} or {baseline} has figures for {metric}",
                         paper_effect=paper_effect, bootstrap_note="no figures", paper_source=paper_source)
    improvement = comparison.improvement
    verdict = keeps_verdict(improvement, tolerance) if kind == KEEPS else improves_verdict(improvement)
    note = "" if improvement.defined else f"{len(comparison.seeds)} paired seed(s): no interval"
    resampled, bootstrap_note = (None, "not computed") if bootstrap is None else bootstrap(configuration, baseline,
                                                                                            metric)
    return ClaimPart(kind, metric, tolerance, comparison, verdict, note, paper_effect=paper_effect,
                     power=power_of(improvement, paper_effect), bootstrap=resampled, bootstrap_note=bootstrap_note,
                     paper_source=paper_source)


def judge_claim(name: str, configuration: str, baseline: str, improves: list[str], keeps: list[str],
                tolerances: Mapping[str, float],
                compare: Callable[[str, str, str], PairedComparison | None], *,
                paper_effect: Mapping[str, float] | None = None, paper_effect_source: str | None = None,
                truth_control: str | None = None, truth_control_metrics: Sequence[str] = (),
                bootstrap: Callable[[str, str, str], tuple[QueryBootstrap | None, str]] | None = None,
                paper_cells: Mapping[str, str] | None = None, views: Sequence[str] = ()) -> ClaimResult:
    """Judge every part of a claim; ``compare(configuration, baseline, metric)`` gives the paired comparison, or
    None when the metric has no figures in either configuration's runs; ``bootstrap(configuration, baseline,
    metric)`` the per-query bootstrap, or (None, why not). The truth control, when given, is judged on
    `truth_control_metrics` (default: `improves`) against the same baseline. `paper_cells` gives, per metric, where
    the paper reports it (table and cell); `views` are metrics shown beside the claim (their interval and an
    "improves" reading) that never enter its verdict."""
    paper_effect = dict(paper_effect or {})
    paper_cells = dict(paper_cells or {})
    parts = []
    for kind, metrics in ((IMPROVES, improves), (KEEPS, keeps)):
        for metric in metrics:
            parts.append(_judge_part(kind, metric, configuration, baseline,
                                     float(tolerances[metric]) if kind == KEEPS else None,
                                     paper_effect.get(metric) if kind == IMPROVES else None, compare, bootstrap,
                                     paper_cells.get(metric, "")))
    shown = tuple(_judge_part(VIEW, metric, configuration, baseline, None, None, compare, None,
                              paper_cells.get(metric, "")) for metric in views)
    control = None
    if truth_control is not None:
        control_parts = tuple(_judge_part(IMPROVES, metric, truth_control, baseline, None, None, compare, None)
                              for metric in (truth_control_metrics or improves))
        control = TruthControl(truth_control, baseline, control_parts)
    return ClaimResult(name, configuration, baseline, tuple(parts), control, paper_effect_source, shown)

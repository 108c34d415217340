"""One picture of a study's verdicts: every claim part's paired improvement with its 95% interval, beside 0, the
paper's effect and the keep tolerance (a forest plot).

Bars of per-configuration means start at 0 and hide a half-point difference between two 65-point figures; what a
verdict rests on is the paired improvement and where its interval lies. So: one panel per metric (a metric has its
own units), one row per claim that judges it, the mean as a dot and the interval as a line, coloured by the part's
verdict (:mod:`kitm.study.claims`: supports, contradicts, inconclusive); a vertical line at 0, a dashed line at
-tolerance for a "keeps" part, and a cross at the paper's gain where the spec gives one.
"""

from __future__ import annotations

from collections.abc import Sequence

from kitm.study import claims as claim_rules
from kitm.study.statistics import CONFIDENCE

VERDICT_COLOURS = {claim_rules.SUPPORTS: "tab:green", claim_rules.CONTRADICTS: "tab:red"}
INCONCLUSIVE_COLOUR = "tab:gray"


def forest_rows(claims: Sequence[claim_rules.ClaimResult]) -> dict[str, list[dict[str, object]]]:
    """metric -> one row per claim part on it with a defined interval: {"claim", "label" (configuration vs
    baseline, what tells the rows apart), "kind", "mean", "low", "high", "n", "verdict", "paper_effect",
    "tolerance"}; metrics in first-seen order."""
    rows: dict[str, list[dict[str, object]]] = {}
    for claim in claims:
        for part in claim.parts:
            improvement = None if part.comparison is None else part.comparison.improvement
            if improvement is None or not improvement.defined:
                continue
            rows.setdefault(part.metric, []).append({
                "claim": claim.name, "label": f"{claim.configuration} vs {claim.baseline}", "kind": part.kind, "mean": improvement.mean, "low": improvement.low,
                "high": improvement.high, "n": improvement.n, "verdict": part.verdict,
                "paper_effect": part.paper_effect, "tolerance": part.tolerance})
    return rows


def _limits(metric_rows: Sequence[dict[str, object]]) -> tuple[float, float]:
    """x range: the intervals, 0 and the tolerances, and each paper's gain unless it would squeeze the intervals
    into a sliver (more than 3 spans of the data away; then it is marked at the edge with its value)."""
    points = [0.0] + [v for row in metric_rows for v in (row["low"], row["high"])]
    points += [-row["tolerance"] for row in metric_rows if row["kind"] == claim_rules.KEEPS and row["tolerance"]]
    span = max(points) - min(points) or 1.0
    points += [row["paper_effect"] for row in metric_rows
               if row["paper_effect"] is not None and row["paper_effect"] <= max(points) + 3 * span]
    low, high = min(points), max(points)
    pad = 0.06 * (high - low or 1.0)
    return low - pad, high + pad


def claims_figure(claims: Sequence[claim_rules.ClaimResult], pyplot):
    """The forest plot (module docstring), or None when no claim part has an interval yet."""
    rows = forest_rows(claims)
    if not rows:
        return None
    heights = [0.36 * len(metric_rows) + 0.8 for metric_rows in rows.values()]
    total = sum(heights) + 0.6
    figure, panels = pyplot.subplots(len(rows), 1, figsize=(9, total), squeeze=False,
                                     gridspec_kw={"height_ratios": heights})
    for axes, (metric, metric_rows) in zip(panels[:, 0], rows.items()):
        low, high = _limits(metric_rows)
        y = list(range(len(metric_rows)))[::-1]
        for row, position in zip(metric_rows, y):
            colour = VERDICT_COLOURS.get(row["verdict"], INCONCLUSIVE_COLOUR)
            axes.plot([row["low"], row["high"]], [position, position], color=colour, linewidth=2.2)
            axes.plot(row["mean"], position, "o", color=colour, markersize=5)
            effect = row["paper_effect"]
            if effect is not None and effect <= high:
                axes.plot(effect, position, "x", color="black", markersize=7)
            elif effect is not None:  # off the scale: marked at the edge with its value
                axes.annotate(f"paper {effect:g} >", (high, position), ha="right", va="center", fontsize=7)
            if row["kind"] == claim_rules.KEEPS and row["tolerance"] is not None:
                axes.plot([-row["tolerance"]] * 2, [position - 0.4, position + 0.4], "--", color="black",
                          linewidth=1)
        axes.axvline(0.0, color="black", linewidth=0.8)
        axes.set_xlim(low, high)
        axes.set_yticks(y, [f"{row['label']} ({row['kind']}, n={row['n']})" for row in metric_rows], fontsize=8)
        axes.set_ylim(-0.7, len(metric_rows) - 0.3)
        axes.set_title(f"{metric}: improvement over the baseline", fontsize=9, loc="left")
        axes.grid(axis="x", alpha=0.3)
    figure.suptitle(f"Each claim part: paired improvement, mean (dot) and {CONFIDENCE:.0%} t interval (line)\n"
                    "green: supports, red: contradicts, grey: inconclusive; x: the paper's gain; dashed: -tolerance",
                    fontsize=9)
    figure.tight_layout(rect=(0.0, 0.0, 1.0, 1.0 - 0.55 / total))
    return figure

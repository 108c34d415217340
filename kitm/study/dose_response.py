"""Dose-response in a study: a method's paired gain over its baseline at several levels of one property of the data.

The question behind the graded-relevance papers is whether graded relevance helps *more* when binary labels are
*more* wrong; no paper measured it. A ``[[dose_response]]`` block of a study spec names the levels (e.g. the
synthetic world's near-duplicate rate, the share of captions that fit other images), and for each arm the
configuration and its baseline at every level; the report gives, per metric, arm and level, the paired improvement
(configuration - baseline over the seeds both have, its 95% t interval: :mod:`kitm.study.statistics`) and one plot
of the improvements against the level::

    [[dose_response]]
    name = "Graded relevance as more captions fit other images"
    x_label = "share of test captions that fit another test image (%)"
    levels = [51.7, 55.4, 62.8]
    metrics = ["i2t_NCS@10", "t2i_NCS@10"]
    [[dose_response.arm]]
    name = "SAM, truth relevance"
    configurations = ["sam_truth_dup0", "sam_truth", "sam_truth_dup90"]
    baselines = ["triplet_dup0", "triplet", "triplet_dup90"]     # or one name for every level
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

_KEYS = {"name", "x_label", "levels", "metrics", "arm"}
_ARM_KEYS = {"name", "configurations", "baselines"}


@dataclasses.dataclass(frozen=True)
class DoseArm:
    name: str
    configurations: tuple[str, ...]  # one per level
    baselines: tuple[str, ...]  # one per level

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "configurations": list(self.configurations), "baselines": list(self.baselines)}


@dataclasses.dataclass(frozen=True)
class DoseResponse:
    name: str
    x_label: str
    levels: tuple[float, ...]
    metrics: tuple[str, ...]
    arms: tuple[DoseArm, ...]

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "x_label": self.x_label, "levels": list(self.levels),
                "metrics": list(self.metrics), "arms": [arm.as_dict() for arm in self.arms]}


def parse_dose_responses(check, entries: object, configurations: Sequence[str]) -> tuple[DoseResponse, ...]:
    """The spec's ``[[dose_response]]`` blocks; `check` is the spec's checker (errors name the file and key)."""
    if not isinstance(entries, list):
        raise check.fail("dose_response", "must be an array of tables ([[dose_response]]).")
    blocks = tuple(_parse_block(check, f"dose_response[{i}]", entry, configurations)
                   for i, entry in enumerate(entries))
    if len({block.name for block in blocks}) != len(blocks):
        raise check.fail("dose_response", "two blocks have the same name.")
    return blocks


def _parse_block(check, key: str, entry: object, configurations: Sequence[str]) -> DoseResponse:
    entry = check.table(entry, key, _KEYS)
    check.require(entry, key, ("name", "levels", "metrics", "arm"))
    levels = entry["levels"]
    if not isinstance(levels, list) or len(levels) < 2:
        raise check.fail(f"{key}.levels", "must list at least two levels (numbers).")
    levels = tuple(check.number(level, f"{key}.levels[{i}]") for i, level in enumerate(levels))
    metrics = check.strings(entry["metrics"], f"{key}.metrics")
    if not metrics:
        raise check.fail(f"{key}.metrics", "must list at least one metric.")
    if not isinstance(entry["arm"], list) or not entry["arm"]:
        raise check.fail(f"{key}.arm", "must be one or more [[dose_response.arm]] tables.")
    arms = tuple(_parse_arm(check, f"{key}.arm[{i}]", arm, len(levels), configurations)
                 for i, arm in enumerate(entry["arm"]))
    return DoseResponse(name=check.string(entry["name"], f"{key}.name"),
                        x_label=check.string(entry.get("x_label", "level"), f"{key}.x_label"), levels=levels,
                        metrics=metrics, arms=arms)


def _parse_arm(check, key: str, entry: object, num_levels: int, configurations: Sequence[str]) -> DoseArm:
    entry = check.table(entry, key, _ARM_KEYS)
    check.require(entry, key, ("name", "configurations", "baselines"))
    chosen = check.strings(entry["configurations"], f"{key}.configurations")
    baselines = entry["baselines"]
    baselines = ((check.string(baselines, f"{key}.baselines"),) * num_levels if isinstance(baselines, str)
                 else check.strings(baselines, f"{key}.baselines"))
    for field, names in (("configurations", chosen), ("baselines", baselines)):
        if len(names) != num_levels:
            raise check.fail(f"{key}.{field}", f"gives {len(names)} names for {num_levels} levels (one per level).")
        for i, name in enumerate(names):
            if name not in configurations:
                raise check.fail(f"{key}.{field}[{i}]", f"{name!r} is not a configuration.")
    return DoseArm(name=check.string(entry["name"], f"{key}.name"), configurations=chosen, baselines=baselines)


def dose_response_rows(block: DoseResponse, compare) -> list[dict[str, object]]:
    """One row per (metric, arm, level): the paired comparison's improvement; `compare(configuration, baseline,
    metric)` gives a :class:`kitm.study.statistics.PairedComparison` or None (no figures)."""
    rows = []
    for metric in block.metrics:
        for arm in block.arms:
            for level, configuration, baseline in zip(block.levels, arm.configurations, arm.baselines):
                comparison = compare(configuration, baseline, metric)
                improvement = None if comparison is None else comparison.improvement
                rows.append({"metric": metric, "arm": arm.name, "level": level, "configuration": configuration,
                             "baseline": baseline, "n": 0 if improvement is None else improvement.n,
                             "mean": None if improvement is None else improvement.mean,
                             "low": None if improvement is None or not improvement.defined else improvement.low,
                             "high": None if improvement is None or not improvement.defined else improvement.high})
    return rows


def dose_response_figure(block: DoseResponse, rows: Sequence[Mapping[str, object]], pyplot):
    """One panel per metric: each arm's mean improvement against the level, with its 95% interval as error bars
    and a line at 0 (no gain); None when no row has a figure. The caller saves (and closes) the figure."""
    if not any(row["mean"] is not None for row in rows):
        return None
    figure, axes = pyplot.subplots(1, len(block.metrics), figsize=(4.2 * len(block.metrics), 3.6), squeeze=False)
    for axis, metric in zip(axes[0], block.metrics):
        for offset, arm in enumerate(block.arms):
            points = [row for row in rows if row["metric"] == metric and row["arm"] == arm.name
                      and row["mean"] is not None]
            if not points:
                continue
            x = [row["level"] + 0.004 * offset * (max(block.levels) - min(block.levels)) for row in points]
            y = [row["mean"] for row in points]
            below = [row["mean"] - row["low"] if row["low"] is not None else 0.0 for row in points]
            above = [row["high"] - row["mean"] if row["high"] is not None else 0.0 for row in points]
            axis.errorbar(x, y, yerr=[below, above], marker="o", capsize=3,
                          label=f"{arm.name} (n = {min(row['n'] for row in points)}-{max(row['n'] for row in points)})")
        axis.axhline(0.0, color="0.5", linewidth=0.8)
        axis.set_xlabel(block.x_label)
        axis.set_ylabel(f"{metric}: gain over the baseline")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    figure.suptitle(block.name, fontsize=9)
    figure.tight_layout()
    return figure


def dose_response_markdown(block: DoseResponse, rows: Sequence[Mapping[str, object]], digits) -> list[str]:
    """The block's table: per metric and arm, the improvement [95% CI] (n) at each level."""
    def cell(row):
        if row["mean"] is None:
            return "no figures"
        d = digits(row["metric"])
        if row["low"] is None:
            return f"{row['mean']:+.{d}f} (n = {row['n']})"
        return f"{row['mean']:+.{d}f} [{row['low']:+.{d}f}, {row['high']:+.{d}f}] (n = {row['n']})"

    header = ["metric", "arm", *(f"{block.x_label} = {level:g}" for level in block.levels)]
    lines = [f"### {block.name}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for metric in block.metrics:
        for arm in block.arms:
            cells = [cell(row) for row in rows if row["metric"] == metric and row["arm"] == arm.name]
            lines.append("| " + " | ".join([metric, arm.name, *cells]) + " |")
    return [*lines, ""]

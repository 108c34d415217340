"""A study spec's ``[[claim]]`` tables: what a claim says, its parts, the paper's numbers, its blocks (worlds).

The keys (docs/studies.md; :mod:`kitm.study.spec` reads the rest of the spec): ``name``, ``configuration``,
``baseline``, ``improves`` and ``keeps`` (the parts), ``keep_tolerance``, ``paper_effect`` and
``paper_effect_source`` (the paper's gains), ``paper_cells`` (where the paper reports each part), ``views`` (figures
shown, never judged), ``truth_control`` and ``truth_control_metrics``, ``blocks`` and ``block_label`` (the same
claim in other worlds). Each error names the key, as the rest of the spec's do.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from kitm.study.spec_checks import _Checker, _describe

_CLAIM_KEYS = {"name", "configuration", "baseline", "improves", "keeps", "keep_tolerance", "paper_effect",
               "paper_cells", "views", "blocks", "block_label",
               "paper_effect_source", "truth_control", "truth_control_metrics"}


@dataclasses.dataclass(frozen=True)
class Claim:
    name: str
    configuration: str
    baseline: str
    improves: tuple[str, ...]
    keeps: tuple[str, ...]
    keep_tolerance: Mapping[str, float]  # one entry per metric of `keeps`
    paper_effect: Mapping[str, float] = dataclasses.field(default_factory=dict)  # improves metric -> paper's gain
    paper_effect_source: str | None = None
    truth_control: str | None = None  # a configuration: the claim's method on the exact relevance
    truth_control_metrics: tuple[str, ...] = ()  # empty without a truth_control
    paper_cells: Mapping[str, str] = dataclasses.field(default_factory=dict)  # metric -> where the paper reports it
    views: tuple[str, ...] = ()  # metrics shown beside the claim, never judged
    # More (label, configuration, baseline) pairs of the same claim in other blocks (worlds): the verdict pools the
    # paired differences of every block with the block as a fixed effect (kitm.study.statistics.blocked_interval);
    # the claim's own pair is the block `block_label`.
    blocks: tuple[tuple[str, str, str], ...] = ()
    block_label: str = "world 0"

    @property
    def block_pairs(self) -> tuple[tuple[str, str, str], ...]:
        """Every (label, configuration, baseline) of the claim, its own pair first; () without blocks."""
        return ((self.block_label, self.configuration, self.baseline), *self.blocks) if self.blocks else ()

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "configuration": self.configuration, "baseline": self.baseline,
                "improves": list(self.improves), "keeps": list(self.keeps),
                "keep_tolerance": dict(self.keep_tolerance), "paper_effect": dict(self.paper_effect),
                "paper_effect_source": self.paper_effect_source, "truth_control": self.truth_control,
                "truth_control_metrics": list(self.truth_control_metrics), "paper_cells": dict(self.paper_cells),
                "views": list(self.views), "blocks": [list(block) for block in self.blocks],
                "block_label": self.block_label}



def parse_claim(check: _Checker, index: int, entry: object, names: list[str], default_baseline: str) -> Claim:
    key = f"claim[{index}]"
    entry = check.table(entry, key, _CLAIM_KEYS)
    check.require(entry, key, ("name", "configuration"))
    name = check.string(entry["name"], f"{key}.name")
    configuration = check.string(entry["configuration"], f"{key}.configuration")
    baseline = check.string(entry.get("baseline", default_baseline), f"{key}.baseline")
    for field, value in (("configuration", configuration), ("baseline", baseline)):
        if value not in names:
            raise check.fail(f"{key}.{field}", f"{value!r} is not a configuration (configurations: "
                                               f"{', '.join(names)}).")
    if configuration == baseline:
        raise check.fail(f"{key}.baseline", f"the claim compares {configuration!r} with itself.")
    improves = check.strings(entry.get("improves", []), f"{key}.improves")
    keeps = check.strings(entry.get("keeps", []), f"{key}.keeps")
    if not improves and not keeps:
        raise check.fail(key, "a claim needs at least one metric in 'improves' or 'keeps'.")
    both = sorted(set(improves) & set(keeps))
    if both:
        raise check.fail(f"{key}.keeps", f"{both[0]} is in both 'improves' and 'keeps'.")
    tolerances: dict[str, float] = {}
    if keeps:
        if "keep_tolerance" not in entry:
            raise check.fail(f"{key}.keep_tolerance", "missing: a claim with 'keeps' needs the largest loss it "
                                                      "accepts, in the metric's units (a number, or a table "
                                                      "{metric = number}).")
        raw_tolerance = entry["keep_tolerance"]
        if isinstance(raw_tolerance, Mapping):
            for metric in raw_tolerance:
                if metric not in keeps:
                    raise check.fail(f"{key}.keep_tolerance.{metric}", "is not one of the claim's 'keeps'.")
            for metric in keeps:
                if metric not in raw_tolerance:
                    raise check.fail(f"{key}.keep_tolerance", f"has no tolerance for {metric}.")
                tolerances[metric] = check.number(raw_tolerance[metric], f"{key}.keep_tolerance.{metric}")
        else:
            value = check.number(raw_tolerance, f"{key}.keep_tolerance")
            tolerances = {metric: value for metric in keeps}
    elif "keep_tolerance" in entry:
        raise check.fail(f"{key}.keep_tolerance", "given without any 'keeps' metric.")
    paper_effect, source = _paper_effect(check, key, entry, improves)
    truth_control, control_metrics = _truth_control(check, key, entry, names, baseline, improves)
    views = check.strings(entry.get("views", []), f"{key}.views")
    judged = sorted(set(views) & (set(improves) | set(keeps)))
    if judged:
        raise check.fail(f"{key}.views", f"{judged[0]} is a judged part ('improves' or 'keeps'), not a view.")
    paper_cells = _paper_cells(check, key, entry, (*improves, *keeps, *views))
    block_label = check.string(entry.get("block_label", "world 0"), f"{key}.block_label")
    blocks = _blocks(check, key, entry, names, block_label)
    return Claim(name=name, configuration=configuration, baseline=baseline, improves=improves, keeps=keeps,
                 keep_tolerance=tolerances, paper_effect=paper_effect, paper_effect_source=source,
                 truth_control=truth_control, truth_control_metrics=control_metrics, paper_cells=paper_cells,
                 views=views, blocks=blocks, block_label=block_label)


def _blocks(check: _Checker, key: str, entry: Mapping[str, object], names: list[str],
            own_label: str) -> tuple[tuple[str, str, str], ...]:
    """``blocks = [{label = "world 2", configuration = "ladder_w2", baseline = "triplet_w2"}, ...]``: the same claim
    in other blocks (worlds), each a pair of configurations with a label of its own."""
    raw = entry.get("blocks", [])
    if not isinstance(raw, list):
        raise check.fail(f"{key}.blocks", f"must be a list of tables {{label, configuration, baseline}}; got "
                                          f"{_describe(raw)}.")
    blocks, labels = [], {own_label}
    for i, block in enumerate(raw):
        where = f"{key}.blocks[{i}]"
        block = check.table(block, where, {"label", "configuration", "baseline"})
        check.require(block, where, ("label", "configuration", "baseline"))
        label = check.string(block["label"], f"{where}.label")
        if label in labels:
            raise check.fail(f"{where}.label", f"{label!r} names another block of the claim.")
        labels.add(label)
        pair = []
        for field in ("configuration", "baseline"):
            value = check.string(block[field], f"{where}.{field}")
            if value not in names:
                raise check.fail(f"{where}.{field}", f"{value!r} is not a configuration (configurations: "
                                                     f"{', '.join(names)}).")
            pair.append(value)
        if pair[0] == pair[1]:
            raise check.fail(f"{where}.baseline", f"the block compares {pair[0]!r} with itself.")
        blocks.append((label, pair[0], pair[1]))
    return tuple(blocks)


def _paper_cells(check: _Checker, key: str, entry: Mapping[str, object], metrics: tuple[str, ...]) -> dict[str, str]:
    """``paper_cells = {metric = "Table I, COCO 1K, VSE++ 0.385 -> ladder 0.418"}``: where the paper reports each
    part (any of the claim's improves, keeps or views), so that a reader can check the number it is judged against."""
    raw = entry.get("paper_cells", {})
    if not isinstance(raw, Mapping):
        raise check.fail(f"{key}.paper_cells", f"must be a table {{metric = text}}; got {_describe(raw)}.")
    cells = {}
    for metric, text in raw.items():
        if metric not in metrics:
            raise check.fail(f"{key}.paper_cells.{metric}", "is not one of the claim's 'improves', 'keeps' or "
                                                            f"'views' ({', '.join(metrics)}).")
        cells[metric] = check.string(text, f"{key}.paper_cells.{metric}")
    return cells


def _paper_effect(check: _Checker, key: str, entry: Mapping[str, object],
                  improves: tuple[str, ...]) -> tuple[dict[str, float], str | None]:
    """``paper_effect = {metric = gain}`` (each an 'improves' metric, gain > 0) and its ``paper_effect_source``."""
    if "paper_effect" not in entry:
        if "paper_effect_source" in entry:
            raise check.fail(f"{key}.paper_effect_source", "given without 'paper_effect'.")
        return {}, None
    raw = entry["paper_effect"]
    if not isinstance(raw, Mapping) or not raw:
        raise check.fail(f"{key}.paper_effect", "must be a table {metric = the paper's gain} with at least one "
                                                f"'improves' metric; got {_describe(raw)}.")
    effects = {}
    for metric, value in raw.items():
        if metric not in improves:
            raise check.fail(f"{key}.paper_effect.{metric}", "is not one of the claim's 'improves' metrics "
                                                             f"({', '.join(improves) or 'none'}).")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or value <= 0:
            raise check.fail(f"{key}.paper_effect.{metric}", "must be a number > 0 (the paper's gain in the "
                                                             f"metric's units, as an improvement); got "
                                                             f"{_describe(value)}.")
        effects[metric] = float(value)
    if "paper_effect_source" not in entry:
        raise check.fail(f"{key}.paper_effect_source", "missing: 'paper_effect' needs the table it comes from "
                                                       '(e.g. "Zhou et al. 2020, Table 2").')
    return effects, check.string(entry["paper_effect_source"], f"{key}.paper_effect_source")


def _truth_control(check: _Checker, key: str, entry: Mapping[str, object], names: list[str], baseline: str,
                   improves: tuple[str, ...]) -> tuple[str | None, tuple[str, ...]]:
    """``truth_control`` (a configuration other than the claim's baseline) and ``truth_control_metrics``."""
    if "truth_control" not in entry:
        if "truth_control_metrics" in entry:
            raise check.fail(f"{key}.truth_control_metrics", "given without 'truth_control'.")
        return None, ()
    control = check.string(entry["truth_control"], f"{key}.truth_control")
    if control not in names:
        raise check.fail(f"{key}.truth_control", f"{control!r} is not a configuration (configurations: "
                                                 f"{', '.join(names)}).")
    if control == baseline:
        raise check.fail(f"{key}.truth_control", f"{control!r} is the claim's baseline: the control is compared "
                                                 "with it.")
    metrics = check.strings(entry.get("truth_control_metrics", list(improves)), f"{key}.truth_control_metrics")
    if not metrics:
        raise check.fail(f"{key}.truth_control_metrics", "the control needs at least one metric it must improve "
                                                         "(default: the claim's 'improves', which is empty).")
    if len(set(metrics)) != len(metrics):
        raise check.fail(f"{key}.truth_control_metrics", f"repeats a metric: {list(metrics)}.")
    return control, metrics

"""Choosing each arm's configuration on validation, by a rule fixed in the spec before the runs (``[[tuning]]``).

A tuning study gives every arm the same budget: a few configurations of its own key settings, each over the same
seeds, scored on the validation split. The spec names each arm's configurations, the default first (the
configuration a previous study ran, or the paper's)::

    [[tuning]]
    arm = "triplet"
    configurations = ["triplet", "triplet_m0.1", "triplet_lr1e-3", "triplet_m0.1_lr1e-3"]
    metric = "rsum"              # default rsum; a metric whose lower values are better (medr) is minimised
    keep_default_within = 0.5    # default 0.5, in the metric's units

The rule: each configuration's mean of `metric` over its seeds; the best mean wins, unless the default is within
`keep_default_within` of it (a gap of exactly the margin included, up to float rounding: 1e-9), when the default
stays (a difference that small is within the seed noise of a two-seed mean, and the default needs no
justification). Ties go to the earlier configuration. Nothing is chosen while a configuration of the arm misses a
run of its seeds: a choice read off part of the grid could change. An arm's configurations share their seeds (the
spec refuses an arm whose configurations name different ones), so that every mean is over the same seeds.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence

import numpy as np

from kitm.study.metrics import lower_is_better

_KEYS = {"arm", "configurations", "metric", "keep_default_within"}
# Means of figures printed to two decimals are compared with the margin up to this (a mean of 261.2 and 250.0 is
# 0.5000000000000284 above one of 250.5 and 261.7 in floating point).
_ROUNDING = 1e-9


@dataclasses.dataclass(frozen=True)
class TuningArm:
    arm: str
    configurations: tuple[str, ...]  # the default first
    metric: str = "rsum"
    keep_default_within: float = 0.5

    @property
    def default(self) -> str:
        return self.configurations[0]

    def as_dict(self) -> dict[str, object]:
        return {"arm": self.arm, "configurations": list(self.configurations), "metric": self.metric,
                "keep_default_within": self.keep_default_within}


@dataclasses.dataclass(frozen=True)
class TuningChoice:
    arm: TuningArm
    means: dict[str, float | None]  # configuration -> mean over its done seeds (None: none done)
    values: dict[str, dict[int, float]]  # configuration -> seed -> value
    missing: dict[str, tuple[int, ...]]  # configuration -> its seeds without a value
    chosen: str | None  # None until every run of the arm is in
    best: str | None
    reason: str

    def as_dict(self) -> dict[str, object]:
        return {**self.arm.as_dict(), "chosen": self.chosen, "best": self.best, "reason": self.reason,
                "means": self.means, "values": {c: {str(s): v for s, v in seeds.items()}
                                                for c, seeds in self.values.items()},
                "missing": {c: list(seeds) for c, seeds in self.missing.items() if seeds}}


def parse_tuning(check, entries: object, configurations: Mapping[str, object]) -> tuple[TuningArm, ...]:
    """The spec's ``[[tuning]]`` blocks; `check` is the spec's checker (errors name the file and key);
    `configurations` maps each configuration's name to the seeds it runs."""
    if not isinstance(entries, list):
        raise check.fail("tuning", "must be an array of tables ([[tuning]]).")
    arms, claimed = [], {}
    for i, entry in enumerate(entries):
        key = f"tuning[{i}]"
        entry = check.table(entry, key, _KEYS)
        check.require(entry, key, ("arm", "configurations"))
        names = check.strings(entry["configurations"], f"{key}.configurations")
        if not names:
            raise check.fail(f"{key}.configurations", "must list the arm's configurations, its default first.")
        for j, name in enumerate(names):
            if name not in configurations:
                raise check.fail(f"{key}.configurations[{j}]", f"{name!r} is not a configuration.")
            if name in claimed:
                raise check.fail(f"{key}.configurations[{j}]", f"{name!r} is already in the arm {claimed[name]!r}.")
            claimed[name] = entry["arm"]
            if configurations[name] != configurations[names[0]]:
                raise check.fail(f"{key}.configurations[{j}]",
                                 f"{name!r} runs other seeds than {names[0]!r}; an arm's configurations share "
                                 "their seeds, so that their means are over the same seeds.")
        within = check.number(entry.get("keep_default_within", 0.5), f"{key}.keep_default_within")  # >= 0
        arms.append(TuningArm(arm=check.string(entry["arm"], f"{key}.arm"), configurations=names,
                              metric=check.string(entry.get("metric", "rsum"), f"{key}.metric"),
                              keep_default_within=float(within)))
    if len({arm.arm for arm in arms}) != len(arms):
        raise check.fail("tuning", "two [[tuning]] blocks have the same arm.")
    return tuple(arms)


def choose(arm: TuningArm, values: Mapping[str, Mapping[str, Mapping[int, float]]],
           seeds: Mapping[str, Sequence[int]]) -> TuningChoice:
    """The arm's choice (module docstring) from `values` (configuration -> metric -> seed -> value, the study's
    analysis) and each configuration's registered `seeds`."""
    sign = -1.0 if lower_is_better(arm.metric) else 1.0
    per_seed = {c: {int(s): float(v) for s, v in values.get(c, {}).get(arm.metric, {}).items()
                    if s in seeds[c] and np.isfinite(v)} for c in arm.configurations}
    missing = {c: tuple(s for s in seeds[c] if s not in per_seed[c]) for c in arm.configurations}
    means = {c: (float(np.mean(list(v.values()))) if v else None) for c, v in per_seed.items()}
    incomplete = [c for c in arm.configurations if missing[c]]
    ran = [c for c in arm.configurations if values.get(c)]  # configurations with some figure of some seed
    if ran and not any(per_seed.values()):
        return TuningChoice(arm, means, per_seed, missing, None, None,
                            f"no run of the arm has the metric {arm.metric!r} (or only non-finite values): is it "
                            "spelled as in the runs' figures?")
    if incomplete:
        runs = sum(len(seeds[c]) for c in arm.configurations)
        done = runs - sum(len(m) for m in missing.values())
        return TuningChoice(arm, means, per_seed, missing, None, None,
                            f"not chosen yet: {done} of the arm's {runs} runs are in")
    best = max(arm.configurations, key=lambda c: (sign * means[c], -arm.configurations.index(c)))
    gap = sign * (means[best] - means[arm.default])  # how much better the best is; >= 0
    if best == arm.default:
        chosen, reason = best, f"the default has the best mean {arm.metric}"
    elif gap <= arm.keep_default_within + _ROUNDING:
        chosen, reason = arm.default, (f"the default stays: the best ({best}) is better by {gap:.4g}, within "
                                       f"{arm.keep_default_within:g}")
    else:
        chosen, reason = best, f"better than the default by {gap:.4g}, more than {arm.keep_default_within:g}"
    return TuningChoice(arm, means, per_seed, missing, chosen, best, reason)


def choices(spec, values) -> list[TuningChoice]:
    """Every ``[[tuning]]`` arm's choice from the analysis' values."""
    seeds = {c.name: tuple(c.seeds if c.seeds is not None else spec.seeds) for c in spec.configurations}
    return [choose(arm, values, seeds) for arm in spec.tuning]


def tuning_markdown(found: Sequence[TuningChoice]) -> list[str]:
    """The report's section: per arm, each configuration's per-seed values and mean, the choice and why."""
    if not found:
        return []
    lines = ["## Tuning: each arm's configuration, chosen on this study's split", "",
             "Per arm, each configuration's mean over its seeds; the best mean wins unless the default (the "
             "arm's first configuration) is within the spec's margin of it (kitm.study.tuning).", "",
             "| arm | configuration | per seed | mean | choice |", "|---|---|---|---|---|"]
    for choice in found:
        for configuration in choice.arm.configurations:
            seeds = choice.values[configuration]
            shown = ", ".join(f"{seed}: {value:.2f}" for seed, value in sorted(seeds.items())) or "none"
            if choice.missing[configuration]:
                shown += f" (missing {', '.join(map(str, choice.missing[configuration]))})"
            mean = choice.means[configuration]
            mark = ""
            if configuration == choice.chosen:
                mark = f"**chosen**: {choice.reason}"
            elif configuration == choice.arm.default:
                mark = "default" + ("" if choice.chosen else f"; {choice.reason}")
            lines.append(f"| {choice.arm.arm} | {configuration} | {shown} | "
                         f"{'n/a' if mean is None else f'{mean:.2f}'} | {mark} |")
    lines += ["", f"Metric: {', '.join(sorted({c.arm.metric for c in found}))}.", ""]
    return lines

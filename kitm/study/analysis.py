"""From the runs' results to the study's numbers: per-configuration intervals, paired comparisons, claim verdicts,
and the warnings a reader needs before trusting them (runs on different data, overridden flags, missing metrics).

Formulas: :mod:`kitm.study.statistics`; verdict rules: :mod:`kitm.study.claims`; the per-query bootstrap of each
claim part: :mod:`kitm.study.bootstrap`, from the runs' ``study_eval.per_query.npz`` files, each checked against its
eval JSON (the nanmean of a metric's per-query values must be the figure the JSON gives).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import pathlib
import zipfile
from collections.abc import Sequence

import numpy as np

from kitm.study import bootstrap as query_bootstrap
from kitm.study import claims as claim_rules
from kitm.study import runs
from kitm.study.commands import overridden_common_flags
from kitm.study.metrics import default_metrics, lower_is_better
from kitm.study.results import RunResult, values_by_configuration
from kitm.study.claim_spec import Claim
from kitm.study.spec import StudySpec
from kitm.study.tuned import TunedConfiguration, waiting as waiting_configurations
from kitm.study.statistics import (Interval, PairedComparison, blocked_comparison, paired_comparison,
                                   random_effect_interval, t_interval)
from kitm.study.provenance import changed_files
from kitm.study.validation_curves import collect_curves

# Launcher flags that differ between runs by design (or do not change what is trained).
PER_RUN_FLAGS = frozenset({"seed", "run_dir", "progress"})
# dataset.json source fields that name which relevance rows a folder carries, not which scenes or captions.
ROW_FIELDS = frozenset({"relevance_rows", "image_neighbors"})


@dataclasses.dataclass
class StudyAnalysis:
    spec: StudySpec
    configurations: tuple[str, ...]
    seeds: tuple[int, ...]
    results: list[RunResult]
    metrics: list[str]  # shown in the markdown tables and plots
    available: list[str]  # every metric some run has (the JSON report covers all of them)
    values: dict[str, dict[str, dict[int, float]]]  # configuration -> metric -> seed -> value
    aggregates: dict[str, dict[str, Interval]]
    comparisons: dict[str, dict[str, PairedComparison]]  # vs the study baseline, every other configuration on its data
    claims: list[claim_rules.ClaimResult]
    flag_differences: dict[str, dict[str, tuple[object, object]]]  # vs the baseline: flag -> (baseline, this)
    datasets: list[dict]  # distinct datasets the done runs used, with the configurations on each
    warnings: list[str]

    per_query_cache: dict[pathlib.Path, dict[str, np.ndarray] | None] = dataclasses.field(default_factory=dict)
    # configuration -> per-epoch validation rows of its done runs that validated while training
    validation_curves: dict[str, list[dict[str, object]]] = dataclasses.field(default_factory=dict)
    # configurations whose arm another study chose on validation (kitm.study.tuned), waiting ones included
    tuned: tuple[TunedConfiguration, ...] = ()
    # configurations scored on other test data than the baseline (another world): no paired comparison with it
    not_compared: list[str] = dataclasses.field(default_factory=list)
    # done runs whose per-query file a claim's bootstrap asked for and did not find, as (configuration, seed)
    missing_per_query: set[tuple[str, int]] = dataclasses.field(default_factory=set)

    def per_query(self, configuration: str, seed: int, metric: str) -> tuple[dict[str, np.ndarray] | None, str]:
        """The per-query arrays of :func:`kitm.study.bootstrap.components` of `metric` for one done run, or
        (None, why not): no per-query file, the metric is not in it, or it disagrees with the run's figures."""
        result = next((r for r in self.results if r.configuration == configuration and r.seed == seed and r.done),
                      None)
        if result is None or result.per_query is None:
            if result is not None:
                self.missing_per_query.add((configuration, seed))
            return None, "no per-query data"
        if result.per_query not in self.per_query_cache:
            try:
                self.per_query_cache[result.per_query] = query_bootstrap.load_per_query(result.per_query)
            except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:  # truncated or foreign: reported
                self.warnings.append(f"{result.per_query}: cannot be read ({error}); no per-query bootstrap")
                self.per_query_cache[result.per_query] = None
        data = self.per_query_cache[result.per_query]
        if data is None:
            return None, "no per-query data"
        arrays = {}
        for name in query_bootstrap.components(metric):
            if name not in data:
                return None, f"no per-query {name}"
            figure = result.figures.get(name)
            with np.errstate(all="ignore"):
                mean = float(np.nanmean(data[name])) if np.isfinite(data[name]).any() else math.nan
            if figure is None or not math.isclose(mean, figure, rel_tol=1e-4, abs_tol=1e-6):
                return None, (f"per-query {name} of {configuration}/seed_{seed} has mean {mean:.6g}, the eval JSON "
                              f"{figure}")
            arrays[name] = data[name]
        return arrays, ""

    def bootstrap(self, configuration: str, baseline: str, metric: str) -> tuple[query_bootstrap.QueryBootstrap | None,
                                                                                   str]:
        """Paired per-query bootstrap of `metric` over the seeds both configurations have with per-query data;
        (None, why not) when no seed has it."""
        seeds = sorted({r.seed for r in self.results if r.configuration == configuration and r.done}
                       & {r.seed for r in self.results if r.configuration == baseline and r.done})
        candidate, reference, used, reasons = [], [], [], []
        for seed in seeds:
            a, why_a = self.per_query(configuration, seed, metric)
            b, why_b = self.per_query(baseline, seed, metric)
            if a is None or b is None:
                reasons.append(why_a or why_b)
                continue
            candidate.append(a)
            reference.append(b)
            used.append(seed)
        if not used:
            return None, "; ".join(sorted(set(reasons))) or "no paired runs"
        try:
            result = query_bootstrap.paired_bootstrap(candidate, reference, metric, seeds=used)
        except ValueError as error:
            return None, str(error)
        missing = len(seeds) - len(used)
        return result, (f"{missing} of {len(seeds)} paired seeds without per-query data" if missing else "")

    def comparison(self, configuration: str, baseline: str, metric: str) -> PairedComparison | None:
        """Paired comparison of two configurations on `metric`; None when neither has figures for it."""
        candidate = self.values.get(configuration, {}).get(metric, {})
        reference = self.values.get(baseline, {}).get(metric, {})
        if not candidate and not reference:
            return None
        return paired_comparison(candidate, reference, lower_is_better=lower_is_better(metric))

    def blocked(self, pairs, metric: str) -> PairedComparison | None:
        """A claim's blocks' pairs (label, candidate, baseline) pooled with the block as a fixed effect; None when
        no pair has figures for `metric`."""
        data = [(label, self.values.get(c, {}).get(metric, {}), self.values.get(b, {}).get(metric, {}))
                for label, c, b in pairs]
        if not any(candidate or reference for _, candidate, reference in data):
            return None
        return blocked_comparison(data, lower_is_better=lower_is_better(metric))


def _flag_differences(results: Sequence[RunResult], baseline: str) -> dict[str, dict[str, tuple[object, object]]]:
    """Final launcher flags (summary.json) of each configuration's first recorded run against the baseline's."""
    first: dict[str, dict] = {}
    for result in results:
        if result.flags is not None:
            first.setdefault(result.configuration, result.flags)
    if baseline not in first:
        return {}
    reference = first[baseline]
    differences = {}
    for configuration, flags in first.items():
        if configuration == baseline:
            continue
        names = (set(flags) | set(reference)) - PER_RUN_FLAGS
        differences[configuration] = {name: (reference.get(name), flags.get(name)) for name in sorted(names)
                                      if reference.get(name) != flags.get(name)}
    return differences


def _dataset_identity(dataset: dict) -> str:
    """What makes two runs' test sets the same: the generator's parameters (not which rows a folder carries), or
    the folder when there are none, and the split's size."""
    source = dataset.get("source")
    if isinstance(source, dict):
        key = {name: value for name, value in source.items() if name not in ROW_FIELDS}
    else:
        key = {"dir": dataset.get("dir")}
    return json.dumps({"source": key, "split_images": dataset.get("split_images")}, sort_keys=True)


def _scored_on(results: Sequence[RunResult], configuration: str) -> set[str]:
    """The identities (:func:`_dataset_identity`) of the test data a configuration's done runs were scored on."""
    return {_dataset_identity(r.dataset) for r in results
            if r.done and r.configuration == configuration and r.dataset is not None}


def _scored_apart(results: Sequence[RunResult], configuration: str, baseline: str) -> bool:
    """Whether the two configurations' done runs were scored on different test data (both recorded theirs; runs that
    do not say, such as hand-made results, never count as apart): their seeds then index different queries, and no
    paired comparison of them means anything."""
    data, baseline_data = _scored_on(results, configuration), _scored_on(results, baseline)
    return bool(data) and bool(baseline_data) and data != baseline_data


def _claim_pairs_apart(results: Sequence[RunResult], claim) -> list[tuple[str, str, str]]:
    """The (what, configuration, baseline) pairs of a claim, its blocks' and its truth control's included, whose
    runs were scored on different test data."""
    pairs = [(f"block {label!r}", c, b) for label, c, b in claim.block_pairs] or \
        [("its pair", claim.configuration, claim.baseline)]
    if claim.truth_control is not None:
        pairs.append(("its truth control", claim.truth_control, claim.baseline))
    return [(what, c, b) for what, c, b in pairs if _scored_apart(results, c, b)]


def _compare_with_baseline(analysis: StudyAnalysis) -> None:
    """Each configuration's paired comparison with the baseline on every metric, for the configurations with done
    runs. Seeds pair two runs on the same queries only when both were scored on the same test data: a
    configuration whose runs (or the baseline's) were scored on other test data (another world: kitm.study.tuned's
    w2.*, a non-literal world; or a mix) is left out (analysis.not_compared); the data warning names every
    dataset and its runs."""
    baseline = analysis.spec.baseline
    with_done_runs = {r.configuration for r in analysis.results if r.done}
    for configuration in analysis.configurations:
        if configuration == baseline or configuration not in with_done_runs:  # nothing to compare yet
            continue
        if _scored_apart(analysis.results, configuration, baseline):
            analysis.not_compared.append(configuration)
            continue
        analysis.comparisons[configuration] = {
            metric: comparison for metric in analysis.available
            if (comparison := analysis.comparison(configuration, baseline, metric)) is not None}


def _datasets(results: Sequence[RunResult]) -> list[dict]:
    groups: dict[str, dict] = {}
    for result in results:
        if result.dataset is None:
            continue
        identity = _dataset_identity(result.dataset)
        group = groups.setdefault(identity, {**result.dataset, "dirs": [], "seeds_by_configuration": {}})
        if result.dataset.get("dir") not in group["dirs"]:
            group["dirs"].append(result.dataset.get("dir"))
        group["seeds_by_configuration"].setdefault(result.configuration, []).append(result.seed)
    return list(groups.values())


def runs_described(dataset: dict) -> str:
    """A dataset's runs in a line: the configurations that share their seeds together ("a, b: seeds 0-9; c: seeds
    0-4"), not hundreds of run folders."""
    by_seeds: dict[tuple[int, ...], list[str]] = {}
    for configuration, seeds in dataset["seeds_by_configuration"].items():
        by_seeds.setdefault(tuple(sorted(seeds)), []).append(configuration)
    return "; ".join(f"{', '.join(configurations)}: seed{'s' if len(seeds) > 1 else ''} {seed_span(seeds)}"
                     for seeds, configurations in by_seeds.items())


def _data_warnings(results: Sequence[RunResult], datasets: list[dict]) -> list[str]:
    warnings = []
    if len(datasets) > 1:
        described = " | ".join(f"{', '.join(map(str, d['dirs']))} ({_describe_source(d)}): {runs_described(d)}"
                               for d in datasets)
        warnings.append(f"the runs were scored on {len(datasets)} different datasets, so figures from different "
                        "datasets are not comparable (a paired comparison pairs runs scored on the same one only): "
                        f"{described}")
    for result in results:
        source = (result.dataset or {}).get("source") or {}
        asked = (result.flags or {}).get("synthetic_num_scenes")
        # A run given --data_dir reads the world there on purpose (a study's pinned world, built by [[prepare]]):
        # its --synthetic_num_scenes, left at the default, says nothing about that world.
        pinned = "--data_dir=" in (result.launch_command or "")
        if (result.flags or {}).get("dataset") == "synthetic" and "num_scenes" in source and asked is not None \
                and source["num_scenes"] != asked and not pinned:
            warnings.append(f"{result.configuration}/seed_{result.seed} asked for --synthetic_num_scenes={asked} "
                            f"but trained on the {source['num_scenes']}-scene world at {result.dataset['dir']}: the "
                            "launcher builds a world only where none exists (pin a fresh --data_dir in "
                            "common_flags)")
    return warnings


def _code_warnings(results: Sequence[RunResult]) -> list[str]:
    """Runs trained by different kitm sources (the checkout changed while the study ran) may not be comparable: say
    which versions, how many runs each trained, their commits where recorded, and the kitm files that differ
    between consecutive recorded commits (each run's version is in report.json, runs[].kitm_source)."""
    groups: dict[str, list[RunResult]] = {}
    for result in results:
        if result.kitm_source is not None:
            groups.setdefault(result.kitm_source, []).append(result)
    if len(groups) < 2:
        return []
    parts, commits = [], []
    for fingerprint, members in groups.items():
        recorded = sorted({r.kitm_commit for r in members if r.kitm_commit})
        commits += recorded[:1]
        configurations = list(dict.fromkeys(r.configuration for r in members))
        seeds = sorted({r.seed for r in members})
        where = (f"commit {', '.join(c[:12] + ('+dirty' if c.endswith('+dirty') else '') for c in recorded)}"
                 if recorded else "commit not recorded")
        parts.append(f"{fingerprint} ({where}): {len(members)} run(s), seeds {seed_span(seeds)}, "
                     f"{', '.join(configurations) if len(configurations) <= 6 else f'{len(configurations)} configurations'}")
    text = (f"the runs were trained by {len(groups)} different versions of the kitm sources (the code changed while "
            f"the study ran; flag defaults may differ too, see the flags section; each run's version: report.json, "
            f"runs[].kitm_source): {'; '.join(parts)}")
    for first, second in zip(commits, commits[1:]):
        files = changed_files(first, second)
        if files is not None:
            text += f"; kitm files changed from {first[:12]} to {second[:12]}: {', '.join(files) or 'none'}"
    return [text]


def seed_span(seeds: Sequence[int]) -> str:
    """0-5, 7, 9-10: consecutive seeds as ranges."""
    spans: list[list[int]] = []
    for seed in seeds:
        if spans and seed == spans[-1][1] + 1:
            spans[-1][1] = seed
        else:
            spans.append([seed, seed])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def _describe_source(dataset: dict) -> str:
    source = dataset.get("source")
    parts = [f"{dataset.get('split_images')} evaluated images"]
    if isinstance(source, dict) and "num_scenes" in source:
        parts.insert(0, f"synthetic world: {source['num_scenes']} scenes, seed {source.get('seed')}, "
                        f"{source.get('image_size')} px")
    return ", ".join(parts)


def analyse(spec: StudySpec, results: Sequence[RunResult], seeds: Sequence[int],
            tuned: tuple[TunedConfiguration, ...] = ()) -> StudyAnalysis:
    """Every number of the report from the runs' results (missing and failed runs simply contribute nothing);
    `tuned`: the spec's tuned configurations as :func:`kitm.study.tuned.resolve` found them."""
    waits = waiting_configurations(tuned)
    configurations = tuple(name for name in spec.configuration_names if name not in waits)  # not reported yet
    values = values_by_configuration(results, configurations)
    available = sorted({metric for per_metric in values.values() for metric in per_metric})
    metrics = list(spec.metrics) if spec.metrics is not None else default_metrics(available)
    warnings = list(overridden_common_flags(spec))
    for metric in metrics:
        if metric not in available and available:
            warnings.append(f"metric {metric!r} (spec 'metrics') is in no run's evaluation; known: "
                            f"{', '.join(available)}")
    aggregates = {c: {m: t_interval(per_seed.values()) for m, per_seed in sorted(values[c].items())}
                  for c in configurations}
    analysis = StudyAnalysis(spec=spec, configurations=configurations, seeds=tuple(sorted(seeds)),
                             results=list(results), metrics=metrics, available=available, values=values,
                             aggregates=aggregates, comparisons={}, claims=[], flag_differences={}, datasets=[],
                             warnings=warnings, tuned=tuple(tuned))
    if waits:
        warnings.append(f"{len(waits)} configuration(s) wait for their arm's choice on validation (not run, not in "
                        f"the figures; the section on tuned configurations): {', '.join(sorted(waits))}")
    _compare_with_baseline(analysis)
    for claim in spec.claims:
        compared = {claim.configuration, claim.baseline, claim.truth_control,
                    *(c for _, *pair in claim.block_pairs for c in pair)}
        waiting = sorted(c for c in compared if c in waits)
        if waiting:  # judged once every configuration it compares has its arm's choice
            warnings.append(f"claim {claim.name!r} is not judged yet: {', '.join(waiting)} wait(s) for the arm's "
                            "choice on validation")
            continue
        warnings += _claim_metric_warnings(claim, available)
        analysis.claims.append(_judge(analysis, claim, results))
    analysis.flag_differences = _flag_differences(results, spec.baseline)
    analysis.datasets = _datasets([r for r in results if r.done])
    analysis.validation_curves, curve_warnings = collect_curves(
        (r.configuration, r.seed, r.directory) for r in results if r.done)
    warnings += curve_warnings
    warnings += _data_warnings([r for r in results if r.done], analysis.datasets)
    warnings += _code_warnings([r for r in results if r.done])
    warnings += _not_done_warnings(results)
    warnings += _missing_per_query_warnings(analysis.missing_per_query)
    return analysis


def _missing_per_query_warnings(missing: set[tuple[str, int]]) -> list[str]:
    """Done runs without the per-query file a claim's bootstrap reads: their bootstrap columns say "no per-query
    data" (the seed-level verdicts do not read them), so a report regenerated from a tree without the files differs
    from one written with them: said at once rather than found in the table."""
    if not missing:
        return []
    configurations = sorted({configuration for configuration, _ in missing})
    return [f"{len(missing)} evaluated run(s) of {', '.join(configurations)} have no per-query file "
            "(study_eval.per_query.npz beside study_eval.json): their claims' per-query bootstrap reads "
            "\"no per-query data\" (the verdicts, from the seed-level figures, do not use it). A study whose files "
            "left the tree restores them from git history first (docs/studies.md)."]


def _claim_metric_warnings(claim: Claim, available: Sequence[str]) -> list[str]:
    """A claim's metrics (and its truth control's) that no run's evaluation holds: most likely a typo in the spec."""
    if not available:
        return []
    warnings = [f"claim {claim.name!r}: metric {metric!r} is in no run's evaluation"
                for metric in (*claim.improves, *claim.keeps) if metric not in available]
    if claim.truth_control is not None:
        warnings += [f"claim {claim.name!r}: truth-control metric {metric!r} is in no run's evaluation"
                     for metric in claim.truth_control_metrics if metric not in available]
    return warnings


def _judge(analysis: StudyAnalysis, claim: Claim, results: Sequence[RunResult]) -> claim_rules.ClaimResult:
    """One claim's verdict: on its own pair, or (several worlds) on the differences pooled with the world as a block
    with each world's own verdict beside it. The pairs it leaves out are named in `analysis.warnings`."""
    # A pair scored on different test data (a block naming another world's baseline, say) is left out of every
    # figure of the claim, named in a warning: seeds pair runs on the same queries only.
    crossing = _claim_pairs_apart(results, claim)
    apart = {(c, b) for _, c, b in crossing}
    for what, c, b in crossing:
        analysis.warnings.append(f"claim {claim.name!r}: {what} compares {c} with {b}, whose runs were scored on "
                                 "different test data: left out of the claim's figures and verdict")

    def paired(c, b, m):
        return None if (c, b) in apart else analysis.comparison(c, b, m)

    def bootstrapped(c, b, m):
        if (c, b) in apart:
            return None, f"{c} and {b} were scored on different test data"
        return analysis.bootstrap(c, b, m)

    def judge(configuration, baseline, compare, bootstrap, truth_control):
        return claim_rules.judge_claim(
            claim.name, configuration, baseline, list(claim.improves), list(claim.keeps), claim.keep_tolerance,
            compare, paper_effect=claim.paper_effect, paper_effect_source=claim.paper_effect_source,
            truth_control=truth_control, truth_control_metrics=claim.truth_control_metrics, bootstrap=bootstrap,
            paper_cells=claim.paper_cells, views=claim.views)

    if not claim.blocks:
        single = judge(claim.configuration, claim.baseline, paired, bootstrapped, claim.truth_control)
        return _with_verdict_rules(analysis, claim, single, ((None, claim.configuration, claim.baseline),), results)
    # Several worlds: no per-query bootstrap, the worlds' test items differ; each world's truth control only in the
    # claim's own world.
    pairs = claim.block_pairs
    pooled_pairs = tuple(pair for pair in pairs if pair[1:] not in apart)
    own = (claim.configuration, claim.baseline)
    pooled = judge(claim.configuration, claim.baseline,
                   lambda c, b, m: analysis.blocked(pooled_pairs, m) if (c, b) == own else paired(c, b, m),
                   None, claim.truth_control)
    per_block = tuple((label, judge(c, b, paired, None, claim.truth_control if i == 0 else None))
                      for i, (label, c, b) in enumerate(pairs) if (c, b) not in apart)
    pooled = dataclasses.replace(pooled, per_block=per_block)
    return _with_verdict_rules(analysis, claim, pooled, pooled_pairs, results)


def _with_verdict_rules(analysis: StudyAnalysis, claim: Claim, result: claim_rules.ClaimResult, pairs,
                        results: Sequence[RunResult]) -> claim_rules.ClaimResult:
    """The study's registered rules (kitm.study.spec.VerdictRules) on a claim pooled over several worlds: the
    random-effect interval of every part, and the collapse of the claim's configurations."""
    rules = analysis.spec.verdict_rules
    if rules.random_effect and len(pairs) > 1:
        parts = tuple(dataclasses.replace(part, random_effect=_random_effect(analysis, pairs, part.metric))
                      for part in result.parts)
        result = dataclasses.replace(result, parts=parts)
    if rules.collapse_threshold is not None:
        configurations = tuple(dict.fromkeys(c for _, c, _ in pairs))
        cosines = [r.image_cosine for r in results if r.configuration in configurations and r.done
                   and r.image_cosine is not None]
        if cosines:
            collapsed = sum(value >= rules.collapse_threshold for value in cosines)
            result = dataclasses.replace(result, collapse=claim_rules.Collapse(
                configurations, int(collapsed), len(cosines), rules.collapse_threshold, rules.collapse_share,
                float(min(cosines)), float(max(cosines))))
    return result


def _random_effect(analysis: StudyAnalysis, pairs, metric: str) -> Interval:
    """The paired improvements of `metric` block by block (candidate - baseline, turned so that positive is
    better), with the world as a random effect (kitm.study.statistics.random_effect_interval)."""
    sign = -1.0 if lower_is_better(metric) else 1.0
    blocks = []
    for _, candidate, baseline in pairs:
        a = analysis.values.get(candidate, {}).get(metric, {})
        b = analysis.values.get(baseline, {}).get(metric, {})
        blocks.append([sign * (float(a[s]) - float(b[s])) for s in sorted(set(a) & set(b))])
    return random_effect_interval(blocks)


def _not_done_warnings(results: Sequence[RunResult]) -> list[str]:
    """How many runs are missing from the figures, by state (missing, failed, running)."""
    counts = collections.Counter(result.state for result in results if result.state != runs.DONE)
    if not counts:
        return []
    return ["not every run is in the figures: " + ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))]

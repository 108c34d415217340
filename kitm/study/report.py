"""The study's ``report.md``, for people: a summary table, one row per claim (verdict, the interval it rests on, the
paper's gain, the seeds that gain needs), then each claim's parts with their interval, the paper's effect, the power
columns and the per-query bootstrap, then the spec's metrics (or the default list,
:func:`kitm.study.metrics.default_metrics`), the paired differences, flags, data, runs and the commands.
:mod:`kitm.study.report_files` writes it beside ``report.json``.
"""

from __future__ import annotations

import math
import pathlib
from collections.abc import Sequence

import kitm
from kitm.study import claims as claim_rules
from kitm.study import commands
from kitm.study.analysis import StudyAnalysis, runs_described, seed_span
from kitm.study.metrics import decimals, lower_is_better
from kitm.study import plots as study_plots
from kitm.study.bootstrap import RESAMPLES
from kitm.study.dose_response import dose_response_markdown, dose_response_rows
from kitm.study.statistics import ALPHA, CONFIDENCE, MAX_SEEDS, POWER, Interval, t_quantile, wilcoxon_smallest_p
from kitm.study.tuned import tuned_markdown
from kitm.study.tuning import choices as tuning_choices, tuning_markdown
from kitm.study.validation_curves import curves_markdown

REPORT_MD = "report.md"
REPORT_JSON = "report.json"


def _number(value: float | None, digits: int = 2) -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{value:.{digits}f}"


def _p(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{value:.3g}"


def _seconds(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def mean_and_half_width(interval: Interval | None, digits: int) -> str:
    """``mean ± h`` (``mean ± n/a`` for one seed, ``-`` for none)."""
    if interval is None or interval.n == 0:
        return "-"
    return f"{_number(interval.mean, digits)} ± {_number(interval.half_width, digits)}"


def interval_text(interval: Interval, digits: int) -> str:
    """``mean [low, high]`` (``mean [n/a]`` without an interval)."""
    if interval.n == 0:
        return "no paired seeds"
    if not interval.defined:
        return f"{_number(interval.mean, digits)} [n/a]"
    return f"{_number(interval.mean, digits)} [{_number(interval.low, digits)}, {_number(interval.high, digits)}]"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    escaped = [[cell.replace("|", "\\|") for cell in row] for row in rows]
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(row) + " |" for row in escaped)]


def _paper_effect_text(part: claim_rules.ClaimPart) -> str:
    return "-" if part.paper_effect is None else f"+{_number(part.paper_effect, decimals(part.metric))}"


def _seeds_for_paper(part: claim_rules.ClaimPart) -> str:
    if part.paper_effect is None or part.power is None:
        return "-"
    needed = part.power.seeds_for_effect
    return f"> {MAX_SEEDS}" if needed is None and math.isfinite(part.power.sd) else (
        "n/a" if needed is None else str(needed))


def _bootstrap_text(part: claim_rules.ClaimPart, digits: int) -> str:
    """Pooled per-query bootstrap difference [95% percentile interval], or why there is none."""
    resampled = part.bootstrap
    if resampled is None:
        return part.bootstrap_note or "no per-query data"
    text = (f"{_number(resampled.pooled, digits)} [{_number(resampled.pooled_low, digits)}, "
            f"{_number(resampled.pooled_high, digits)}]")
    return text + (f" ({part.bootstrap_note})" if part.bootstrap_note else "")


def _spread_text(part: claim_rules.ClaimPart, digits: int) -> str:
    """Standard error of the mean improvement over the test items (bootstrap) and over the seeds (s / sqrt(n))."""
    items = "n/a" if part.bootstrap is None else _number(part.bootstrap.pooled_se, digits)
    seeds = "n/a"
    if part.comparison is not None and part.comparison.improvement.defined:
        interval = part.comparison.improvement
        seeds = _number(interval.std / math.sqrt(interval.n), digits)
    return f"{items} / {seeds}"


def _per_seed_text(part: claim_rules.ClaimPart, digits: int) -> str:
    resampled = part.bootstrap
    if resampled is None:
        return "-"
    return "; ".join(f"{seed}: {_number(d, digits)} [{_number(lo, digits)}, {_number(hi, digits)}]"
                     for seed, d, lo, hi in zip(resampled.seeds, resampled.observed, resampled.low, resampled.high))


def key_interval(claim: claim_rules.ClaimResult) -> str:
    """The interval the claim's verdict rests on: ``metric mean [low, high] (n = 4)``."""
    part = claim.key_part
    if part is None:
        return "-"
    n = 0 if part.comparison is None else len(part.comparison.seeds)
    return f"{claim_rules.describe_interval(part)} (n = {n})"


PART_WORDS = {claim_rules.SUPPORTS: "holds", claim_rules.CONTRADICTS: "**does not hold**",
              claim_rules.INCONCLUSIVE: "undecided"}


def part_text(part: claim_rules.ClaimPart) -> str:
    """One claim part in a sentence: ``i2t_CS@100 +0.0023 [0.0015, 0.0030] holds (paper +0.0245, excluded)``."""
    if part.comparison is None:
        return f"{part.metric}: no figures yet"
    text = f"{claim_rules.describe_interval(part)} {PART_WORDS[part.verdict]}"
    if part.kind == claim_rules.KEEPS:
        text = f"{part.metric} kept within {_number(part.tolerance, decimals(part.metric))}: " + text.split(" ", 1)[1]
    if part.paper_effect is not None:
        paper = f"paper +{_number(part.paper_effect, decimals(part.metric))}"
        text += f" ({paper}, {'excluded' if part.excludes_paper_effect else 'not excluded'})"
    if part.random_effect is not None:
        text += f"; world as a random effect {interval_text(part.random_effect, decimals(part.metric))}"
    return text


def _summary_section(analysis: StudyAnalysis) -> list[str]:
    if not analysis.claims:
        return []
    rows = []
    for claim in analysis.claims:
        part = claim.key_part
        seeds = "-" if part is None else _seeds_for_paper(part)
        n = max((len(p.comparison.seeds) for p in claim.parts if p.comparison is not None), default=0)
        verdict = f"**{claim.verdict}**" + (f" ({claim.block_note})" if claim.block_note else "")
        rows.append([claim.name, verdict, "; ".join(part_text(p) for p in claim.parts), str(n), seeds])
    return ["## Summary", "",
            "One row per claim: its verdict (rules below) and every pre-registered part: the "
            f"{CONFIDENCE:.0%} t interval of the paired improvement, whether the part holds (improvement interval "
            "above 0, or a kept metric's loss provably within its tolerance), does not hold (below 0, or beyond "
            "the tolerance) or is undecided, and the paper's own gain for it with whether the interval excludes "
            "that gain; n paired seeds; the seeds the observed spread needs to detect the paper's gain on the key "
            f"part (two-sided paired t-test, alpha {ALPHA:.2f}, power {POWER:.1f}). Views (figures shown beside "
            "a claim that never decide it) are under each claim below.", "",
            *_table(["claim", "verdict", "parts: improvement [95% CI]", "n", "seeds for the paper's effect"],
                    rows), ""]


def _control_lines(claim: claim_rules.ClaimResult) -> list[str]:
    control = claim.truth_control
    if control is None:
        return []
    intervals = "; ".join(claim_rules.describe_interval(part) for part in control.parts)
    return [f"Truth control `{control.configuration}` against `{control.baseline}`: **{control.verdict}** "
            f"({intervals}).", ""]


def _claims_section(analysis: StudyAnalysis) -> list[str]:
    lines = ["## Claims", ""]
    if not analysis.claims:
        return lines + ["The spec makes no claims.", ""]
    for claim in analysis.claims:
        lines += [f"### {claim.name}: **{claim.verdict}**", "",
                  f"`{claim.configuration}` against `{claim.baseline}`; improvement = {claim.configuration} - "
                  f"{claim.baseline} (negated where lower is better), mean [{CONFIDENCE:.0%} t interval] over the "
                  "paired seeds.", "", f"Why: {claim.reason}.", ""]
        if claim.paper_effect_source:
            lines += [f"The paper's effects: {claim.paper_effect_source}.", ""]
        if claim.per_block:
            lines += [f"Pooled over {len(claim.per_block)} worlds with the world as a block (the interval: "
                      "kitm.study.statistics.blocked_interval); each world's own verdict: "
                      + "; ".join(f"{label}: **{result.verdict}** ("
                                  + ", ".join(part_text(part) for part in result.parts) + ")"
                                  for label, result in claim.per_block) + ".", ""]
            if claim.block_note:
                lines += [f"Note: {claim.block_note}.", ""]
            if any(part.random_effect is not None for part in claim.parts):
                lines += ["With the world as a random effect (the mean of the worlds' mean differences, a t interval "
                          "on W - 1 degrees of freedom: kitm.study.statistics.random_effect_interval; what a new "
                          "world drawn by the same generator would show, never deciding the verdict): "
                          + "; ".join(f"{part.metric} {interval_text(part.random_effect, decimals(part.metric))}"
                                      for part in claim.parts if part.random_effect is not None) + ".", ""]
        if claim.collapse is not None:
            lines += [f"Collapse rule (threshold {claim.collapse.threshold:g}, share {claim.collapse.share:g}): "
                      f"{claim.collapse.text}" + ("; the claim does not hold: training collapses."
                                                  if claim.collapse.applies else "; below the rule's share."), ""]
        lines += _control_lines(claim)
        rows, power_rows = [], []
        for part in claim.parts:
            digits = decimals(part.metric)
            comparison = part.comparison
            rule = ("improves (interval > 0)" if part.kind == claim_rules.IMPROVES
                    else f"keeps (lower bound >= -{_number(part.tolerance, digits)})")
            verdict = f"**{part.verdict}**" + (", excludes the paper's effect" if part.excludes_paper_effect else "")
            if comparison is None:
                rows.append([part.metric, rule, "0", "no figures", _paper_effect_text(part), "n/a", "n/a",
                             verdict])
                continue
            rows.append([part.metric, rule, str(len(comparison.seeds)),
                         interval_text(comparison.improvement, digits), _paper_effect_text(part),
                         _p(comparison.t_test_p), _p(comparison.wilcoxon_p),
                         verdict + (f" ({part.note})" if part.note else "")])
            power = part.power
            power_rows.append([part.metric, _number(power.sd, digits), _number(power.detectable, digits),
                               "-" if part.paper_effect is None else _number(power.power_at_effect, 2),
                               _seeds_for_paper(part), _bootstrap_text(part, digits), _spread_text(part, digits),
                               _per_seed_text(part, digits)])
        lines += _table(["metric", "rule", "n", "improvement [95% CI]", "paper's effect", "t-test p", "Wilcoxon p",
                         "verdict"], rows)
        lines.append("")
        cells = [f"- {part.metric}: {part.paper_source}" for part in (*claim.parts, *claim.views)
                 if part.paper_source]
        if cells:
            lines += ["Where the paper reports each part:", "", *cells, ""]
        if claim.views:
            lines += ["Views (shown beside the claim, never part of its verdict): "
                      + "; ".join(f"{claim_rules.describe_interval(view)} ({view.verdict} as an improvement)"
                                  for view in claim.views) + ".", ""]
        if power_rows:
            n = max(len(p.comparison.seeds) for p in claim.parts if p.comparison is not None)
            lines += _table(["metric", "SD of paired differences", f"detectable at n = {n}",
                             "power at the paper's effect", "seeds for the paper's effect",
                             "per-query bootstrap, pooled [95%]", "SE: test items / seeds",
                             "per-query bootstrap per seed"], power_rows)
            lines.append("")
    lines += ["Power columns: the observed SD of the paired differences (ddof 1), the smallest true improvement the "
              f"two-sided paired t-test detects with power {POWER:.1f} at alpha {ALPHA:.2f} with the paired seeds, "
              "the power at the paper's gain, and the smallest number of seeds whose power reaches "
              f"{POWER:.1f} for it (exact noncentral t). Per-query bootstrap: the test queries resampled "
              f"{RESAMPLES} times (same queries for candidate and baseline and for every seed; rsum resamples image "
              "and caption queries independently), the mean over seeds of the difference of means with its 95% "
              "percentile interval; it varies the test items with the trained models fixed, where the t interval "
              "varies the seeds with the test items fixed. SE: the standard error of the mean improvement over "
              "test items (bootstrap SD) and over seeds (s / sqrt(n)).", ""]
    return lines


def _figures_section(analysis: StudyAnalysis) -> list[str]:
    header = ["metric"]
    for configuration in analysis.configurations:
        n = len({r.seed for r in analysis.results if r.configuration == configuration and r.done})
        marker = "baseline, " if configuration == analysis.spec.baseline else ""
        header.append(f"{configuration} ({marker}n={n})")
    rows = []
    for metric in analysis.metrics:
        digits = decimals(metric)
        label = metric + (" (lower is better)" if lower_is_better(metric) else "")
        rows.append([label] + [mean_and_half_width(analysis.aggregates[c].get(metric), digits)
                               for c in analysis.configurations])
    return ["## Figures", "",
            f"Mean over seeds ± half-width of the {CONFIDENCE:.0%} t interval, t(0.975, n-1) * s / sqrt(n) with the "
            "sample standard deviation s (ddof 1); `± n/a`: one seed, no interval. Percent, except CS "
            "(Kendall tau-b) and the ranks medr and meanr.", "",
            *_table(header, rows), ""]


def _comparisons_section(analysis: StudyAnalysis) -> list[str]:
    baseline = analysis.spec.baseline
    lines = [f"## Paired differences against the baseline `{baseline}`", "",
             "Difference = configuration - baseline on the seeds both have, mean [95% t interval]; paired t-test "
             "(scipy.stats.ttest_rel) and exact Wilcoxon signed-rank (scipy.stats.wilcoxon) p-values, two-sided. "
             "With n non-zero differences the exact Wilcoxon p cannot go below 2 / 2^n (0.25 for n = 3, 0.0625 for "
             "n = 5): below 6 seeds it never reaches 0.05, whatever the effect.", ""]
    if analysis.not_compared:
        lines += [f"Not compared with `{baseline}`: {', '.join(analysis.not_compared)} (scored on other test data "
                  "than the baseline, so their seeds do not pair runs on the same queries).", ""]
    if not analysis.comparisons:
        return lines + (["Only the baseline is in the study.", ""] if not analysis.not_compared else [])
    for configuration, per_metric in analysis.comparisons.items():
        lines += [f"### {configuration} - {baseline}", ""]
        rows = []
        for metric in analysis.metrics:
            comparison = per_metric.get(metric)
            if comparison is None:
                continue
            digits = decimals(metric)
            n = len(comparison.seeds)
            rows.append([metric, "lower" if comparison.lower_is_better else "higher", str(n),
                         interval_text(comparison.difference, digits), _p(comparison.t_test_p),
                         f"{_p(comparison.wilcoxon_p)} (min {_p(wilcoxon_smallest_p(n))})" if n else "n/a"])
        lines += _table(["metric", "better", "n", "difference [95% CI]", "t-test p", "Wilcoxon p"], rows) + [""]
    return lines


def _flags_section(analysis: StudyAnalysis) -> list[str]:
    lines = [f"## Launcher flags that differ from `{analysis.spec.baseline}`", "",
             "Final flag values the launcher recorded (summary.json of each configuration's first finished run; "
             "seed, run_dir and progress left out): flagfiles and dataset defaults resolved.", ""]
    if not analysis.flag_differences:
        return lines + ["No finished runs of the baseline and another configuration to compare.", ""]
    for configuration, differences in analysis.flag_differences.items():
        if not differences:
            lines += [f"- `{configuration}`: same flags as the baseline.", ""]
            continue
        rows = [[f"--{name}", f"`{before}`", f"`{after}`"] for name, (before, after) in differences.items()]
        lines += [f"### {configuration}", "", *_table(["flag", analysis.spec.baseline, configuration], rows), ""]
    return lines


def _data_section(analysis: StudyAnalysis) -> list[str]:
    lines = ["## Data", ""]
    if not analysis.datasets:
        return lines + ["No finished run recorded its dataset.", ""]
    for dataset in analysis.datasets:
        source = dataset.get("source") or {}
        described = ", ".join(f"{key} {value}" for key, value in source.items()
                              if key in ("generator", "num_scenes", "seed", "image_size"))
        lines.append(f"- {', '.join(f'`{d}`' for d in dataset['dirs'])}: {dataset.get('name')}, "
                     f"{dataset.get('split_images')} images in split `{analysis.spec.evaluation.split}`"
                     f"{'; ' + described if described else ''}; runs: {runs_described(dataset)}.")
    lines += ["", "A synthetic world is built once, by the first run that needs it, with that run's `--seed`; every "
              "later run reuses it whatever its own seed, so the seeds of a study vary the training (data order, "
              "augmentation, initialisation), not the world.", ""]
    return lines


def _runs_section(analysis: StudyAnalysis) -> list[str]:
    rows = [[r.configuration, str(r.seed), r.state, _seconds(r.launch_seconds), _seconds(r.eval_seconds),
             _seconds(r.launcher_seconds), f"`{r.directory}`"] for r in analysis.results]
    lines = ["## Runs", "",
             "Wall seconds measured by the study over every attempt (launch, eval), and the launcher's own total "
             "from summary.json (its last attempt).", "",
             *_table(["configuration", "seed", "state", "launch s", "eval s", "launcher total s", "run dir"], rows),
             ""]
    failed = [r for r in analysis.results if r.failure is not None]
    if failed:
        lines += ["## Failed runs", ""]
        for result in failed:
            failure = result.failure
            lines += [f"### {result.configuration} seed {result.seed}: {failure.get('stage')} failed (exit status "
                      f"{failure.get('returncode')})", "", f"Log: `{result.directory}`; command: "
                      f"`{result.launch_command if failure.get('stage') == 'launch' else result.eval_command}`", "",
                      "```", (failure.get("log_tail") or "").rstrip(), "```", ""]
    return lines


def _commands_section(analysis: StudyAnalysis, out_dir: pathlib.Path) -> list[str]:
    spec_path = analysis.spec.path
    lines = ["## Regenerate", "", "```bash",
             f"{commands.study_command(spec_path, out_dir)}  # runs what is missing, then reports",
             f"{commands.study_command(spec_path, out_dir, '--report_only')}  # the report from what exists",
             "```", "", "<details><summary>Each configuration's commands</summary>", "", "```bash"]
    # One seed's commands per configuration: the others differ only in --seed and the seed_<n> run folder (a
    # study of hundreds of runs would otherwise repeat every command line once a seed; each run folder's
    # study_status.json has its own).
    by_configuration: dict[str, list] = {}
    for result in analysis.results:
        by_configuration.setdefault(result.configuration, []).append(result)
    for configuration, (first, *rest) in by_configuration.items():
        note = (f"; seeds {seed_span(sorted(r.seed for r in rest))}: the same with their --seed and seed_<n> folder"
                if rest else "")
        lines += [f"# {configuration}, seed {first.seed}{note}", first.launch_command, first.eval_command]
    return lines + ["```", "", "</details>", ""]


def _dose_response_section(analysis: StudyAnalysis) -> list[str]:
    """Each [[dose_response]] block's table (kitm.study.dose_response)."""
    if not analysis.spec.dose_responses:
        return []
    lines = ["## Dose-response", "",
             "Improvement = configuration - baseline at each level, mean [95% t interval] over the paired seeds.", ""]
    for block in analysis.spec.dose_responses:
        lines += dose_response_markdown(block, dose_response_rows(block, analysis.comparison), decimals)
    return lines


def _agreement_section(agreement: dict | None) -> list[str]:
    if agreement is None:
        return []
    parameters = agreement["parameters"]
    lines = ["## Relevance sources against the reference", ""]
    if "error" in agreement:
        return lines + [f"Not computed: {agreement['error']}", ""]
    lines.append(f"Kendall tau-b of each source's relevance matrix with `{parameters['reference']}` on split "
                 f"`{parameters['split']}` of `{parameters['data_dir']}` ({agreement['captions']} captions x "
                 f"{agreement['images']} images; kitm.study.agreement): over all pairs, and the mean over caption "
                 "rows and over image columns.")
    lines.append("")
    rows = [[f"`{source}`", _number(f["all_pairs"], 3), _number(f["per_caption"], 3), _number(f["per_image"], 3)]
            for source, f in agreement["sources"].items()]
    return lines + _table(["source", "tau-b, all pairs", "mean tau-b per caption", "mean tau-b per image"], rows) + [""]


def build_markdown(analysis: StudyAnalysis, out_dir: pathlib.Path, invocation: dict, plots: Sequence[pathlib.Path],
                   agreement: dict | None = None) -> str:
    spec = analysis.spec
    done = sum(r.done for r in analysis.results)
    lines = [f"# Study `{spec.name}`", "",
             f"Spec `{spec.path}`, output `{out_dir}`; report generated {invocation['generated']} by kitm "
             f"{kitm.__version__}. {done} of {len(analysis.results)} runs evaluated; seeds "
             f"{', '.join(map(str, analysis.seeds))}; baseline `{spec.baseline}`; evaluation on split "
             f"`{spec.evaluation.split}` with relevance `{spec.evaluation.relevance}`.", ""]
    lines += _summary_section(analysis)
    if any(path.name == "claims.png" for path in plots):
        lines += ["![every claim part's paired improvement](plots/claims.png)", ""]
    if analysis.warnings:
        lines += ["## Warnings", "", *(f"- {warning}" for warning in analysis.warnings), ""]
    lines += _claims_section(analysis)
    lines += _figures_section(analysis)
    lines += _comparisons_section(analysis)
    lines += _dose_response_section(analysis)
    lines += tuning_markdown(tuning_choices(analysis.spec, analysis.values))
    lines += tuned_markdown(analysis.tuned)
    lines += curves_markdown(analysis.validation_curves)
    lines += _agreement_section(agreement)
    lines += ["## Verdict rules", "", *(f"- {rule}" for rule in claim_rules.RULES),
              f"- t(0.975, n-1) for n = 2, 3, 5, 10 seeds: {', '.join(f'{t_quantile(n):.3f}' for n in (2, 3, 5, 10))}.",
              ""]
    lines += _flags_section(analysis)
    lines += _data_section(analysis)
    lines += _runs_section(analysis)
    lines += ["## Wall time", "",
              f"- this invocation ({invocation['mode']}): {_seconds(invocation['seconds'])} s",
              f"- every run's launch and eval attempts together: "
              f"{_seconds(sum((r.launch_seconds or 0) + (r.eval_seconds or 0) for r in analysis.results))} s", ""]
    if plots or study_plots.many_configurations(analysis):
        lines += ["## Plots", ""]
        if study_plots.many_configurations(analysis):
            lines += [f"No bar chart per metric and no R@K / NCS@K curves: they are drawn for at most "
                      f"{study_plots.MAX_PLOTTED_CONFIGURATIONS} configurations, and this study has "
                      f"{len(analysis.configurations)} (the tables above hold every figure; report.json "
                      f"aggregates, compares and lists per run these metrics only: every figure of a run is in its "
                      f"run folder's eval JSON).", ""]
        lines += [f"![{path.stem}](plots/{path.name})" for path in plots]
        lines.append("")
    lines += _commands_section(analysis, out_dir)
    return "\n".join(lines)

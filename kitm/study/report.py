"""The study's report: ``report.md`` for people, ``report.json`` for programs, both written atomically.

``report.json`` holds everything: the spec, every run (state, figures, wall times, failure, dataset, commands),
per-configuration aggregates and paired comparisons against the baseline for every metric the runs have, the
claims with the numbers behind each verdict, the warnings, and the commands that regenerate the study.
``report.md`` shows the spec's metrics (or the default list, :func:`kitm.study.metrics.default_metrics`).
"""

from __future__ import annotations

import datetime
import math
import pathlib
import sys
from collections.abc import Sequence

import kitm
from kitm.study import claims as claim_rules
from kitm.study import commands
from kitm.study.analysis import StudyAnalysis
from kitm.files import write_json_atomically, write_text_atomically
from kitm.study.metrics import decimals, lower_is_better
from kitm.study.statistics import CONFIDENCE, Interval, t_quantile, wilcoxon_smallest_p

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


def _claims_section(analysis: StudyAnalysis) -> list[str]:
    lines = ["## Claims", ""]
    if not analysis.claims:
        return lines + ["The spec makes no claims.", ""]
    for claim in analysis.claims:
        lines += [f"### {claim.name}: **{claim.verdict}**", "",
                  f"`{claim.configuration}` against `{claim.baseline}`; improvement = {claim.configuration} - "
                  f"{claim.baseline} (negated where lower is better), mean [{CONFIDENCE:.0%} t interval] over the "
                  "paired seeds.", ""]
        rows = []
        for part in claim.parts:
            digits = decimals(part.metric)
            comparison = part.comparison
            rule = ("improves (interval > 0)" if part.kind == claim_rules.IMPROVES
                    else f"keeps (lower bound >= -{_number(part.tolerance, digits)})")
            if comparison is None:
                rows.append([part.metric, rule, "0", "no figures", "n/a", "n/a", f"**{part.verdict}**"])
                continue
            rows.append([part.metric, rule, str(len(comparison.seeds)),
                         interval_text(comparison.improvement, digits), _p(comparison.t_test_p),
                         _p(comparison.wilcoxon_p), f"**{part.verdict}**" + (f" ({part.note})" if part.note else "")])
        lines += _table(["metric", "rule", "n", "improvement [95% CI]", "t-test p", "Wilcoxon p", "verdict"], rows)
        lines.append("")
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
    if not analysis.comparisons:
        return lines + ["Only the baseline is in the study.", ""]
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
                     f"{'; ' + described if described else ''}; runs: {', '.join(dataset['runs'])}.")
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
             "```", "", "<details><summary>Every run's commands</summary>", "", "```bash"]
    for result in analysis.results:
        lines += [result.launch_command, result.eval_command]
    return lines + ["```", "", "</details>", ""]


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
    if analysis.warnings:
        lines += ["## Warnings", "", *(f"- {warning}" for warning in analysis.warnings), ""]
    lines += _claims_section(analysis)
    lines += _figures_section(analysis)
    lines += _comparisons_section(analysis)
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
    if plots:
        lines += ["## Plots", ""]
        lines += [f"![{path.stem}](plots/{path.name})" for path in plots]
        lines.append("")
    lines += _commands_section(analysis, out_dir)
    return "\n".join(lines)


def build_json(analysis: StudyAnalysis, out_dir: pathlib.Path, invocation: dict,
               plots: Sequence[pathlib.Path], agreement: dict | None = None) -> dict:
    spec = analysis.spec
    return {
        "kitm_version": kitm.__version__,
        "study": spec.as_dict(),
        "out_dir": str(out_dir),
        "seeds": list(analysis.seeds),
        "invocation": invocation,
        "confidence": CONFIDENCE,
        "metrics": analysis.metrics,
        "available_metrics": analysis.available,
        "lower_is_better": [m for m in analysis.available if lower_is_better(m)],
        "runs": [result.as_dict() for result in analysis.results],
        "aggregates": {c: {m: interval.as_dict() for m, interval in per_metric.items()}
                       for c, per_metric in analysis.aggregates.items()},
        "comparisons": {c: {"baseline": spec.baseline, "metrics": {m: comparison.as_dict()
                                                                   for m, comparison in per_metric.items()}}
                        for c, per_metric in analysis.comparisons.items()},
        "claims": [claim.as_dict() for claim in analysis.claims],
        "agreement": agreement,
        "verdict_rules": list(claim_rules.RULES),
        "flag_differences": {c: {name: {"baseline": before, "configuration": after}
                                 for name, (before, after) in differences.items()}
                             for c, differences in analysis.flag_differences.items()},
        "datasets": analysis.datasets,
        "warnings": analysis.warnings,
        "failed_runs": [f"{r.configuration}/seed_{r.seed}" for r in analysis.results if r.failure is not None],
        "wall_seconds": {"invocation": invocation["seconds"],
                         "runs": sum((r.launch_seconds or 0) + (r.eval_seconds or 0) for r in analysis.results)},
        "plots": [str(pathlib.Path("plots") / path.name) for path in plots],
        "regenerate": {"study": commands.study_command(spec.path, out_dir),
                       "report": commands.study_command(spec.path, out_dir, "--report_only"),
                       "interpreter": sys.executable},
    }


def write_report(analysis: StudyAnalysis, out_dir: pathlib.Path, *, mode: str, seconds: float,
                 argv: Sequence[str], agreement: dict | None = None) -> dict[str, pathlib.Path]:
    """Write the plots, report.md and report.json under `out_dir`; returns their paths."""
    from kitm.study.plots import write_plots

    out_dir = pathlib.Path(out_dir)
    invocation = {"mode": mode, "argv": list(argv), "seconds": seconds,
                  "generated": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    plots = write_plots(analysis, out_dir)
    markdown = write_text_atomically(out_dir / REPORT_MD, build_markdown(analysis, out_dir, invocation, plots,
                                                                         agreement))
    payload = write_json_atomically(out_dir / REPORT_JSON, build_json(analysis, out_dir, invocation, plots, agreement))
    return {"markdown": markdown, "json": payload}

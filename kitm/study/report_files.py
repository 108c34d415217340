"""The study's report files: ``report.md`` (:mod:`kitm.study.report`) for people and ``report.json`` for programs,
both written atomically, and the plots.

``report.json`` holds everything: the spec, every run (state, figures, wall times, failure, dataset, commands),
per-configuration aggregates and paired comparisons against the baseline for every metric the runs have (above
:data:`~kitm.study.plots.MAX_PLOTTED_CONFIGURATIONS` configurations, for the shown metrics only, the runs' figures
too, without their commands: the rest are in each run's folder), the claims with the numbers behind each verdict,
the warnings, and the commands that regenerate the study.
"""

from __future__ import annotations

import datetime
import pathlib
import sys
from collections.abc import Sequence

import kitm
from kitm.files import write_json_atomically, write_text_atomically
from kitm.study import claims as claim_rules
from kitm.study import commands
from kitm.study.analysis import StudyAnalysis
from kitm.study.bootstrap import BOOTSTRAP_SEED, PER_QUERY_SUFFIX, RESAMPLES
from kitm.study.dose_response import dose_response_rows
from kitm.study.metrics import lower_is_better
from kitm.study.plots import many_configurations
from kitm.study.report import REPORT_JSON, REPORT_MD, build_markdown, key_interval, part_text
from kitm.study.statistics import ALPHA, CONFIDENCE, POWER
from kitm.study.tuning import choices as tuning_choices
from kitm.study.validation_curves import DEFAULT_METRIC as VALIDATION_METRIC


def json_aggregated_metrics(analysis: StudyAnalysis, compact: bool) -> list[str]:
    """The metrics report.json aggregates, compares and lists per run: every metric the runs have, or, `compact`
    (a study of more than MAX_PLOTTED_CONFIGURATIONS configurations), the shown ones (analysis.metrics): hundreds
    of runs and configurations on some sixty metrics would be megabytes in git. Every figure of a run stays in its
    run folder's eval JSON, and the claims carry their own numbers."""
    if not compact:
        return list(analysis.available)
    return [metric for metric in analysis.available if metric in analysis.metrics]


def _run_entry(result, metrics: Sequence[str], *, commands: bool) -> dict[str, object]:
    """A run in report.json: its figures on `metrics`; its commands unless `commands` is False (a study of
    hundreds of runs: each run folder's study_status.json has them, report.md one seed's per configuration)."""
    entry = result.as_dict()
    entry["figures"] = {metric: value for metric, value in result.figures.items() if metric in metrics}
    if not commands:
        del entry["launch_command"], entry["eval_command"]
    return entry


def build_json(analysis: StudyAnalysis, out_dir: pathlib.Path, invocation: dict,
               plots: Sequence[pathlib.Path], agreement: dict | None = None) -> dict:
    spec = analysis.spec
    compact = many_configurations(analysis)
    aggregated = json_aggregated_metrics(analysis, compact)
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
        "runs": [_run_entry(result, aggregated, commands=not compact)
                 for result in analysis.results],
        "aggregated_metrics": aggregated,
        "aggregates": {c: {m: interval.as_dict() for m, interval in per_metric.items() if m in aggregated}
                       for c, per_metric in analysis.aggregates.items()},
        "not_compared_with_baseline": analysis.not_compared,
        "comparisons": {c: {"baseline": spec.baseline, "metrics": {m: comparison.as_dict()
                                                                   for m, comparison in per_metric.items()
                                                                   if m in aggregated}}
                        for c, per_metric in analysis.comparisons.items()},
        "claims": [claim.as_dict() for claim in analysis.claims],
        "claims_summary": [{"name": claim.name, "verdict": claim.verdict, "key_interval": key_interval(claim),
                            "paper_effect": None if claim.key_part is None else claim.key_part.paper_effect,
                            "paper_effect_source": claim.paper_effect_source,
                            "parts": [{"kind": part.kind, "metric": part.metric, "verdict": part.verdict,
                                       "text": part_text(part), "paper_effect": part.paper_effect,
                                       "paper_source": part.paper_source} for part in claim.parts]}
                           for claim in analysis.claims],
        "claim_outcomes": list(claim_rules.OUTCOMES),
        "power": {"alpha": ALPHA, "power": POWER, "test": "two-sided paired t-test, exact noncentral t"},
        "bootstrap": {"resamples": RESAMPLES, "rng_seed": BOOTSTRAP_SEED, "confidence": CONFIDENCE,
                      "file": f"<eval json stem>{PER_QUERY_SUFFIX}"},
        "agreement": agreement,
        "dose_response": [{"name": block.name, "x_label": block.x_label,
                           "rows": dose_response_rows(block, analysis.comparison)}
                          for block in spec.dose_responses],
        "validation_curves": {"metric": VALIDATION_METRIC, "curves": analysis.validation_curves},
        "tuning": [choice.as_dict() for choice in tuning_choices(spec, analysis.values)],
        "tuned_configurations": [record.as_dict() for record in analysis.tuned],
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
    # report.json is for programs: written without indentation (a study of hundreds of runs: megabytes in git)
    payload = write_json_atomically(out_dir / REPORT_JSON, build_json(analysis, out_dir, invocation, plots, agreement),
                                    indent=None)
    return {"markdown": markdown, "json": payload}

"""PNG plots of a study (matplotlib, Agg backend: no display needed), each written atomically as a 256-colour
palette PNG.

- ``plots/<metric>.png``: one bar per configuration at the mean over seeds, whiskers at the 95% t interval,
  the seeds' own values as dots.
- ``plots/recall_curves.png``: VSE++ recall R@K against K, one line per configuration with its 95% interval as a
  band, image -> text and text -> image side by side. ``plots/ncs_curves.png``: the same for NCS@K, when the runs
  were scored with relevance.
  Both only for a study of at most :data:`MAX_PLOTTED_CONFIGURATIONS` configurations: with more, a bar chart is
  several thousand pixels wide and a curve plot's legend longer than its axes (the report's tables hold every
  figure), and a study's plots would weigh more than its runs' results in git.
- ``plots/claims.png``: every claim part's paired improvement and interval beside 0 and the paper's effect
  (:mod:`kitm.study.claims_figure`).
- ``plots/validation_curves.png``: the validation figure per epoch of the runs that validated while training
  (:mod:`kitm.study.validation_curves`).
"""

from __future__ import annotations

import io
import pathlib
import re

from kitm.study.dose_response import dose_response_figure, dose_response_rows
from kitm.study.analysis import StudyAnalysis
from kitm.files import write_bytes_atomically
from kitm.study.metrics import DIRECTION_TITLES, DIRECTIONS, curve_metrics, lower_is_better, parse_metric, units
from kitm.study.statistics import CONFIDENCE
from kitm.study.validation_curves import curves_figure
from kitm.study.claims_figure import claims_figure

CLAIMS_PLOT = "claims.png"
MAX_PLOTTED_CONFIGURATIONS = 30  # per-metric bars and curves above this many configurations are left out
CURVES = {"recall_curves": ("R", "VSE++ recall R@K"), "ncs_curves": ("NCS", "NCS@K")}
_UNSAFE = re.compile(r"[^A-Za-z0-9_@.=-]")


def many_configurations(analysis: StudyAnalysis) -> bool:
    """More configurations than MAX_PLOTTED_CONFIGURATIONS: no per-metric plots, and a report.json of the shown
    metrics only (kitm.study.report_files)."""
    return len(analysis.configurations) > MAX_PLOTTED_CONFIGURATIONS


def plot_name(metric: str) -> str:
    """File name of a metric's plot: the metric with characters unsafe in file names replaced by '_'."""
    return _UNSAFE.sub("_", metric) + ".png"


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)  # files only; never look for a display
    import matplotlib.pyplot as plt

    return plt


def _colors(configurations) -> dict[str, object]:
    plt = _pyplot()
    cycle = plt.get_cmap("tab10")
    return {name: cycle(i % 10) for i, name in enumerate(configurations)}


def _save(figure, path: pathlib.Path) -> pathlib.Path:
    from PIL import Image  # matplotlib's own dependency

    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    _pyplot().close(figure)
    # A plot has a few flat colours and their anti-aliased edges: a 256-colour palette looks the same and weighs a
    # quarter of the RGBA file (the second claims study's figure: 548 kB -> 137 kB), and these files live in git.
    buffer.seek(0)
    palette = Image.open(buffer).convert("RGB").quantize(colors=256, method=Image.Quantize.FASTOCTREE)
    packed = io.BytesIO()
    palette.save(packed, format="png", optimize=True)
    return write_bytes_atomically(path, packed.getvalue())


def metric_plot(analysis: StudyAnalysis, metric: str, path: pathlib.Path) -> pathlib.Path:
    """Bars with interval whiskers and seed dots for one metric (module docstring)."""
    plt = _pyplot()
    configurations = list(analysis.configurations)
    colors = _colors(configurations)
    figure, axes = plt.subplots(figsize=(max(4.5, 1.3 * len(configurations) + 2.0), 4.2))
    for x, configuration in enumerate(configurations):
        interval = analysis.aggregates[configuration].get(metric)
        per_seed = analysis.values[configuration].get(metric, {})
        if interval is None or interval.n == 0:
            axes.text(x, 0, "no runs", ha="center", va="bottom", fontsize=9, color="gray")
            continue
        whisker = interval.half_width if interval.defined else 0.0
        axes.bar(x, interval.mean, width=0.6, color=colors[configuration], alpha=0.75,
                 yerr=whisker if interval.defined else None, capsize=6, ecolor="black",
                 label=f"{configuration} (n={interval.n})")
        offsets = [(i - (len(per_seed) - 1) / 2) * 0.08 for i in range(len(per_seed))]
        axes.scatter([x + o for o in offsets], list(per_seed.values()), s=18, color="black", zorder=3)
        note = f"{interval.mean:.{2 if abs(interval.mean) >= 1 else 3}f}" + ("" if interval.defined else " (n=1)")
        axes.annotate(note, (x, interval.high if interval.defined else interval.mean), textcoords="offset points",
                      xytext=(0, 4), ha="center", fontsize=8)
    axes.set_xticks(range(len(configurations)), configurations, rotation=20 if len(configurations) > 4 else 0)
    direction = parse_metric(metric)[0]
    better = "lower is better" if lower_is_better(metric) else "higher is better"
    axes.set_ylabel(f"{metric} ({units(metric)}; {better})")
    title = metric if direction is None else f"{metric} ({DIRECTION_TITLES[direction]})"
    axes.set_title(f"{title}\nmean over seeds, whiskers: {CONFIDENCE:.0%} t interval, dots: seeds", fontsize=10)
    axes.grid(axis="y", alpha=0.3)
    axes.set_axisbelow(True)
    return _save(figure, path)


def curve_plot(analysis: StudyAnalysis, family: str, title: str, path: pathlib.Path) -> pathlib.Path | None:
    """<family>@K against K per configuration, one panel per direction; None when no run has the family."""
    if not any(curve_metrics(analysis.available, d, family) for d in DIRECTIONS):
        return None
    plt = _pyplot()
    colors = _colors(analysis.configurations)
    figure, panels = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for axes, direction in zip(panels, DIRECTIONS):
        names = curve_metrics(analysis.available, direction, family)
        ks = [parse_metric(name)[2] for name in names]
        for configuration in analysis.configurations:
            intervals = [analysis.aggregates[configuration].get(name) for name in names]
            points = [(k, i) for k, i in zip(ks, intervals) if i is not None and i.n > 0]
            if not points:
                continue
            x = [k for k, _ in points]
            n = min(i.n for _, i in points)
            axes.plot(x, [i.mean for _, i in points], marker="o", color=colors[configuration],
                      label=f"{configuration} (n={n})")
            if all(i.defined for _, i in points):
                axes.fill_between(x, [i.low for _, i in points], [i.high for _, i in points],
                                  color=colors[configuration], alpha=0.18, linewidth=0)
        axes.set_xticks(ks)
        axes.set_xlabel("K")
        axes.set_title(DIRECTION_TITLES[direction])
        axes.grid(alpha=0.3)
    panels[0].set_ylabel(f"{family}@K (percent)")
    panels[0].legend(loc="best", fontsize=9)
    figure.suptitle(f"{title}: mean over seeds, band: {CONFIDENCE:.0%} t interval", fontsize=11)
    return _save(figure, path)


def write_plots(analysis: StudyAnalysis, out_dir: pathlib.Path) -> list[pathlib.Path]:
    """Every plot of the module docstring under ``<out_dir>/plots``; returns the paths written."""
    plots_dir = pathlib.Path(out_dir) / "plots"
    written = []
    per_configuration = not many_configurations(analysis)
    for metric in analysis.metrics if per_configuration else ():
        if any(metric in analysis.values[c] for c in analysis.configurations):
            written.append(metric_plot(analysis, metric, plots_dir / plot_name(metric)))
    for name, (family, title) in CURVES.items() if per_configuration else ():
        path = curve_plot(analysis, family, title, plots_dir / f"{name}.png")
        if path is not None:
            written.append(path)
    figure = claims_figure(analysis.claims, _pyplot())
    if figure is not None:
        written.append(_save(figure, plots_dir / CLAIMS_PLOT))
    figure = curves_figure(analysis.validation_curves, _pyplot())
    if figure is not None:
        written.append(_save(figure, plots_dir / "validation_curves.png"))
    for index, block in enumerate(analysis.spec.dose_responses):
        figure = dose_response_figure(block, dose_response_rows(block, analysis.comparison), _pyplot())
        if figure is not None:
            written.append(_save(figure, plots_dir / f"dose_response_{index}.png"))
    return written

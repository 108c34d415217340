"""Validation during training in a study: a figure per epoch, over seeds, for the runs that validated as they trained.

A run launched with ``--eval_every_epochs=k`` appends one JSON line per validation to ``<run>/evaluations.jsonl``
(``{"epoch": 1-based, "val_rsum": ..., ...}``, :class:`kitm.callbacks.RetrievalEvaluation`). A study that
chooses its schedule on validation keeps a few such runs (a configuration with its own ``seeds``, say) and its
report then shows the plateau beside the verdicts: for each configuration with histories, at every epoch, the
mean over the seeds that validated there and its 95% t interval (:func:`kitm.study.statistics.t_interval`), the
epoch where the mean peaks, and one plot of the curves.

A resumed run may have validated an epoch twice (once before it was killed, once after resuming): the last line
for an epoch wins, since it belongs to the run that went on.
"""

from __future__ import annotations

import json
import math
import pathlib
from collections.abc import Iterable, Mapping, Sequence

from kitm.study.statistics import CONFIDENCE, t_interval

HISTORY_FILE = "evaluations.jsonl"
DEFAULT_METRIC = "val_rsum"


def read_history(path: pathlib.Path, metric: str = DEFAULT_METRIC) -> dict[int, float]:
    """epoch -> `metric` from one run's ``evaluations.jsonl``; ValueError naming the file and line when a line is
    not a JSON object with an integer epoch >= 1 and a finite number for `metric`."""
    history: dict[int, float] = {}
    for number, line in enumerate(pathlib.Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}, line {number}: not JSON ({error.msg}).") from None
        epoch = record.get("epoch") if isinstance(record, dict) else None
        value = record.get(metric) if isinstance(record, dict) else None
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 1:
            raise ValueError(f"{path}, line {number}: no integer 'epoch' >= 1.")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"{path}, line {number}: no finite number for {metric!r}.")
        history[epoch] = float(value)  # a later line for the same epoch wins (module docstring)
    return history


def curve_rows(histories: Mapping[int, Mapping[int, float]]) -> list[dict[str, object]]:
    """One row per epoch that any seed validated: {"epoch", "n", "mean", "low", "high", "per_seed"}, over the seeds'
    values at that epoch (`histories`: seed -> epoch -> value)."""
    epochs = sorted({epoch for history in histories.values() for epoch in history})
    rows = []
    for epoch in epochs:
        per_seed = {seed: history[epoch] for seed, history in sorted(histories.items()) if epoch in history}
        interval = t_interval(per_seed.values())
        rows.append({"epoch": epoch, "n": interval.n, "mean": interval.mean,
                     "low": interval.low if interval.defined else None,
                     "high": interval.high if interval.defined else None, "per_seed": per_seed})
    return rows


def peak(rows: Sequence[Mapping[str, object]]) -> Mapping[str, object] | None:
    """The row whose mean is highest (the first such epoch), or None without rows."""
    return max(rows, key=lambda row: (row["mean"], -row["epoch"])) if rows else None


def collect_curves(runs: Iterable[tuple[str, int, pathlib.Path]], metric: str = DEFAULT_METRIC
                   ) -> tuple[dict[str, list[dict[str, object]]], list[str]]:
    """(configuration -> curve rows, warnings) from (configuration, seed, run folder) triples; a run without a
    history contributes nothing, one whose history cannot be read is named in a warning."""
    histories: dict[str, dict[int, dict[int, float]]] = {}
    warnings = []
    for configuration, seed, directory in runs:
        path = pathlib.Path(directory) / HISTORY_FILE
        if not path.is_file():
            continue
        try:
            history = read_history(path, metric)
        except (OSError, UnicodeDecodeError, ValueError) as error:
            warnings.append(f"validation history {error}" if isinstance(error, ValueError)
                            else f"validation history {path}: cannot be read ({error})")
            continue
        if history:
            histories.setdefault(configuration, {})[seed] = history
    return {configuration: curve_rows(per_seed) for configuration, per_seed in histories.items()}, warnings


def curves_markdown(curves: Mapping[str, Sequence[Mapping[str, object]]], metric: str = DEFAULT_METRIC,
                    digits: int = 1) -> list[str]:
    """The report's section: one column per configuration, one row per epoch, the peak marked."""
    if not curves:
        return []
    names = list(curves)
    epochs = sorted({row["epoch"] for rows in curves.values() for row in rows})
    peaks = {name: peak(rows) for name, rows in curves.items()}
    lines = ["## Validation during training", "",
             f"`{metric}` on the validation split at each epoch the runs validated (`--eval_every_epochs`), mean over "
             f"seeds [{CONFIDENCE:.0%} t interval] (n); **bold**: the epoch where the mean peaks. Plot: "
             f"`plots/validation_curves.png`.", "",
             "| epoch | " + " | ".join(f"`{name}`" for name in names) + " |",
             "|---|" + "---|" * len(names)]
    for epoch in epochs:
        cells = []
        for name in names:
            row = next((r for r in curves[name] if r["epoch"] == epoch), None)
            if row is None:
                cells.append("")
                continue
            text = f"{row['mean']:.{digits}f}"
            if row["low"] is not None:
                text += f" [{row['low']:.{digits}f}, {row['high']:.{digits}f}]"
            text += f" ({row['n']})"
            cells.append(f"**{text}**" if peaks[name] is row else text)
        lines.append(f"| {epoch} | " + " | ".join(cells) + " |")
    return lines + [""]


def curves_figure(curves: Mapping[str, Sequence[Mapping[str, object]]], pyplot, metric: str = DEFAULT_METRIC):
    """A matplotlib figure of the curves (mean line, interval band where defined), or None without curves."""
    if not curves:
        return None
    figure, axes = pyplot.subplots(figsize=(7.5, 4.5))
    cycle = pyplot.get_cmap("tab10")
    for index, (name, rows) in enumerate(curves.items()):
        color = cycle(index % 10)
        epochs = [row["epoch"] for row in rows]
        n = min(row["n"] for row in rows)
        axes.plot(epochs, [row["mean"] for row in rows], marker="o", color=color, label=f"{name} (n={n})")
        seeds = [(row["epoch"], value) for row in rows for value in row["per_seed"].values()]
        axes.scatter([e for e, _ in seeds], [v for _, v in seeds], s=10, color=color, alpha=0.6)
        # With two seeds the t interval is +-12.7 SD wide and would bury the curves: bands from three seeds on.
        banded = [row for row in rows if row["low"] is not None and row["n"] >= 3]
        if len(banded) > 1:
            axes.fill_between([row["epoch"] for row in banded], [row["low"] for row in banded],
                              [row["high"] for row in banded], color=color, alpha=0.18, linewidth=0)
    axes.xaxis.set_major_locator(pyplot.MaxNLocator(integer=True))
    axes.set_xlabel("epoch")
    axes.set_ylabel(f"{metric} (validation split)")
    axes.set_title(f"{metric} during training: mean over seeds (line), seeds (dots), "
                   f"band: {CONFIDENCE:.0%} t interval (n >= 3)", fontsize=10)
    axes.grid(alpha=0.3)
    axes.legend(loc="best", fontsize=9)
    return figure

"""Validation during training in a study: a figure per epoch, over seeds, for the runs that validated as they trained.

A run launched with ``--eval_every_epochs=k`` appends one JSON line per validation to ``<run>/evaluations.jsonl``
(``{"epoch": 1-based, "val_rsum": ..., ...}``, :class:`kitm.callbacks.RetrievalEvaluation`). A study that
chooses its schedule on validation keeps a few such runs (a configuration with its own ``seeds``, say) and its
report then shows the plateau beside the verdicts: for each configuration with histories, at every epoch, the
mean over the seeds that validated there and its 95% t interval (:func:`kitm.study.statistics.t_interval`), the
epoch where the mean peaks (among the epochs every seed reached, so that a peak never compares means over
different seeds), and one plot of the curves.

A resumed run may have validated an epoch twice (once before it was killed, once after resuming): the last line
for an epoch wins, since it belongs to the run that went on. A killed run can also leave a torn last line, and a
diverging one a NaN: such a line is skipped and named in a warning, the rest of the run's history is kept.
"""

from __future__ import annotations

import json
import math
import pathlib
from collections.abc import Iterable, Mapping, Sequence

from kitm.study.statistics import CONFIDENCE, t_interval

HISTORY_FILE = "evaluations.jsonl"
DEFAULT_METRIC = "val_rsum"


def read_history(path: pathlib.Path, metric: str = DEFAULT_METRIC) -> tuple[dict[int, float], list[str]]:
    """(epoch -> `metric`, problems) from one run's ``evaluations.jsonl``: a line that is not a JSON object with an
    integer epoch >= 1 and a finite number for `metric` is skipped, and named (file and line) in `problems`."""
    history: dict[int, float] = {}
    problems = []
    for number, line in enumerate(pathlib.Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            problems.append(f"{path}, line {number}: not JSON ({error.msg}); skipped.")
            continue
        epoch = record.get("epoch") if isinstance(record, dict) else None
        value = record.get(metric) if isinstance(record, dict) else None
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 1:
            problems.append(f"{path}, line {number}: no integer 'epoch' >= 1; skipped.")
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            problems.append(f"{path}, line {number}: no finite number for {metric!r}; skipped.")
        else:
            history[epoch] = float(value)  # a later line for the same epoch wins (module docstring)
    return history, problems


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
    """The row whose mean is highest (the first such epoch) among the rows with the most seeds, or None."""
    if not rows:
        return None
    most = max(row["n"] for row in rows)
    return max((row for row in rows if row["n"] == most), key=lambda row: (row["mean"], -row["epoch"]))


def collect_curves(runs: Iterable[tuple[str, int, pathlib.Path]], metric: str = DEFAULT_METRIC
                   ) -> tuple[dict[str, list[dict[str, object]]], list[str]]:
    """(configuration -> curve rows, warnings) from the done runs' (configuration, seed, run folder) triples. A
    configuration none of whose runs validated has no curve; one where only some did is named in a warning (a
    curve over fewer seeds than the configuration has), as is a history that cannot be read or a skipped line."""
    histories: dict[str, dict[int, dict[int, float]]] = {}
    without: dict[str, list[int]] = {}
    warnings = []
    for configuration, seed, directory in runs:
        path = pathlib.Path(directory) / HISTORY_FILE
        history: dict[int, float] = {}
        if path.is_file():
            try:
                history, problems = read_history(path, metric)
            except (OSError, UnicodeDecodeError) as error:
                problems = [f"{path}: cannot be read ({error})"]
            warnings += [f"validation history {problem}" for problem in problems]
        if history:
            histories.setdefault(configuration, {})[seed] = history
        else:
            without.setdefault(configuration, []).append(seed)
    for configuration, seeds in without.items():
        if configuration in histories:
            warnings.append(f"validation history: configuration {configuration!r} has none for seed(s) "
                            f"{', '.join(map(str, sorted(seeds)))}; its curve is over "
                            f"{len(histories[configuration])} seed(s)")
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
    by_epoch = {name: {row["epoch"]: row for row in rows} for name, rows in curves.items()}
    for epoch in epochs:
        cells = []
        for name in names:
            row = by_epoch[name].get(epoch)
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
    """A matplotlib figure of the curves (the mean as a line, each seed as a dot, the interval as a band over the
    epochs with 3 or more seeds), or None without curves."""
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
        banded = [row["low"] is not None and row["n"] >= 3 for row in rows]
        if sum(banded) > 1:
            # `where` leaves gaps at epochs with fewer seeds instead of bridging them.
            axes.fill_between(epochs, [row["low"] if ok else row["mean"] for row, ok in zip(rows, banded)],
                              [row["high"] if ok else row["mean"] for row, ok in zip(rows, banded)], where=banded,
                              color=color, alpha=0.18, linewidth=0)
    axes.xaxis.set_major_locator(pyplot.MaxNLocator(integer=True))
    axes.set_xlabel("epoch")
    axes.set_ylabel(f"{metric} (validation split)")
    axes.set_title(f"{metric} during training: mean over seeds (line), seeds (dots), "
                   f"band: {CONFIDENCE:.0%} t interval (n >= 3)", fontsize=10)
    axes.grid(alpha=0.3)
    axes.legend(loc="best", fontsize=9)
    return figure

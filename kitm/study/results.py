"""What each run of a study left on disk: its state, figures, wall times, failure, flags and dataset.

Read-only: the report is built from these, so ``--report_only`` and a full invocation report the same way. A
run's per-query figures (``study_eval.per_query.npz``, :mod:`kitm.study.bootstrap`) are only located here; the
analysis reads them when a claim needs them.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Iterable, Sequence

from kitm.study import commands, runs
from kitm.study.bootstrap import per_query_path
from kitm.files import read_json
from kitm.study.metrics import run_figures
from kitm.study.runs import RunPlan


@dataclasses.dataclass(frozen=True)
class RunResult:
    configuration: str
    seed: int
    directory: pathlib.Path
    state: str
    figures: dict[str, float]  # empty unless done
    launch_seconds: float | None  # the study's wall clock over every launcher attempt
    eval_seconds: float | None
    launcher_seconds: float | None  # the launcher's own total (summary.json; its last attempt only)
    failure: dict | None  # {"stage", "returncode", "log_tail"} of a failed run
    flags: dict | None  # the launcher's final flag values (summary.json)
    dataset: dict | None  # {"dir", "name", "split_images", "source"}: the records the run trained on
    kitm_source: str | None  # fingerprint of the kitm sources that trained it (None: not trained by the study)
    launch_command: str
    eval_command: str
    per_query: pathlib.Path | None = None  # <eval json stem>.per_query.npz beside the eval JSON, when it exists
    kitm_commit: str | None = None  # git commit of that code (+dirty), when the study could record it
    # The collapse monitor's statistic at the last epoch (summary.json): the image embeddings' mean pairwise cosine
    image_cosine: float | None = None

    @property
    def done(self) -> bool:
        return self.state == runs.DONE

    def as_dict(self) -> dict[str, object]:
        return {"configuration": self.configuration, "seed": self.seed, "run_dir": str(self.directory),
                "state": self.state, "figures": self.figures,
                "seconds": {"launch": self.launch_seconds, "eval": self.eval_seconds,
                            "launcher_total": self.launcher_seconds},
                "failure": self.failure, "dataset": self.dataset, "kitm_source": self.kitm_source,
                "kitm_commit": self.kitm_commit,
                "launch_command": self.launch_command,
                "eval_command": self.eval_command,
                "per_query": None if self.per_query is None else str(self.per_query)}


def _dataset(summary: dict | None, split: str) -> dict | None:
    """The dataset a run used (from its summary.json and the records' dataset.json), or None if unknown."""
    if not isinstance(summary, dict) or not isinstance(summary.get("dataset"), dict):
        return None
    entry = summary["dataset"]
    info = read_json(pathlib.Path(str(entry.get("dir", ""))) / "dataset.json") if entry.get("dir") else None
    splits = entry.get("splits") or {}
    return {"dir": entry.get("dir"), "name": entry.get("name"), "split_images": splits.get(split),
            "source": info.get("source") if isinstance(info, dict) else None}


def collect(plan: RunPlan, split: str) -> RunResult:
    """The run's result from its folder (`split`: the evaluated split, whose size is recorded)."""
    status = runs.read_status(plan)
    state = runs.run_state(plan, status)
    figures: dict[str, float] = {}
    failure = None
    if state == runs.DONE:
        try:
            figures = run_figures(read_json(plan.eval_json))
        except ValueError as error:
            state = runs.FAILED
            failure = {"stage": "eval", "returncode": None, "log_tail": f"{plan.eval_json}: {error}"}
    elif state == runs.FAILED:
        failure = {"stage": status.get("failed_stage"), "returncode": status.get("returncode"),
                   "log_tail": status.get("log_tail") or ""}
    per_query = per_query_path(plan.eval_json) if state == runs.DONE else None
    per_query = per_query if per_query is not None and per_query.is_file() else None
    summary = read_json(plan.summary_json)
    summary = summary if isinstance(summary, dict) else None
    launcher_seconds = None
    if summary is not None and isinstance(summary.get("seconds"), dict):
        launcher_seconds = summary["seconds"].get("total")
    return RunResult(
        configuration=plan.configuration, seed=plan.seed, directory=plan.directory, state=state, figures=figures,
        launch_seconds=runs.attempt_seconds(status, "launch"), eval_seconds=runs.attempt_seconds(status, "eval"),
        launcher_seconds=launcher_seconds, failure=failure,
        flags=summary.get("flags") if summary is not None else None, dataset=_dataset(summary, split),
        kitm_source=runs.trained_by(status),
        launch_command=commands.display(plan.launch_args), eval_command=commands.display(plan.eval_args),
        per_query=per_query, kitm_commit=runs.trained_by(status, "kitm_commit"),
        image_cosine=_image_cosine(summary) if state == runs.DONE else None)


def _image_cosine(summary: dict | None) -> float | None:
    """The last epoch's `collapse/image_cosine` of a run's summary.json, None when it has none."""
    collapse = summary.get("collapse") if isinstance(summary, dict) else None
    last = collapse.get("last") if isinstance(collapse, dict) else None
    value = last.get("collapse/image_cosine") if isinstance(last, dict) else None
    return float(value) if isinstance(value, (int, float)) else None


def values_by_configuration(results: Iterable[RunResult],
                            configurations: Sequence[str]) -> dict[str, dict[str, dict[int, float]]]:
    """configuration -> metric -> seed -> value, from the done runs among `results` (the others add nothing)."""
    values: dict[str, dict[str, dict[int, float]]] = {c: {} for c in configurations}
    for result in results:
        if result.done:
            for metric, value in result.figures.items():
                values[result.configuration].setdefault(metric, {})[result.seed] = value
    return values

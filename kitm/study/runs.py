"""The runs of a study on disk: their plan, their status file, and what a run folder says about the run.

A run folder ``<out>/runs/<configuration>/seed_<s>/`` holds the launcher's files (``summary.json`` once the run is
complete, ``backup/`` while it is not), ``launch.log`` and ``eval.log`` (each command's stdout and stderr,
appended attempt after attempt), ``study_eval.json`` (the kitm.eval report) and ``study_status.json``, the
study's record of the run: the exact commands, each attempt's stage, start, wall seconds, exit status and the
fingerprint of the kitm sources it ran (:func:`kitm.study.commands.source_fingerprint`), and the
state (running, failed, done) with the tail of the failing log.

The state of a run, read from those files (:func:`run_state`):

- ``done``: ``study_eval.json`` exists and was made by the evaluation command the spec gives now;
- ``stale``: the status file records another launch command than the spec gives now (the spec changed after the
  run started): the study neither reuses nor overwrites it;
- ``failed``: the last attempt exited non-zero (the next study invocation tries again);
- ``incomplete``: an attempt started and never finished (a killed study; the launcher resumes from ``backup/``);
- ``trained``: ``summary.json`` exists, the evaluation does not (or was made by another evaluation command);
- ``missing``: nothing ran yet.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Iterable, Mapping

from kitm.study import commands
from kitm.files import read_json, write_json_atomically
from kitm.study.spec import StudySpec

DONE, STALE, FAILED, INCOMPLETE, TRAINED, MISSING = "done", "stale", "failed", "incomplete", "trained", "missing"
RUNNING = "running"  # the status file's state while an attempt is under way
LOG_TAIL_LINES = 40


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """One (configuration, seed) of a study: its folder and its two commands (arguments after the interpreter)."""

    configuration: str
    seed: int
    directory: pathlib.Path
    launch_args: tuple[str, ...]
    eval_args: tuple[str, ...]
    # The same run's command without the spec's pinned flags (kitm.study.spec, ``pinned_flags``): what a run
    # recorded when the pinned values were still the launcher's defaults.
    unpinned_launch_args: tuple[str, ...] | None = None

    @property
    def label(self) -> str:
        return f"{self.configuration} seed {self.seed}"

    @property
    def eval_json(self) -> pathlib.Path:
        return self.directory / commands.EVAL_FILE

    @property
    def summary_json(self) -> pathlib.Path:
        return self.directory / commands.SUMMARY_FILE

    @property
    def status_json(self) -> pathlib.Path:
        return self.directory / commands.STATUS_FILE

    @property
    def launch_log(self) -> pathlib.Path:
        return self.directory / commands.LAUNCH_LOG

    @property
    def eval_log(self) -> pathlib.Path:
        return self.directory / commands.EVAL_LOG


def plan_runs(spec: StudySpec, out_dir: pathlib.Path, configurations: Iterable[str],
              seeds: Iterable[int]) -> list[RunPlan]:
    """Every (configuration, seed) the spec runs (a configuration with its own ``seeds`` only those): seeds
    ascending, the configurations in spec order within each seed, so that a study stopped early has every
    configuration of its first seeds (whole paired comparisons)."""
    plans = []
    configurations = list(configurations)
    for seed in sorted(seeds):
        for configuration in configurations:
            if not spec.configuration(configuration).runs_seed(seed):
                continue
            directory = commands.run_dir(out_dir, configuration, seed)
            unpinned = commands.launch_args(spec, configuration, seed, directory, pinned=False)
            plans.append(RunPlan(configuration, seed, directory,
                                 tuple(commands.launch_args(spec, configuration, seed, directory)),
                                 tuple(commands.eval_args(spec, directory)),
                                 tuple(unpinned) if spec.pinned_flags else None))
    return plans


def runs_outside_own_seeds(spec: StudySpec, out_dir: pathlib.Path) -> list[str]:
    """Evaluated run folders of a configuration at seeds its own ``seeds`` leave out (narrowed after they ran):
    they are neither run nor reported, which the report should say rather than drop them silently."""
    found = []
    for configuration in spec.configurations:
        if configuration.seeds is None:
            continue
        for directory in sorted(pathlib.Path(out_dir, "runs", configuration.name).glob("seed_*")):
            seed = directory.name[len("seed_"):]
            if seed.isdigit() and not configuration.runs_seed(int(seed)) \
                    and (directory / commands.EVAL_FILE).is_file():
                found.append(f"{configuration.name}/{directory.name}")
    return found


def read_status(plan: RunPlan) -> dict | None:
    status = read_json(plan.status_json)
    return status if isinstance(status, dict) else None


def write_status(plan: RunPlan, status: Mapping[str, object]) -> None:
    write_json_atomically(plan.status_json, status)


def new_status(plan: RunPlan, interpreter: str) -> dict:
    return {"configuration": plan.configuration, "seed": plan.seed, "interpreter": interpreter,
            "launch_args": list(plan.launch_args), "eval_args": list(plan.eval_args), "state": RUNNING,
            "failed_stage": None, "returncode": None, "log_tail": None, "attempts": []}


def is_stale(plan: RunPlan, status: Mapping[str, object] | None) -> bool:
    """Whether the run was started by another launch command than the plan's (the spec changed since); a command
    that differs only by the spec's pinned flags is the same run (kitm.study.spec, ``pinned_flags``)."""
    if status is None:
        return False
    recorded = list(status.get("launch_args", []))
    return recorded != list(plan.launch_args) and (plan.unpinned_launch_args is None
                                                   or recorded != list(plan.unpinned_launch_args))


def evaluation_is_current(plan: RunPlan, status: Mapping[str, object] | None) -> bool:
    """``study_eval.json`` exists and (when the study recorded it) came from the plan's evaluation command."""
    if not plan.eval_json.is_file() or not isinstance(read_json(plan.eval_json), dict):
        return False
    return status is None or list(status.get("eval_args", [])) == list(plan.eval_args)


def run_state(plan: RunPlan, status: Mapping[str, object] | None = None) -> str:
    """The run's state (module docstring) from its folder; `status` defaults to its status file."""
    status = read_status(plan) if status is None else status
    if is_stale(plan, status):
        return STALE
    if evaluation_is_current(plan, status):
        return DONE
    if status is not None and status.get("state") == FAILED:
        return FAILED
    if status is not None and status.get("state") == RUNNING:
        return INCOMPLETE
    if plan.summary_json.is_file():
        return TRAINED
    return MISSING


def attempt_seconds(status: Mapping[str, object] | None, stage: str) -> float | None:
    """Wall seconds of every attempt of `stage` ("launch" or "eval") together; None if none was timed."""
    if status is None:
        return None
    times = [a.get("seconds") for a in status.get("attempts", []) if a.get("stage") == stage]
    times = [t for t in times if isinstance(t, (int, float))]
    return float(sum(times)) if times else None


def trained_by(status: Mapping[str, object] | None, key: str = "kitm_source") -> str | None:
    """kitm source fingerprint (:func:`kitm.study.commands.source_fingerprint`; with ``key="kitm_commit"``, the git
    commit, :func:`kitm.study.provenance.source_commit`) of the last launch attempt that succeeded; None when the
    study did not train the run or did not record it."""
    if status is None:
        return None
    launches = [a for a in status.get("attempts", []) if a.get("stage") == "launch" and a.get("returncode") == 0]
    return launches[-1].get(key) if launches else None


def log_tail(path: pathlib.Path, lines: int = LOG_TAIL_LINES, max_bytes: int = 64 * 1024) -> str:
    """The last `lines` lines of a log (read from its last `max_bytes`), or "" when it does not exist."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            handle.seek(max(0, size - max_bytes))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])

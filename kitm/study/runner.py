"""Run a study's (configuration, seed) grid, one subprocess per command, resumably.

For each run (:class:`kitm.study.runs.RunPlan`), in spec order:

1. ``study_eval.json`` current: skipped.
2. ``summary.json`` present (the launcher finished): only ``python -m kitm.eval``.
3. Otherwise ``python -m kitm.launch`` (a killed run's launcher resumes from its ``backup/`` by itself), then
   ``python -m kitm.eval``.

After the evaluation the run's per-query file (``study_eval.per_query.npz``, kitm.eval's full format) is compacted
in place (:func:`kitm.study.per_query_files.compact_file`: written under a temporary name, then renamed over it),
keeping what the study's bootstrap reads.

Each command runs in its own process (TensorFlow state never leaks between runs, and a crash ends one run, not
the study) with its stdout and stderr appended to ``launch.log`` / ``eval.log``; the logs are append-only
streams, the one exception to writing files atomically, since a half-written log line loses nothing. A non-zero
exit marks the run failed in its status file, with the tail of its log, and the study goes on with the next run.
"""

from __future__ import annotations

import dataclasses
import datetime
import subprocess
import sys
import time
import zipfile
from collections.abc import Mapping, Sequence

from kitm.progress import progress_bar as tqdm

from kitm.study import commands, runs
from kitm.study.bootstrap import per_query_path
from kitm.study.per_query_files import compact_file
from kitm.study.provenance import source_commit
from kitm.study.runs import RunPlan


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What one invocation did with a run: ``skipped``, ``evaluated``, ``trained`` (and evaluated) or ``failed``."""

    plan: RunPlan
    action: str
    seconds: float = 0.0
    failed_stage: str | None = None
    returncode: int | None = None

    def describe(self) -> str:
        if self.action == "skipped":
            return f"{self.plan.label}: already evaluated, skipped"
        if self.action == "failed":
            log = self.plan.launch_log if self.failed_stage == "launch" else self.plan.eval_log
            return (f"{self.plan.label}: FAILED in {self.failed_stage} (exit status {self.returncode}) after "
                    f"{self.seconds:.0f} s; see {log}")
        return f"{self.plan.label}: {self.action} in {self.seconds:.0f} s"


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def call_logged(interpreter: str, args: Sequence[str], log_path, env: Mapping[str, str]) -> tuple[int, float]:
    """Run ``interpreter *args`` with stdout and stderr appended to `log_path`; (exit status, wall seconds)."""
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"\n===== kitm.study {_now()}: {commands.display(args)}\n")
        log.flush()
        started = time.monotonic()
        result = subprocess.run([interpreter, *args], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=dict(env), check=False)
        seconds = time.monotonic() - started
        log.write(f"===== exit status {result.returncode} after {seconds:.1f} s\n")
    return result.returncode, seconds


def run_one(plan: RunPlan, env: Mapping[str, str], interpreter: str | None = None) -> Outcome:
    """Train (unless trained) and evaluate one run; see the module docstring. Never raises for a failed command."""
    interpreter = interpreter or commands.interpreter()
    status = runs.read_status(plan)
    if runs.is_stale(plan, status):  # resuming another command's backup would mix two configurations
        raise ValueError(f"{plan.directory} was started by another launch command (its {commands.STATUS_FILE}); "
                         "delete it to run it again.")
    if runs.evaluation_is_current(plan, status):
        return Outcome(plan, "skipped")
    plan.directory.mkdir(parents=True, exist_ok=True)
    attempts = list(status.get("attempts", [])) if status else []
    status = {**runs.new_status(plan, interpreter), "attempts": attempts}
    total = 0.0
    action = "evaluated"
    stages = [("eval", plan.eval_args, plan.eval_log, plan.eval_json)]
    if not plan.summary_json.is_file():
        stages.insert(0, ("launch", plan.launch_args, plan.launch_log, plan.summary_json))
        action = "trained"
    for stage, args, log, product in stages:
        status["state"] = runs.RUNNING
        runs.write_status(plan, status)  # before the command: a killed study leaves a record that it started
        started = _now()
        source, commit = commands.source_fingerprint(), source_commit()
        returncode, seconds = call_logged(interpreter, args, log, env)
        total += seconds
        status["attempts"].append({"stage": stage, "started": started, "seconds": seconds, "returncode": returncode,
                                   "kitm_source": source, "kitm_commit": commit})
        if returncode != 0 or not product.is_file():
            tail = runs.log_tail(log)
            if returncode == 0:  # exited cleanly without its output: as bad as a crash for the study
                tail += f"\n(kitm.study: exit status 0, but {product} was not written)"
            status.update(state=runs.FAILED, failed_stage=stage, returncode=returncode, log_tail=tail)
            runs.write_status(plan, status)
            return Outcome(plan, "failed", total, stage, returncode)
    compact_per_query(plan)
    status.update(state=runs.DONE, failed_stage=None, returncode=0, log_tail=None)
    runs.write_status(plan, status)
    return Outcome(plan, action, total)


def compact_per_query(plan: RunPlan) -> bool:
    """Compact the run's per-query file in place (module docstring); False when there is none, it is compact
    already, or it cannot be read (then it stays as kitm.eval wrote it, and the report says it cannot be read)."""
    path = per_query_path(plan.eval_json)
    if not path.is_file():
        return False
    try:
        return compact_file(path)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile):
        return False


def run_all(plans: Sequence[RunPlan], env: Mapping[str, str], *, progress: bool = True,
            interpreter: str | None = None) -> list[Outcome]:
    """Run every plan in order under one progress bar (on stderr); one line per run as it ends, with its place in
    the grid and, once a run has trained, the runs still to do and the time they take at the mean trained run so
    far (a study runs for hours: without the bar, this line is the only estimate)."""
    outcomes = []
    to_do = sum(runs.run_state(plan) != runs.DONE for plan in plans)
    trained_seconds: list[float] = []
    bar = tqdm(plans, unit="run", file=sys.stderr, disable=not progress, dynamic_ncols=True)
    for index, plan in enumerate(bar, start=1):
        bar.set_description(plan.label)
        outcome = run_one(plan, env, interpreter)
        outcomes.append(outcome)
        if outcome.action != "skipped":
            to_do = max(0, to_do - 1)
        if outcome.action == "trained":  # an evaluation alone or a failure says little about a run's length
            trained_seconds.append(outcome.seconds)
        message = f"kitm.study: [{index}/{len(plans)}] {outcome.describe()}{remaining_text(trained_seconds, to_do)}"
        if progress:
            bar.write(message, file=sys.stderr)
        else:
            print(message, file=sys.stderr, flush=True)
    bar.close()
    return outcomes


def remaining_text(trained_seconds: Sequence[float], to_do: int) -> str:
    """``"; 12 runs to do, about 25 min at 2.1 min a run so far"``; empty before any run trained or after the last."""
    if not trained_seconds or to_do <= 0:
        return ""
    mean = sum(trained_seconds) / len(trained_seconds)
    left = mean * to_do
    duration = f"{left / 3600:.1f} h" if left >= 5400 else f"{left / 60:.0f} min"
    return f"; {to_do} run{'s' if to_do != 1 else ''} to do, about {duration} at {mean / 60:.1f} min a run so far"

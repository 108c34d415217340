"""Bringing a study's finished runs from another checkout: ``python -m kitm.study --collect_from=<checkout>``.

A long study runs from a git worktree pinned at a commit (it must not run from a tree being edited), while the
results belong in the main checkout's study folder, committed as they finish. This copies, for every run of the
spec that is done in the other checkout and not here, the files a report reads (``study_eval.json``,
``study_status.json``, ``summary.json``, and ``evaluations.jsonl`` of a run that validated while training), the JSON
written without indentation (the same content: a study of hundreds of
runs is megabytes in git), and nothing else: no per-query file unless asked (a study whose claims bootstrap
needs them), no checkpoint, no export, no log. summary.json comes without the launcher's own end-of-training test
scores (:data:`LAUNCHER_TEST_KEYS`, 1.5 kB a run): a study scores every run itself (``study_eval.json``) and no
report reads them; the run's launch command (``study_status.json``) makes them again.

A run is done in the other checkout when its status says so and records the launch and evaluation commands the
spec gives now (:func:`kitm.study.runs.run_state`; the commands name run folders relative to the checkout, so both
checkouts give the same ones): a run whose evaluation file exists while its status still says running (the
runner compacting its per-query file) waits for a later collect. A run already done here is left as it is; any
other local folder of the run loses its old evaluation and per-query files before the copy, and the evaluation
file is written last, so that a copy killed midway leaves a run that is not done and is copied again.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Sequence

from kitm.files import read_json, write_bytes_atomically, write_json_atomically
from kitm.study import commands, runs
from kitm.study.bootstrap import per_query_path
from kitm.study.validation_curves import HISTORY_FILE


# summary.json's keys left out of a collected copy (module docstring); everything else is kept as written
LAUNCHER_TEST_KEYS = ("test", "test_per_query")


@dataclasses.dataclass(frozen=True)
class Collected:
    copied: list[runs.RunPlan]
    stale_here: list[runs.RunPlan]  # done there, but with other commands than this checkout's spec gives


def collect_runs(plans: Sequence[runs.RunPlan], checkout: pathlib.Path, *, per_query: bool = False) -> Collected:
    """Copy the runs among `plans` done in `checkout` (the root the other study ran from) and not here (module
    docstring); `per_query`: their per-query files too."""
    checkout = pathlib.Path(checkout)
    copied, stale_here = [], []
    for plan in plans:
        source = dataclasses.replace(plan, directory=checkout / plan.directory)
        status = runs.read_status(source)
        if runs.run_state(plan) == runs.DONE or status is None or status.get("state") != runs.DONE:
            continue
        if runs.run_state(source, status) != runs.DONE:
            if source.eval_json.is_file():  # done there by its own commands, not by the ones the spec gives here
                stale_here.append(plan)
            continue
        plan.directory.mkdir(parents=True, exist_ok=True)
        for old in (plan.eval_json, per_query_path(plan.eval_json)):  # nothing of an earlier run stays beside it
            old.unlink(missing_ok=True)
        if per_query and per_query_path(source.eval_json).is_file():
            write_bytes_atomically(per_query_path(plan.eval_json), per_query_path(source.eval_json).read_bytes())
        if (source.directory / HISTORY_FILE).is_file():
            write_bytes_atomically(plan.directory / HISTORY_FILE, (source.directory / HISTORY_FILE).read_bytes())
        # the evaluation last: a run is done here once it exists, so a copy killed midway is copied again
        for name in (commands.SUMMARY_FILE, commands.STATUS_FILE, commands.EVAL_FILE):
            payload = read_json(source.directory / name)
            if name == commands.SUMMARY_FILE:
                payload = without_launcher_test(payload)
            if payload is not None:
                write_json_atomically(plan.directory / name, payload, indent=None, strict=False)
        copied.append(plan)
    return Collected(copied, stale_here)


def without_launcher_test(summary):
    """A launcher's summary.json as a study keeps it: without :data:`LAUNCHER_TEST_KEYS` (anything not a JSON
    object is returned as it is)."""
    if not isinstance(summary, dict):
        return summary
    return {key: value for key, value in summary.items() if key not in LAUNCHER_TEST_KEYS}

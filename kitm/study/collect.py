"""Bringing a study's finished runs from another checkout: ``python -m kitm.study --collect_from=<checkout>``.

A long study runs from a git worktree pinned at a commit (it must not run from a tree being edited), while the
results belong in the main checkout's study folder, committed as they finish. This copies, for every run of the
spec that is done in the other checkout and not here, the files a report reads (``study_eval.json``,
``study_status.json``, ``summary.json``), written without indentation (the same content: a study of hundreds of
runs is megabytes in git), and nothing else: no per-query file unless asked (a study whose claims bootstrap
needs them), no checkpoint, no export, no log.

A run is done in the other checkout when its status records the launch and evaluation commands the spec gives now
(:func:`kitm.study.runs.run_state`; the commands name run folders relative to the checkout, so both checkouts give
the same ones) and its evaluation exists; a run already done here is left as it is.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Sequence

from kitm.files import read_json, write_bytes_atomically, write_json_atomically
from kitm.study import commands, runs
from kitm.study.bootstrap import per_query_path


def collect_runs(plans: Sequence[runs.RunPlan], checkout: pathlib.Path, *,
                 per_query: bool = False) -> list[runs.RunPlan]:
    """Copy the runs among `plans` done in `checkout` (the root the other study ran from) and not here (module
    docstring); `per_query`: their per-query files too. Returns the plans copied."""
    checkout = pathlib.Path(checkout)
    copied = []
    for plan in plans:
        source = dataclasses.replace(plan, directory=checkout / plan.directory)
        if runs.run_state(plan) == runs.DONE or runs.run_state(source) != runs.DONE:
            continue
        plan.directory.mkdir(parents=True, exist_ok=True)
        if per_query and per_query_path(source.eval_json).is_file():
            write_bytes_atomically(per_query_path(plan.eval_json), per_query_path(source.eval_json).read_bytes())
        # the evaluation last: a run is done here once it exists, so a copy killed midway is copied again
        for name in (commands.SUMMARY_FILE, commands.STATUS_FILE, commands.EVAL_FILE):
            payload = read_json(source.directory / name)
            if payload is not None:
                write_json_atomically(plan.directory / name, payload, indent=None, strict=False)
        copied.append(plan)
    return copied

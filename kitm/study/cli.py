"""``python -m kitm.study --spec=<file.toml>``: run a study's grid of configurations x seeds, then report.

::

    python -m kitm.study --spec=studies/claims.toml              # run what is missing, then report
    python -m kitm.study --spec=studies/claims.toml --dry_run    # print the commands, run nothing
    python -m kitm.study --spec=studies/claims.toml --only=sam --seeds=3,4   # more seeds of one configuration
    python -m kitm.study --spec=studies/claims.toml --report_only            # the report from what exists
    python -m kitm.study --spec=studies/claims.toml --prune_per_query        # smaller per-query files, then report
    python -m kitm.study --spec=studies/claims.toml --collect_from=../study-run   # runs a worktree finished

``--only`` and ``--seeds`` choose what runs; the report always covers every configuration of the spec over the
seeds in effect (``--seeds``, else the spec's), from whatever runs exist on disk, so that a configuration run
alone is still compared with its baseline. Runs that are already evaluated are skipped, a trained run is only
evaluated, a killed run is started again (its launcher resumes), a failed run is tried again; runs whose
recorded launch command differs from the spec's (the spec changed) stop the study before anything runs.

Exit status: 0; 1 when a selected run failed (the report lists it); 2 for a bad spec or arguments, printed as one
line ``kitm.study: error: ...`` naming the spec file and key.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time
from collections.abc import Sequence

from kitm.study import commands, runs
from kitm.study.spec import SpecError, StudySpec, load_spec
from kitm.study.tuned import TunedConfiguration, resolve as resolve_tuned, waiting as waiting_configurations
from kitm.tensorflow_logs import quiet_tensorflow_logs

PROG = "kitm.study"
EXIT_RUN_FAILED = 1
EXIT_BAD_INPUT = 2
SPEC_COPY = "spec.toml"
AGREEMENT_FILE = "agreement.json"


class CliError(Exception):
    """Bad arguments or an unusable study folder: one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, no usage block: the same shape as kitm.eval's errors
        raise CliError(f"{message} (see python -m {PROG} --help)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=f"python -m {PROG}", formatter_class=argparse.RawDescriptionHelpFormatter,
                     description="Run a grid of kitm.launch configurations x seeds, score every run with "
                                 "kitm.eval, and report means with 95% intervals, paired comparisons against the "
                                 "baseline (configurations scored on the same test data) and claim verdicts (spec "
                                 "format: kitm/study/spec.py).")
    parser.add_argument("--spec", required=True, help="Study spec (TOML).")
    parser.add_argument("--out", help="Study folder (default: the spec's out_dir).")
    parser.add_argument("--only", help="Run only these configurations (comma-separated names).")
    parser.add_argument("--seeds", help="Seeds in effect instead of the spec's (comma-separated integers).")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--report_only", action="store_true", help="Run nothing; report from the runs that exist.")
    mode.add_argument("--dry_run", action="store_true", help="Print what would run and the commands; write nothing.")
    mode.add_argument("--collect_from", metavar="CHECKOUT",
                      help="Run nothing; copy the runs done in another checkout of this repository (the folder the "
                           "study ran from, e.g. a git worktree) and not here: their result JSON files, without "
                           "indentation (kitm/study/collect.py). With --per_query, their per-query files too.")
    parser.add_argument("--per_query", action="store_true",
                        help="With --collect_from: copy the runs' per-query files as well (for a per-query bootstrap).")
    mode.add_argument("--prune_per_query", action="store_true",
                      help="Run nothing; keep in each run's per-query file only the arrays the spec's claims "
                           "bootstrap (their parts, views and truth-control metrics), then report as --report_only.")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True,
                        help="Progress bar over the runs on stderr (default on).")
    return parser


def _names(text: str, spec: StudySpec) -> tuple[str, ...]:
    names = tuple(name for name in text.replace(" ", "").split(",") if name)
    unknown = [name for name in names if name not in spec.configuration_names]
    if not names or unknown:
        raise CliError(f"--only={text!r}: {', '.join(unknown) or 'no names'}; the configurations of {spec.path} "
                       f"are {', '.join(spec.configuration_names)}.")
    return tuple(name for name in spec.configuration_names if name in names)  # spec order


def _seeds(text: str) -> tuple[int, ...]:
    try:
        seeds = tuple(int(part) for part in text.replace(" ", "").split(",") if part)
    except ValueError:
        raise CliError(f"--seeds must be comma-separated integers >= 0; got {text!r}.") from None
    if not seeds or any(seed < 0 for seed in seeds) or len(set(seeds)) != len(seeds):
        raise CliError(f"--seeds must be distinct comma-separated integers >= 0; got {text!r}.")
    return seeds


def _dry_run(plans: Sequence[runs.RunPlan], waiting: Sequence[TunedConfiguration]) -> None:
    actions = {runs.DONE: "skip (evaluated)", runs.TRAINED: "evaluate", runs.STALE: "STALE: refuses to run",
               runs.FAILED: "train and evaluate again", runs.INCOMPLETE: "resume and evaluate",
               runs.MISSING: "train and evaluate"}
    for plan in plans:
        state = runs.run_state(plan)
        print(f"# {plan.label}: {state} -> {actions[state]}")
        if state in (runs.FAILED, runs.INCOMPLETE, runs.MISSING):
            print(commands.display(plan.launch_args))
        if state != runs.DONE:
            print(commands.display(plan.eval_args))
    for record in waiting:
        print(f"# {record.configuration}: waits, not run ({record.reason})")


def _prepare(spec: StudySpec, out_dir: pathlib.Path) -> None:
    """Run each [[prepare]] command whose `creates` path is missing (log: <out>/prepare_<i>.log)."""
    from kitm.study.runner import call_logged

    for i, step in enumerate(spec.prepare):
        if step.creates.exists():
            continue
        log = out_dir / f"prepare_{i}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        print(f"{PROG}: preparing ({' '.join(step.command)}); log {log}", file=sys.stderr, flush=True)
        status, _ = call_logged(sys.executable, step.command, log, commands.subprocess_environment(spec))
        if status != 0 or not step.creates.exists():
            raise CliError(f"{spec.path}: prepare[{i}] ({' '.join(step.command)}) exited with status {status} "
                           f"without creating {step.creates}; see {log}.")


def _agreement(spec: StudySpec, out_dir: pathlib.Path) -> dict | None:
    """The spec's [agreement] figures (kitm.study.agreement), kept in <out>/agreement.json and reused while the
    spec's [agreement] table is unchanged; {"error": ...} when its dataset cannot be read (yet)."""
    if spec.agreement is None:
        return None
    import json

    from kitm.files import write_text_atomically

    cache = out_dir / AGREEMENT_FILE
    if cache.is_file():
        cached = json.loads(cache.read_text())
        if cached.get("parameters") == spec.agreement.as_dict():
            return cached
    from kitm.errors import KitmDataError
    from kitm.study.agreement import relevance_agreement

    try:
        figures = relevance_agreement(spec.agreement.data_dir, spec.agreement.split, spec.agreement.sources,
                                      spec.agreement.reference)
    except (KitmDataError, ValueError, OSError) as error:
        return {"parameters": spec.agreement.as_dict(), "error": " ".join(str(error).split())}
    payload = {"parameters": spec.agreement.as_dict(), **figures}
    write_text_atomically(cache, json.dumps(payload, indent=2, sort_keys=True))
    return payload


def _prune_per_query(spec: StudySpec, plans: Sequence[runs.RunPlan]) -> None:
    """Keep in each run's per-query file only the arrays the claims' bootstraps read (kitm.study.bootstrap)."""
    import zipfile

    from kitm.study.bootstrap import claim_arrays, per_query_path
    from kitm.study.per_query_files import prune_file

    keep = claim_arrays(spec)
    if not keep:  # pruning to nothing would empty every file, for good
        raise CliError(f"{spec.path}: no claim of the spec reads per-query arrays; --prune_per_query would empty "
                       "every per-query file. Nothing was changed.")
    files = [path for plan in plans if (path := per_query_path(plan.eval_json)).is_file()]
    before = sum(path.stat().st_size for path in files)
    pruned = 0
    for path in files:
        try:
            pruned += prune_file(path, keep)
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:
            print(f"{PROG}: warning: {path}: not a readable per-query file, left as it is ({error})", file=sys.stderr)
    after = sum(path.stat().st_size for path in files)
    print(f"{PROG}: {pruned} of {len(files)} per-query files pruned to the {len(keep)} arrays the claims read "
          f"({before / 1e6:.1f} MB -> {after / 1e6:.1f} MB).", file=sys.stderr)


def _collect(plans: Sequence[runs.RunPlan], checkout: pathlib.Path, per_query: bool) -> int:
    from kitm.study.collect import collect_runs

    if not checkout.is_dir():
        raise CliError(f"--collect_from={checkout}: no such folder (the checkout the other study ran from).")
    if any(plan.directory.is_absolute() for plan in plans):
        raise CliError("--collect_from needs the study folder relative to the checkout (the spec's out_dir or "
                       "--out): an absolute one names the same folder in both.")
    found = collect_runs(plans, checkout, per_query=per_query)
    for plan in found.copied:
        print(f"collected {plan.directory}")
    if found.stale_here:
        print(f"{PROG}: warning: {len(found.stale_here)} run(s) done in {checkout} with other commands than this "
              f"checkout's spec gives (not collected): "
              f"{', '.join(f'{p.configuration}/seed_{p.seed}' for p in found.stale_here)}", file=sys.stderr)
    print(f"{len(found.copied)} run(s) collected from {checkout}; "
          f"{sum(runs.run_state(plan) == runs.DONE for plan in plans)} of {len(plans)} runs done here.")
    return 0


def _run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    started = time.monotonic()
    if args.per_query and args.collect_from is None:
        raise CliError("--per_query goes with --collect_from.")
    # pruning and collecting run nothing either
    args.report_only = args.report_only or args.prune_per_query or args.collect_from is not None
    spec, tuned = resolve_tuned(load_spec(args.spec))
    waits = waiting_configurations(tuned)
    out_dir = pathlib.Path(args.out) if args.out else spec.out_dir
    seeds = _seeds(args.seeds) if args.seeds is not None else spec.seeds
    selected_names = _names(args.only, spec) if args.only is not None else spec.configuration_names
    # A configuration waiting for its arm's choice has no command yet: neither run nor reported (analysis says so).
    plans = [plan for plan in runs.plan_runs(spec, out_dir, spec.configuration_names, seeds)
             if plan.configuration not in waits]
    selected = [plan for plan in plans if plan.configuration in selected_names]
    if not selected and not args.report_only:
        # Not an error (the report is still written), but a loop over seeds should say why a seed did nothing.
        own = [f"{c.name} runs seeds {list(c.seeds)}" for c in spec.configurations
               if c.name in selected_names and c.seeds is not None]
        own += [f"{name} waits for its arm's choice" for name in selected_names if name in waits]
        print(f"{PROG}: note: no run is selected by --seeds={','.join(map(str, seeds))}"
              + (f" (of the configurations asked, {'; '.join(own)})" if own else "") + ".", file=sys.stderr)
    if waits and not args.report_only:
        print(f"{PROG}: note: {len(waits)} configuration(s) wait for their arm's choice in {spec.tuned_by} and do "
              f"not run now: {', '.join(sorted(waits))}.", file=sys.stderr)
    for warning in commands.overridden_common_flags(spec):
        print(f"{PROG}: warning: {warning}", file=sys.stderr)
    if args.dry_run:
        _dry_run(selected, [r for r in tuned if r.waiting and r.configuration in selected_names])
        return 0
    if args.prune_per_query:
        _prune_per_query(spec, plans)
    if args.collect_from is not None:
        return _collect(selected, pathlib.Path(args.collect_from), args.per_query)
    if not args.report_only:
        stale = [plan for plan in selected if runs.is_stale(plan, runs.read_status(plan))]
        if stale:
            raise CliError(f"{len(stale)} run folder(s) were started with other launch commands than {spec.path} "
                           f"gives now (recorded in their {commands.STATUS_FILE}): "
                           f"{', '.join(str(p.directory) for p in stale)}; delete them to run them again, or restore "
                           "the spec" + (f" (or, for a configuration with `tuned_arm`, the results of {spec.tuned_by}: "
                                         "its arm's choice decides the command)" if tuned else "") + ".")
        from kitm.study.runner import run_all

        _prepare(spec, out_dir)
        run_all(selected, commands.subprocess_environment(spec), progress=args.progress)

    from kitm.study.analysis import analyse
    from kitm.files import write_bytes_atomically
    from kitm.study.report_files import write_report
    from kitm.study.results import collect

    results = [collect(plan, spec.evaluation.split) for plan in plans]
    analysis = analyse(spec, results, seeds, tuned)
    evaluated = sorted(f"{name}/{path.parent.name}" for name in waits
                       for path in (out_dir / "runs" / name).glob(f"seed_*/{commands.EVAL_FILE}"))
    if evaluated:  # an arm that waits again (its grid extended, a tuning run gone): its runs are not reported
        analysis.warnings.append(f"evaluated runs of configurations that wait for their arm's choice are not in the "
                                 f"figures: {', '.join(evaluated)}")
    outside = runs.runs_outside_own_seeds(spec, out_dir)
    if outside:
        analysis.warnings.append(f"evaluated runs at seeds their configuration's `seeds` leave out are not in the "
                                 f"figures: {', '.join(outside)}")
    out_dir.mkdir(parents=True, exist_ok=True)
    write_bytes_atomically(out_dir / SPEC_COPY, spec.path.read_bytes())  # the spec these figures came from
    agreement = _agreement(spec, out_dir)
    paths = write_report(analysis, out_dir, mode="report_only" if args.report_only else "run",
                         seconds=time.monotonic() - started, argv=argv, agreement=agreement)
    for claim in analysis.claims:
        print(f"claim {claim.name!r}: {claim.verdict}")
    for warning in analysis.warnings:
        print(f"{PROG}: warning: {warning}", file=sys.stderr)
    done = sum(result.done for result in results)
    print(f"{done} of {len(results)} runs evaluated. Report: {paths['markdown']} ({paths['json']})")
    failed = [r for r in results if r.state == runs.FAILED and r.configuration in selected_names]
    if failed:
        print(f"{PROG}: {len(failed)} run(s) failed: "
              f"{', '.join(f'{r.configuration}/seed_{r.seed}' for r in failed)} (see the report)", file=sys.stderr)
        return EXIT_RUN_FAILED
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI on `argv` (default ``sys.argv[1:]``); returns the exit status (module docstring)."""
    quiet_tensorflow_logs()  # before TensorFlow is imported; the runs' processes inherit it
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
        return _run(args, argv)
    except (CliError, SpecError) as error:
        print(f"{PROG}: error: {' '.join(str(error).split())}", file=sys.stderr)
        return EXIT_BAD_INPUT

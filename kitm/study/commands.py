"""The commands of a study run: the launcher, kitm.eval, their environment, and the flags a flagfile overrides.

Each run is two processes (their own TensorFlow state, nothing shared with the study or with other runs)::

    <python> -m kitm.launch <common_flags> <configuration flags> --seed=<s> --run_dir=<run_dir> --progress=false
    <python> -m kitm.eval --run_dir=<run_dir> --split=<split> --relevance=<relevance> <extra_args>
                          --out=<run_dir>/study_eval.json --no-progress

with ``run_dir = <out>/runs/<configuration>/seed_<s>``. The study's own flags come last because absl lets a later
flag override an earlier one (and a flagfile, e.g. ``launch/sam.flags`` with its ``--run_dir=runs/sam``, is
expanded in place).
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import shlex
import sys
from collections.abc import Iterable, Mapping, Sequence

import kitm
from kitm.study.spec import StudySpec

EVAL_FILE = "study_eval.json"
SUMMARY_FILE = "summary.json"  # written by kitm.launch when a run is complete
STATUS_FILE = "study_status.json"
LAUNCH_LOG = "launch.log"
EVAL_LOG = "eval.log"
# Set for every subprocess unless the caller's environment already has them: no model hub lookups (there is no
# network, and kitm ships its sentence model), and no TensorFlow INFO noise in the logs.
DEFAULT_ENVIRONMENT = {"HF_HUB_OFFLINE": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}


def run_dir(out_dir: pathlib.Path, configuration: str, seed: int) -> pathlib.Path:
    return pathlib.Path(out_dir) / "runs" / configuration / f"seed_{seed}"


def launch_args(spec: StudySpec, configuration: str, seed: int, directory: pathlib.Path, *,
                pinned: bool = True) -> list[str]:
    """Arguments after the interpreter: ``-m kitm.launch ...`` for one (configuration, seed); the spec's pinned
    flags first (kitm.study.spec, ``pinned_flags``), unless `pinned` is false (the command a run recorded before
    they were pinned)."""
    flags = spec.configuration(configuration).flags
    return ["-m", "kitm.launch", *(spec.pinned_flags if pinned else ()), *spec.common_flags, *flags,
            f"--seed={seed}", f"--run_dir={directory}", "--progress=false"]


def eval_args(spec: StudySpec, directory: pathlib.Path) -> list[str]:
    """Arguments after the interpreter: ``-m kitm.eval ...`` scoring one run into ``<run_dir>/study_eval.json``."""
    evaluation = spec.evaluation
    return ["-m", "kitm.eval", f"--run_dir={directory}", f"--split={evaluation.split}",
            f"--relevance={evaluation.relevance}", *evaluation.extra_args, f"--out={directory / EVAL_FILE}",
            "--no-progress"]


def display(args: Sequence[str]) -> str:
    """A command as a user would type it (``python`` for the interpreter), shell-quoted."""
    return shlex.join(["python", *args])


def study_command(spec_path: pathlib.Path, out_dir: pathlib.Path, *extra: str) -> str:
    return shlex.join(["python", "-m", "kitm.study", f"--spec={spec_path}", f"--out={out_dir}", *extra])


def subprocess_environment(spec: StudySpec, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The caller's environment, DEFAULT_ENVIRONMENT where unset, the spec's [environment] on top, and the
    folder holding this kitm first on PYTHONPATH, so that each run executes the very kitm the study imported
    (not another install the interpreter might find from the run's working directory)."""
    env = dict(os.environ if base is None else base)
    for key, value in DEFAULT_ENVIRONMENT.items():
        env.setdefault(key, value)
    env.update(spec.environment)
    package_root = str(pathlib.Path(kitm.__file__).resolve().parent.parent)
    paths = [path for path in env.get("PYTHONPATH", "").split(os.pathsep) if path]
    env["PYTHONPATH"] = os.pathsep.join([package_root, *[p for p in paths if p != package_root]])
    return env


def interpreter() -> str:
    return sys.executable


def source_fingerprint() -> str:
    """sha256 (first 16 hex digits) over the path and bytes of every .py file of the kitm package in use.

    Recorded with each launch attempt: runs trained by different kitm code (a checkout edited or updated while a
    study runs) are not comparable, and the report says so. Cheap: a few hundred small files.
    """
    root = pathlib.Path(kitm.__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        try:
            digest.update(path.read_bytes())
        except OSError:  # a file removed while hashing: the fingerprint differs anyway
            continue
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def _flag_lines(path: pathlib.Path, seen: tuple[pathlib.Path, ...]) -> Iterable[tuple[str, str]]:
    """(flag, origin) of a flagfile, nested flagfiles expanded in place (absl's format: one flag per line, lines
    starting with '#' or '//' are comments)."""
    resolved = path.resolve()
    if resolved in seen:
        return  # absl stops on a cycle; a warning pass need not
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return  # the spec check or the launcher reports a missing flagfile
    for line in lines:
        line = line.strip()
        if not line.startswith("-") or line.startswith(("#", "//")):
            continue
        yield from _expand([line], str(path), (*seen, resolved))


def _expand(flags: Iterable[str], origin: str, seen: tuple[pathlib.Path, ...] = ()) -> Iterable[tuple[str, str]]:
    for flag in flags:
        if flag.lstrip("-").startswith("flagfile="):
            yield from _flag_lines(pathlib.Path(flag.split("=", 1)[1]), seen)
        else:
            yield flag, origin


def final_flag_values(flags: Iterable[str], origin: str) -> dict[str, tuple[str, str]]:
    """{name: (value, origin)} after absl's left-to-right reading: the last setting of each flag wins.

    ``--name`` alone reads as ``true``; ``--noname`` is kept as its own name (a rare spelling; this only feeds
    warnings).
    """
    values: dict[str, tuple[str, str]] = {}
    for flag, where in _expand(flags, origin):
        body = flag.lstrip("-")
        name, _, value = body.partition("=")
        values[name] = (value if "=" in body else "true", where)
    return values


def overridden_common_flags(spec: StudySpec) -> list[str]:
    """Warnings for common flags that a flagfile of a configuration sets to another value.

    Such an override is legal and sometimes wanted, but often a surprise: ``--flagfile=launch/sam.flags`` after
    ``--dataset=synthetic`` trains on Flickr30K. A flag written in the configuration's own list (another world's
    ``--data_dir``) overrides on purpose and is not warned about.
    """
    common = final_flag_values(spec.common_flags, "common_flags")
    warnings = []
    for configuration in spec.configurations:
        written = f"configuration {configuration.name}"
        own = final_flag_values(configuration.flags, written)
        for name, (value, origin) in own.items():
            if name in common and common[name][0] != value and origin != written:
                warnings.append(f"configuration '{configuration.name}': --{name}={value} (from {origin}) overrides "
                                f"the common flag --{name}={common[name][0]}")
    return warnings

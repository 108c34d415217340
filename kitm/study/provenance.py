"""Which git commit of kitm trained a run, and which kitm files differ between two such commits.

A study runs for hours or sessions, and the checkout may move on meanwhile. The source fingerprint
(:func:`kitm.study.commands.source_fingerprint`) says *that* two runs were trained by different code; the commit
says *which* code, so the report can name the files that changed (``git diff --name-only A B -- kitm``) and a reader
can judge whether it matters (an evaluation helper, or the loss). Everything here is best effort: outside a git
checkout, or without git, the answers are None and the report falls back to the fingerprints.
"""

from __future__ import annotations

import pathlib
import subprocess

import kitm

_TIMEOUT = 10  # seconds; a hung git must not hold up a study


def _git(*args: str, root: pathlib.Path | None = None) -> str | None:
    root = pathlib.Path(kitm.__file__).resolve().parent if root is None else root
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=_TIMEOUT,
                              check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def source_commit(root: pathlib.Path | None = None) -> str | None:
    """The commit of the checkout the kitm package in use lives in (or `root`), with ``+dirty`` when the files
    under that folder have uncommitted changes; None outside a git checkout (an installed wheel) or without git."""
    commit = _git("rev-parse", "HEAD", root=root)
    if not commit:
        return None
    status = _git("status", "--porcelain", "--", ".", root=root)
    dirty = status is None or bool(status.strip())  # unknown counts as dirty: the commit alone may not be the code
    return commit.strip() + ("+dirty" if dirty else "")


def changed_files(first: str, second: str, root: pathlib.Path | None = None) -> list[str] | None:
    """kitm's files (or those under `root`) that differ between two clean commits, paths relative to the
    repository; None when either is dirty or unknown to this checkout (a shallow clone, say)."""
    if "+dirty" in first or "+dirty" in second:
        return None
    out = _git("diff", "--name-only", first, second, "--", ".", root=root)
    return None if out is None else [line for line in out.splitlines() if line.strip()]

"""Numbered SavedModel versions under one base directory, the layout TensorFlow Serving watches:
`<base>/1/`, `<base>/2/`, ... Serving loads the highest number; non-numeric entries (our temporary
`<n>.<pid>.tmp` directories) are ignored by Serving and here. An export killed while it wrote leaves its temporary
behind; `remove_stale_exports` removes those whose writer is gone."""

from __future__ import annotations

import os
import pathlib
import re
import shutil


def version_numbers(base: str | os.PathLike) -> list[int]:
    """The versions present under `base`, ascending (an absent base has none)."""
    base = pathlib.Path(base)
    if not base.is_dir():
        return []
    return sorted(int(entry.name) for entry in base.iterdir() if entry.is_dir() and entry.name.isdigit())


def next_version(base: str | os.PathLike) -> int:
    """1 + the highest version under `base` (1 when there is none), so a new export never overwrites."""
    numbers = version_numbers(base)
    return numbers[-1] + 1 if numbers else 1


def latest_version_dir(base: str | os.PathLike) -> pathlib.Path | None:
    """`<base>/<highest version>`, or None when `base` holds no version."""
    numbers = version_numbers(base)
    return pathlib.Path(base) / str(numbers[-1]) if numbers else None


_TEMPORARY = re.compile(r"^(\d+)\.(\d+)\.tmp$")  # <version>.<writer's pid>.tmp (kitm.files.temporary_sibling)


def _alive(pid: int) -> bool:
    """Whether a process `pid` exists on this machine (one of another user's counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_exports(base: str | os.PathLike, *, every: bool = False) -> list[pathlib.Path]:
    """Remove the temporary export folders `<base>/<n>.<pid>.tmp` left by killed writers; returns them.

    A temporary is stale when its writer's process is gone, or is this process (which is not writing one while it
    calls this); with every=True all are (the caller holds the run folder, so no one else exports into it).
    A live writer's temporary on this machine is left alone; so is one whose pid another process has taken since,
    until a run holding the folder removes it."""
    base = pathlib.Path(base)
    if not base.is_dir():
        return []
    removed = []
    for entry in sorted(base.iterdir()):
        match = _TEMPORARY.match(entry.name)
        if match is None or not entry.is_dir():
            continue
        pid = int(match.group(2))
        if every or pid == os.getpid() or not _alive(pid):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    if removed:
        print(f"Removed {len(removed)} unfinished export(s) left by killed runs: "
              f"{', '.join(path.name for path in removed)}.")
    return removed

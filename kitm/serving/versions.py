"""Numbered SavedModel versions under one base directory, the layout TensorFlow Serving watches:
`<base>/1/`, `<base>/2/`, ... Serving loads the highest number; non-numeric entries (our temporary
`<n>.<pid>.tmp` directories) are ignored by Serving and here."""

from __future__ import annotations

import os
import pathlib


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

"""Atomic writes (kitm's rule: a reader, or a study killed half-way, never sees half a file) and strict JSON."""

from __future__ import annotations

import json
import math
import os
import pathlib
from collections.abc import Mapping


def write_bytes_atomically(path: str | os.PathLike, data: bytes) -> pathlib.Path:
    """Write `data` to ``<path>.tmp`` in the same folder, then ``os.replace`` it onto `path`."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return path


def write_text_atomically(path: str | os.PathLike, text: str) -> pathlib.Path:
    return write_bytes_atomically(path, text.encode("utf-8"))


def json_ready(value: object) -> object:
    """`value` with NaN and infinities as None (strict JSON has no NaN), tuples as lists, keys as strings."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(key): json_ready(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(item) for item in value]
    if isinstance(value, pathlib.PurePath):
        return str(value)
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return json_ready(value.item())
    return value


def write_json_atomically(path: str | os.PathLike, payload: object) -> pathlib.Path:
    return write_text_atomically(path, json.dumps(json_ready(payload), indent=2, allow_nan=False) + "\n")


def read_json(path: str | os.PathLike) -> object | None:
    """The JSON at `path`, or None when it is missing or unreadable (a run that has not written it yet)."""
    try:
        return json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None

"""The study spec's type checks: each problem a :class:`SpecError` naming the spec file and the key path."""

from __future__ import annotations

import math
import pathlib
import re
from collections.abc import Mapping

_FLAG_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")


class SpecError(ValueError):
    """A spec that cannot be used; the message names the file and the key."""


class _Checker:
    """Type checks that name the spec file and the key path in their errors."""

    def __init__(self, path: pathlib.Path):
        self.path = path

    def fail(self, key: str, message: str) -> SpecError:
        return SpecError(f"{self.path}: {key}: {message}")

    def require(self, table: Mapping[str, object], prefix: str, keys, why: str = "") -> None:
        """Raise for the first of `keys` missing from `table` (named `<prefix>.<key>`, or `<key>` at the top)."""
        for key in keys:
            if key not in table:
                raise self.fail(f"{prefix}.{key}" if prefix else key, f"missing (required){why}.")

    def table(self, value: object, key: str, allowed: set[str]) -> Mapping[str, object]:
        if not isinstance(value, Mapping):
            raise self.fail(key, f"must be a table; got {_describe(value)}.")
        unknown = sorted(set(value) - allowed)
        if unknown:
            where = f"{key}." if key != "(top level)" else ""
            raise self.fail(f"{where}{unknown[0]}", f"unknown key (known: {', '.join(sorted(allowed))}).")
        return value

    def string(self, value: object, key: str, *, pattern: re.Pattern | None = None) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.fail(key, f"must be a non-empty string; got {_describe(value)}.")
        if pattern is not None and not pattern.match(value):
            raise self.fail(key, f"{value!r} must be letters, digits, '_', '-' or '.', starting with a letter or "
                                 "digit (it names a folder).")
        return value

    def strings(self, value: object, key: str) -> tuple[str, ...]:
        if not isinstance(value, list):
            raise self.fail(key, f"must be a list of strings; got {_describe(value)}.")
        return tuple(self.string(item, f"{key}[{i}]") for i, item in enumerate(value))

    def flags(self, value: object, key: str, forbidden: tuple[str, ...]) -> tuple[str, ...]:
        flags = self.strings(value, key)
        for i, flag in enumerate(flags):
            if not flag.startswith("--"):
                raise self.fail(f"{key}[{i}]", f"{flag!r} is not a flag: each entry is one '--name=value' "
                                               "(or '--name') string.")
            name = flag[2:].split("=", 1)[0]
            if not _FLAG_NAME.match(name):
                raise self.fail(f"{key}[{i}]", f"{flag!r} is not one '--name=value' flag (a flag and its value "
                                               "are one string joined by '=').")
            if name in forbidden:
                raise self.fail(f"{key}[{i}]", f"--{name} is set by the study on every command (each run gets "
                                               "its own); remove it from the spec.")
            if name == "flagfile":
                target = flag.split("=", 1)[1] if "=" in flag else ""
                if not target or not pathlib.Path(target).is_file():
                    raise self.fail(f"{key}[{i}]", f"flagfile {target!r} does not exist (flagfile paths are "
                                                   f"relative to the current directory, {pathlib.Path.cwd()}).")
        return flags

    def number(self, value: object, key: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise self.fail(key, f"must be a number >= 0; got {_describe(value)}.")
        return float(value)


def _describe(value: object) -> str:
    return f"{type(value).__name__} {value!r}" if not isinstance(value, (dict, list)) else type(value).__name__

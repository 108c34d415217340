"""How a declared setting is described and checked: `setting(...)` declares a field of a configuration section,
`Setting` is what the declaration says (type, choices, bounds), and `checked` takes a value as the setting takes it or
refuses it, naming the setting (`kitm.experiment.config` declares the settings; this module knows no particular one).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
import types
import typing
from typing import Literal

from kitm.errors import KitmConfigError, option


def setting(default, help: str, *, lower: float | None = None, upper: float | None = None, why: str | None = None):
    """A setting's field: its default, its help text (the flag's help) and its inclusive bounds, checked when the
    configuration is made; `why` says in the error why a value beyond them is refused."""
    metadata = {"help": help, "lower_bound": lower, "upper_bound": upper}
    if why:
        metadata["why"] = why
    return dataclasses.field(default=default, metadata=metadata)


@dataclasses.dataclass(frozen=True)
class Setting:
    """What the declaration of one setting says: `kind` is bool, int, float or str, or tuple with `item` the type
    of its items; `choices` are the Literal's; `optional` settings may be None (a default derived elsewhere)."""

    name: str
    section: str | None  # None for run_dir, a field of ExperimentConfig itself
    default: object
    help: str
    kind: type
    item: type | None = None
    choices: tuple[str, ...] | None = None
    optional: bool = False
    lower: float | None = None
    upper: float | None = None
    why: str | None = None


def describe(name: str, section: str | None, field: dataclasses.Field, hint) -> Setting:
    """A field's declaration as a `Setting` (the type from its annotation, the rest from its metadata)."""
    optional = False
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        optional, hint = True, args[0]
    item = choices = None
    if typing.get_origin(hint) is Literal:
        kind, choices = str, typing.get_args(hint)
    elif typing.get_origin(hint) is tuple:
        kind, item = tuple, typing.get_args(hint)[0]
    else:
        kind = hint
    meta = field.metadata
    return Setting(name, section, field.default, meta.get("help", ""), kind, item, choices, optional,
                   meta.get("lower_bound"), meta.get("upper_bound"), meta.get("why"))


def checked(spec: Setting, value):
    """`value` as the setting takes it (a sequence as a tuple, an integral float as an int), or a KitmConfigError
    naming the setting: the wrong type, a non-finite number, a value beyond the bounds or a choice not offered."""
    if value is None and spec.optional:
        return value
    if spec.kind is tuple:
        if isinstance(value, (str, bytes)) or not isinstance(value, (tuple, list)):
            example = list(spec.default) if spec.default else [1.0]
            raise KitmConfigError(f"{option(spec.name)} takes a sequence of values (e.g. {example!r}); got "
                                  f"{value!r}.")
        shown = f"{option(spec.name)}={','.join(map(_number, value))}"
        items = tuple(scalar_value(spec, spec.item, item, shown, f"item {_number(item)} is ") for item in value)
        return items if items != value or not isinstance(value, tuple) else value
    value = scalar_value(spec, spec.kind, value, f"{option(spec.name)}={_number(value)}")
    if spec.choices is not None and value not in spec.choices:
        raise KitmConfigError(f"{option(spec.name)}={value}: not one of its choices; choose from "
                              f"{', '.join(spec.choices)}.")
    if (spec.lower is not None and value < spec.lower) or (spec.upper is not None and value > spec.upper):
        reason = f" ({spec.why})" if spec.why else ""
        raise KitmConfigError(f"{option(spec.name)}={_number(value)}: must be {bounds_text(spec)}{reason}; the "
                              f"default is {_number(spec.default)}.")
    return value


def bounds_text(spec: Setting) -> str:
    """The bounds of a setting in words ("in [0, 1]", ">= 16"), or "" for none."""
    if spec.lower is not None and spec.upper is not None:
        return f"in [{_number(spec.lower)}, {_number(spec.upper)}]"
    if spec.lower is not None:
        return f">= {_number(spec.lower)}"
    return f"<= {_number(spec.upper)}" if spec.upper is not None else ""


def scalar_value(spec: Setting, kind: type, value, shown: str, what: str = ""):
    """One value of type `kind` (a setting, or an item of a sequence setting), checked for its type and finiteness;
    `shown` is the setting as the error shows it, `what` the item at fault."""
    if kind is bool:
        if isinstance(value, bool):
            return value
        raise KitmConfigError(f"{shown}: {what}not true or false (a {type(value).__name__}).")
    if kind is int:
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise KitmConfigError(f"{shown}: {what}not a whole number (a {type(value).__name__}).")
    if kind is float:
        if not isinstance(value, numbers.Real) or isinstance(value, bool):
            raise KitmConfigError(f"{shown}: {what}not a number (a {type(value).__name__}).")
        if not math.isfinite(value):
            within = bounds_text(spec)
            raise KitmConfigError(f"{shown}: {what}not a finite number; give a finite one"
                                  + (f" {within}" if within else "") + f" (the default is {_number(spec.default)}).")
        return value
    if spec.choices is not None and isinstance(value, bool) and str(value).lower() in spec.choices:
        return str(value).lower()  # jit_compile=True from Python: the choice "true"
    if isinstance(value, os.PathLike) and spec.choices is None:
        return os.fspath(value)  # data_dir=pathlib.Path(...)
    if not isinstance(value, str):
        raise KitmConfigError(f"{shown}: {what}not a string (a {type(value).__name__}).")
    return value


def _number(value) -> str:
    if isinstance(value, tuple):
        return ",".join(_number(item) for item in value) or "empty"
    return f"{value:g}" if isinstance(value, float) else str(value)

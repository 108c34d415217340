"""kitm's exceptions, in one place: every error a user can fix names the file, record, field or option at fault.

Library code refers to a configuration option with `option("batch_size")`; the message reads `batch_size` when a
Python caller sees it and `--batch_size` when it surfaces through `python -m kitm.launch` (whose flags carry the
configuration fields' names), so one message serves both:

    raise KitmConfigError(f"{option('batch_size')}={batch} is larger than the {n} training samples.")
"""

from __future__ import annotations

import argparse
import re

_MARK = "\x00"
_OPTION = re.compile(_MARK + r"([A-Za-z_][A-Za-z0-9_]*)" + _MARK)


def option(name: str) -> str:
    """A configuration option's name inside an error message (rendered by `render_options`)."""
    return f"{_MARK}{name}{_MARK}"


def render_options(message: str, prefix: str = "") -> str:
    """`message` with each `option(name)` written as `prefix + name` (prefix "--" for command-line flags)."""
    return _OPTION.sub(lambda match: prefix + match.group(1), message)


def rename_options(message: str, names: dict[str, str]) -> str:
    """`message` with the options in `names` renamed (a component's field -> the setting that feeds it)."""
    return _OPTION.sub(lambda match: option(names.get(match.group(1), match.group(1))), message)


class KitmError(Exception):
    """Base of kitm's errors: a problem the user can fix, said in one message."""

    def __str__(self) -> str:
        return render_options(super().__str__())

    def for_flags(self) -> str:
        """The message with the options written as command-line flags (`--name`)."""
        return render_options(super().__str__(), "--")


class KitmDataError(KitmError, ValueError):
    """Bad input data: a missing, corrupt or foreign file, record or field. The message names it."""


class KitmConfigError(KitmError, ValueError):
    """A configuration that cannot run: options that contradict each other, the model or the data."""


class KitmWriteError(KitmError, OSError):
    """A file that could not be written for lack of room: a full disk, a quota or a file-size limit. The message
    names the file and what was kept (`kitm.files.no_room_error`)."""


class DistributionError(KitmConfigError):
    """A distribution strategy or cluster description (TF_CONFIG) that cannot be used."""


class CliError(KitmConfigError):
    """Bad arguments or input of a command line: printed as one line, exit status 2."""


class OneLineArgumentParser(argparse.ArgumentParser):
    """argparse whose errors are one line naming --help (a CliError), the same shape as every other error, instead
    of a usage block and an exit."""

    def error(self, message: str):
        raise CliError(f"{message} (see {self.prog} --help)")

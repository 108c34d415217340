"""Progress bars that stay readable in a log file: `progress_bar(...)` is tqdm's bar on a terminal or in a notebook,
and elsewhere (output redirected to a file or a pipe) a plain line at most every 30 seconds and at the end.

tqdm redraws its bar in place with carriage returns; written to a file, a long build's bar became one line of
megabytes. Keras' own bar is handled where `fit` is called: `verbose=2` (a line per epoch) when stdout is not a
terminal (`keras_verbosity`).
"""

from __future__ import annotations

import re
import sys

LOG_INTERVAL_SECONDS = 30.0


def interactive(stream=None) -> bool:
    """Whether `stream` (default stderr, where tqdm writes) is a terminal, or this is a notebook's kernel."""
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) or "ipykernel" in sys.modules


def keras_verbosity(progress: bool) -> int:
    """Keras' fit/predict `verbose`: 0 without progress, 1 (a live bar) on a terminal, 2 (a line per epoch) else."""
    if not progress:
        return 0
    return 1 if sys.stdout.isatty() else 2


class _Lines:
    """A file-like wrapper that writes each of tqdm's redraws as a line of its own (no carriage returns, no blank
    padding)."""

    def __init__(self, stream):
        self.stream = stream
        self.encoding = getattr(stream, "encoding", None) or "utf-8"

    def write(self, text: str) -> int:
        for part in re.split(r"[\r\n]", text):
            if part.strip():
                self.stream.write(part.rstrip() + "\n")
        return len(text)

    def flush(self) -> None:
        self.stream.flush()


def progress_bar(iterable=None, **kwargs):
    """`tqdm(iterable, **kwargs)`, live on a terminal or notebook; elsewhere a line every 30 s and at the end (module
    docstring)."""
    from tqdm.auto import tqdm

    stream = kwargs.get("file") or sys.stderr
    if kwargs.get("disable") or interactive(stream):
        return tqdm(iterable, **kwargs)
    from tqdm.std import tqdm as plain

    kwargs.update(file=_Lines(stream), dynamic_ncols=False, ascii=True)
    kwargs.setdefault("mininterval", LOG_INTERVAL_SECONDS)
    kwargs.setdefault("ncols", 100)
    return plain(iterable, **kwargs)

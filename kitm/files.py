"""Atomic writes (kitm's rule: a reader, or a job killed half-way, never sees half a file) and strict JSON.

Everything kitm writes goes to a temporary name beside its destination and is renamed onto it (`os.replace`, atomic
on POSIX within one filesystem), so a destination is absent, the old version, or the complete new one.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import pathlib
import re
import shutil
from collections.abc import Iterator, Mapping

from kitm.errors import KitmWriteError


def temporary_sibling(path: str | os.PathLike, keep_suffix: str = "", *, unique: bool = False) -> pathlib.Path:
    """The temporary name beside `path`: `<name>.tmp`, or `<stem>.partial<keep_suffix>` for writers that insist on
    a suffix (Keras' `save_weights` wants `.weights.h5`, `np.save` appends `.npy`). unique: the process id goes
    before `.tmp` / `.partial`, so processes racing for one `path` write to different temporaries."""
    path = pathlib.Path(path)
    tag = f".{os.getpid()}" if unique else ""
    if keep_suffix:
        if not path.name.endswith(keep_suffix):
            raise ValueError(f"{path} does not end in {keep_suffix}.")
        return path.with_name(path.name[: -len(keep_suffix)] + tag + ".partial" + keep_suffix)
    return path.with_name(path.name + tag + ".tmp")


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, keep_suffix: str = "", *,
                overwrite: bool = True) -> Iterator[pathlib.Path]:
    """Yield a temporary path beside `path` to write (a file or a folder); on success rename it onto `path`.

    An existing folder at `path` is replaced; on an exception the temporary is removed and `path` is untouched.
    overwrite=False never replaces what is at `path` (a file or a non-empty folder), even one that appears while
    the temporary is written: the rename then fails with FileExistsError. Its temporary carries the process id
    (`temporary_sibling(unique=True)`), so writers racing for one `path` never share or delete each other's.
    """
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_sibling(path, keep_suffix, unique=not overwrite)
    _remove(tmp)
    try:
        yield tmp
        if not overwrite:
            _rename_without_replacing(tmp, path)
        else:
            if tmp.is_dir() and path.is_dir():
                shutil.rmtree(path)
            os.replace(tmp, path)
    except BaseException:
        _remove(tmp)
        raise


def _rename_without_replacing(tmp: pathlib.Path, path: pathlib.Path) -> None:
    """Rename `tmp` onto `path` unless `path` holds something; FileExistsError when it does."""
    try:
        if tmp.is_dir():
            os.rename(tmp, path)  # POSIX refuses a non-empty folder or a file at `path` (an empty folder holds nothing)
        else:
            os.link(tmp, path)  # refuses an existing `path`, where os.rename would silently replace it
            tmp.unlink()
    except OSError as error:
        if isinstance(error, FileExistsError) or path.exists():
            raise FileExistsError(errno.EEXIST, f"{path} exists; it was left as it was", str(path)) from error
        raise


def _remove(path: pathlib.Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def write_bytes_atomically(path: str | os.PathLike, data: bytes) -> pathlib.Path:
    """Write `data` to `<path>.tmp` in the same folder, then rename it onto `path`."""
    path = pathlib.Path(path)
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
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
    if hasattr(value, "tolist") and getattr(value, "ndim", 0):  # numpy arrays
        return json_ready(value.tolist())
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return json_ready(value.item())
    return value


def write_json_atomically(path: str | os.PathLike, payload: object, *, sort_keys: bool = False,
                          strict: bool = True, indent: int | None = 2) -> pathlib.Path:
    """`payload` as JSON (indented by `indent`; None: one line without spaces), atomically. strict: NaN and
    infinities become null (strict JSON), else they are written as Python's json writes them; objects json cannot
    write become their str()."""
    if strict:
        payload = json_ready(payload)
    separators = (",", ":") if indent is None else None
    text = json.dumps(payload, indent=indent, separators=separators, sort_keys=sort_keys, allow_nan=not strict,
                      default=str)
    return write_text_atomically(path, text + "\n")


def read_json(path: str | os.PathLike) -> object | None:
    """The JSON at `path`, or None when it is missing or unreadable (a job that has not written it yet)."""
    try:
        return json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


# A write refused for lack of room: a full disk, a quota, a file-size limit (ulimit -f / RLIMIT_FSIZE).
_NO_ROOM = {errno.ENOSPC: "No space left on device", errno.EDQUOT: "Disk quota exceeded", errno.EFBIG: "File too large"}
# Where the failing file's name sits in the messages of writers that do not set OSError.filename: h5py's
# "... filename = '<path>', ..." and TensorFlow's "<path>; File too large" (an OpError, not an OSError).
_NAMED_IN_MESSAGE = (re.compile(r"filename = '([^']+)'"), re.compile(r"(\S+); (?:" + "|".join(_NO_ROOM.values()) + ")"))


def final_name(path: str | os.PathLike) -> pathlib.Path:
    """The destination a temporary name of `temporary_sibling` stands for (the path itself when it is none)."""
    path = pathlib.Path(path)
    name = re.sub(r"(\.\d+)?\.tmp$", "", path.name)
    name = re.sub(r"(\.\d+)?\.partial(?=\.|$)", "", name)
    return path.with_name(name)


def no_room_error(error: BaseException) -> KitmWriteError | None:
    """`error` (or an exception it was raised from) as a KitmWriteError when a write failed for lack of room, naming
    the file, the cause and what was kept; None for any other error.

    Every file kitm writes goes through a temporary name (`atomic_path`), removed when its writer fails, so the
    destination still holds its previous version (a shard not yet written stays absent and is written by the next
    build). Recognised by the errno (ENOSPC, EDQUOT, EFBIG) or, for TensorFlow's writers, the same words in the
    message."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        cause = _NO_ROOM.get(getattr(error, "errno", None) if isinstance(error, OSError) else None)
        text = str(error)
        if cause is None:
            cause = next((words for words in _NO_ROOM.values() if words in text), None)
        if cause is not None:
            path = getattr(error, "filename", None) if isinstance(error, OSError) else None
            for pattern in _NAMED_IN_MESSAGE:
                if path is None and (match := pattern.search(text)):
                    path = match.group(1)
            return KitmWriteError(_no_room_message(path, cause))
        error = error.__cause__ or error.__context__
    return None


def _no_room_message(path: str | None, cause: str) -> str:
    where = f"Writing {path} failed" if path else "A write failed"
    kept = ""
    if path:
        final = final_name(path)
        if final != pathlib.Path(path):
            kept = (f" It was a temporary name: {final} " + ("keeps its previous version." if final.exists() else
                                                                 "was not created (nothing half-written is left)."))
    return (f"{where}: {cause}. The disk is full, or a disk quota or the file-size limit (ulimit -f) was reached."
            f"{kept} Free space (or raise the limit) and run the same command again: what was finished is kept and "
            "the work resumes.")

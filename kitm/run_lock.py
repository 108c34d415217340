"""One live run per run folder: `hold_run_dir(run_dir)` takes `<run_dir>/run.lock` for the length of a run.

Two trainings started into one folder both ran and wrote over each other (the second crashed on the first's
backup temporaries, `evaluations.jsonl` held each epoch twice, `logs/` two event files). The lock refuses the second
before it writes anything, naming the first: the holder writes its process id, host, start time and command into
the lock file.

The lock is `fcntl.flock` on that file, not the file's existence: the kernel drops a process's flock when the
process ends, however it ends (SIGKILL, a crash, the machine's OOM killer), because the lock belongs to the open
file, which the kernel closes with the process. So a killed run leaves at most a `run.lock` nobody holds, and the
same command resumes without a stale lock to delete. (Linux emulates flock over NFS with POSIX locks; on a
filesystem without locks the run stops with the operating system's error.) A finished run removes the file.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import json
import os
import pathlib
import socket
import sys
from collections.abc import Iterator

from kitm.errors import KitmConfigError, option

LOCK_FILE = "run.lock"


class RunDirInUse(KitmConfigError):
    """Another live process holds the run folder."""


def holder_description(text: str) -> str:
    """The lock file's content (written by `hold_run_dir`) in words: process, host, start time, command."""
    try:
        holder = json.loads(text)
        return (f"process {holder['pid']} on host {holder['host']}, started {holder['started']} "
                f"({' '.join(holder.get('command', [])) or 'no command recorded'})")
    except (ValueError, KeyError, TypeError):
        return "a process that has not written its details yet"


def _refusal(run_dir: pathlib.Path, lock: pathlib.Path, text: str) -> RunDirInUse:
    return RunDirInUse(
        f"{run_dir} is in use by another live run: {holder_description(text)} holds {lock}. Two trainings in one "
        f"run folder overwrite each other's backup, checkpoints and logs, so this one stops before writing anything. "
        f"Wait for that run to end, stop it (it resumes from its backup when started again), or give this one "
        f"another {option('run_dir')}. (A killed run holds no lock: the kernel releases it with the process.)")


def _open_locked(lock: pathlib.Path, run_dir: pathlib.Path) -> int:
    """A descriptor of `lock` holding its flock; RunDirInUse when another process holds it.

    The file found locked may be one a finishing run has just removed; the lock taken counts only while the path
    still names the locked file, else it is taken again on the new one."""
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            text = os.pread(fd, 65536, 0).decode("utf-8", "replace")
            os.close(fd)
            if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise _refusal(run_dir, lock, text) from None
            raise
        try:
            if os.stat(lock).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


def _not_writable(run_dir: pathlib.Path, error: OSError) -> KitmConfigError:
    """The one line for a run folder this process cannot write (it was a raw PermissionError on run.lock)."""
    cause = ("it is on a read-only file system" if error.errno == errno.EROFS
             else f"permission denied on {error.filename or run_dir}")
    return KitmConfigError(
        f"{run_dir} cannot be written ({cause}): a run writes its lock, backup, checkpoints, logs and export there, "
        f"so it stops before training. Give a {option('run_dir')} you can write, or make this one writable "
        f"(chmod -R u+w {run_dir}); to score a finished run in it: python -m kitm.eval --run_dir={run_dir}.")


def _command_line() -> list[str]:
    """This process's command line as typed (`python -m kitm.launch --flagfile=...`), the interpreter by its name."""
    argv = list(getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv])
    return [os.path.basename(argv[0]), *argv[1:]] if argv else []


@contextlib.contextmanager
def hold_run_dir(run_dir: str | os.PathLike) -> Iterator[pathlib.Path]:
    """Hold `run_dir` (created if absent) for the block: RunDirInUse, naming the holder, if a live process holds it.

    The lock file records this process (pid, host, UTC start time, command line); on leaving the block it is
    removed (while still held, so no other process can take a file that is about to disappear)."""
    run_dir = pathlib.Path(run_dir)
    lock = run_dir / LOCK_FILE
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        fd = _open_locked(lock, run_dir)
    except OSError as error:
        if error.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise
        raise _not_writable(run_dir, error) from None
    try:
        started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        details = {"pid": os.getpid(), "host": socket.gethostname(), "started": started,
                   "command": _command_line()}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(details) + "\n").encode("utf-8"), 0)
        yield lock
    finally:
        with contextlib.suppress(FileNotFoundError):
            lock.unlink()
        os.close(fd)  # closing the last descriptor releases the flock

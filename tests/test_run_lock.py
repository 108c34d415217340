"""kitm.run_lock: one live run per run folder. A second holder is refused naming the first (pid, host,
start time); a SIGKILLed holder leaves no stale lock; `run` is refused before it writes anything."""

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import textwrap

import pytest

from kitm.run_lock import LOCK_FILE, RunDirInUse, hold_run_dir

HOLDER = textwrap.dedent("""
    import sys, time
    from kitm.run_lock import hold_run_dir
    with hold_run_dir(sys.argv[1]):
        print("held", flush=True)
        time.sleep(600)
""")


def test_a_second_holder_is_refused_naming_the_first_and_a_finished_holder_removes_the_lock(tmp_path):
    run_dir = tmp_path / "run"
    with hold_run_dir(run_dir) as lock:
        holder = json.loads(lock.read_text())
        assert holder["pid"] == os.getpid() and holder["host"] == socket.gethostname()
        with pytest.raises(RunDirInUse) as refused:  # another open file of this process: flock refuses it too
            with hold_run_dir(run_dir):
                pass
        message = str(refused.value)
        assert f"{run_dir} is in use by another live run: process {os.getpid()} on host {socket.gethostname()}, " \
               f"started {holder['started']}" in message
        assert f"give this one another run_dir" in message and str(lock) in message
        assert lock.is_file()  # the refused one removed nothing
    assert not (run_dir / LOCK_FILE).exists()
    with hold_run_dir(run_dir):  # free again
        pass


def test_a_sigkilled_holder_leaves_no_stale_lock(tmp_path, subprocess_env):
    run_dir = tmp_path / "run"
    child = subprocess.Popen([sys.executable, "-c", HOLDER, str(run_dir)], stdout=subprocess.PIPE, text=True,
                             env=subprocess_env())
    try:
        assert child.stdout.readline().strip() == "held"
        with pytest.raises(RunDirInUse, match=f"process {child.pid} on host"):
            with hold_run_dir(run_dir):
                pass
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    assert (run_dir / LOCK_FILE).is_file()  # the killed holder's file stays, its lock went with the process
    with hold_run_dir(run_dir) as lock:
        assert json.loads(lock.read_text())["pid"] == os.getpid()


def test_a_run_into_a_held_folder_stops_before_writing_anything(tiny_synthetic, tmp_path):
    from kitm.experiment import experiment_config, run

    run_dir = tmp_path / "run"
    config = experiment_config("synthetic", data_dir=str(tiny_synthetic), run_dir=str(run_dir), epochs=1,
                               batch_size=16, image_size=32, projector_samples=0, progress=False)
    with hold_run_dir(run_dir):
        with pytest.raises(RunDirInUse, match=f"process {os.getpid()}"):
            run(config)
        assert sorted(path.name for path in run_dir.rglob("*")) == [LOCK_FILE]


def test_a_run_holding_its_folder_removes_every_unfinished_export_and_then_its_lock(tmp_path):
    from kitm.errors import KitmError
    from kitm.experiment import experiment_config, run

    run_dir = tmp_path / "run"
    stale = run_dir / "export" / f"1.{os.getppid()}.tmp"  # its pid lives, but no one exports into a held folder
    stale.mkdir(parents=True)
    config = experiment_config("f8k", data_dir=str(tmp_path / "no_records"), run_dir=str(run_dir))
    with pytest.raises(KitmError):  # the missing records stop the run after it took the folder
        run(config)
    assert not stale.exists() and not (run_dir / LOCK_FILE).exists()


def test_a_run_folder_that_cannot_be_written_is_one_line_naming_it(tmp_path, monkeypatch):
    """A read-only run folder was a raw PermissionError on run.lock."""
    import errno

    from kitm import run_lock
    from kitm.errors import KitmConfigError

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "summary.json").write_text("{}")
    real_open = os.open

    def refusing_open(path, *args, **kwargs):  # as for a folder without write permission (tests may run as root)
        if str(path).endswith(LOCK_FILE):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(run_lock.os, "open", refusing_open)
    with pytest.raises(KitmConfigError) as error:
        with hold_run_dir(run_dir):
            pass
    assert error.value.for_flags() == (
        f"{run_dir} cannot be written (permission denied on {run_dir / LOCK_FILE}): a run writes its lock, backup, "
        "checkpoints, logs and export there, so it stops before training. Give a --run_dir you can write, or make "
        f"this one writable (chmod -R u+w {run_dir}); to score a finished run in it: python -m kitm.eval "
        f"--run_dir={run_dir}.")
    monkeypatch.setattr(run_lock.os, "open", real_open)
    assert sorted(path.name for path in run_dir.iterdir()) == ["summary.json"]

    def read_only(path, *args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    monkeypatch.setattr(pathlib.Path, "mkdir", read_only)
    with pytest.raises(KitmConfigError, match=r"new cannot be written \(it is on a read-only file system\)"):
        with hold_run_dir(tmp_path / "new"):
            pass

"""Several JAX processes on one machine (issue 46, item 2): `--strategy=multi_worker` on JAX joins the processes
(kitm.distribute.processes) and trains with keras.distribution.DataParallel over every device of both, the CPU's
collectives through gloo. Here: a run killed in both processes resumes from the chief's backup, and a process
whose coordinator never answers stops within its timeout naming the address. The two processes' run against one
process with the whole batch is in test_launcher_on_jax.py (beside the one-process run it compares with)."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

pytest.importorskip("jax")


@pytest.mark.slow
def test_a_run_killed_in_both_processes_resumes_from_the_chiefs_backup(tiny_synthetic, tiny_flags, jax_processes,
                                                                       tmp_path):
    """SIGKILL to both processes after the chief's first mid-epoch backup (a machine lost stops the job: the other
    process would wait on it), then the same two commands: both restore the chief's backup and the run ends with its
    planned 12 steps; only the chief's run directory holds files."""
    run_dir = tmp_path / "run"
    arguments = [*tiny_flags, f"--data_dir={tiny_synthetic}", f"--run_dir={run_dir}", "--epochs=2",
                 "--eval_every_epochs=0", "--backup_every_steps=4", "--export=false", "--loss=triplet"]
    metadata = run_dir / "backup" / "training_metadata.json"
    started = jax_processes.start(jax_processes.commands(arguments), tmp_path)
    try:
        deadline = time.time() + 600
        while not metadata.exists() and all(p.poll() is None for p, _ in started) and time.time() < deadline:
            time.sleep(0.02)
        assert metadata.exists(), (tmp_path / "process0.txt").read_text()[-3000:]
        for process, _ in started:
            os.kill(process.pid, signal.SIGKILL)
    finally:
        jax_processes.finish(started, timeout=60)
    killed_at = json.loads(metadata.read_text())["step"]
    assert killed_at in (4, 8)

    codes, (chief, other) = jax_processes.run(arguments, tmp_path)
    assert codes == [0, 0], chief[-3000:] + other[-3000:]
    for log in (chief, other):
        assert f"Resumed from the backup at step {killed_at} of 12." in log
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["resumed_from_step"] == killed_at and summary["optimizer_steps"] == 12
    assert summary["workers"] == {"count": 2, "chief": True}
    assert "process1" not in " ".join(str(path) for path in run_dir.rglob("*"))


def test_a_process_whose_coordinator_never_answers_stops_within_its_timeout_naming_the_address(
        tiny_synthetic, tiny_flags, subprocess_env, repo_root, tmp_path):
    with socket.socket() as probe:  # a port nothing listens at
        probe.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{probe.getsockname()[1]}"
    started = time.time()
    done = subprocess.run([sys.executable, "-m", "kitm.launch", *tiny_flags, f"--data_dir={tiny_synthetic}",
                           f"--run_dir={tmp_path / 'run'}", "--strategy=multi_worker",
                           f"--coordinator_address={address}", "--num_processes=2", "--process_id=1",
                           "--coordinator_timeout=3"],
                          cwd=repo_root, env=subprocess_env(KERAS_BACKEND="jax"), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-3000:]
    assert (f"kitm.launch: error: process 1 of 2: nothing answers at the coordinator's address {address} (from the "
            "launcher's settings) after 3 s (--coordinator_timeout)") in done.stderr
    assert "Traceback" not in done.stderr
    assert time.time() - started < 120
    assert not (tmp_path / "run" / "summary.json").exists()

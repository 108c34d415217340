"""End to end: a launcher run killed with SIGKILL mid-epoch resumes from its last backup and ends with exactly the
planned number of steps, a final checkpoint and an export; started again with a changed batch size or loss it is
refused, naming the setting."""

import json
import os
import signal
import subprocess
import time

import h5py
import pytest


def _flags(tiny_flags, tiny_synthetic, run_dir):
    # 6 steps per epoch, 18 in all; a backup every 5 steps lands mid-epoch (after steps 5, 10, 15).
    return [*tiny_flags, f"--data_dir={tiny_synthetic}", f"--run_dir={run_dir}", "--epochs=3", "--eval_every_epochs=0",
            "--backup_every_steps=5"]


def _command(tiny_flags, tiny_synthetic, run_dir):
    """What follows `python` (the kitm_popen / kitm_python fixtures run it as a fresh interpreter would)."""
    return ["-m", "kitm.launch", *_flags(tiny_flags, tiny_synthetic, run_dir)]


@pytest.mark.slow
def test_run_killed_with_sigkill_resumes_and_finishes_with_the_planned_steps(tiny_synthetic, tmp_path, tiny_flags, repo_root,
                                                                            kitm_popen, kitm_python,
                                                                            launch_refused):
    run_dir = tmp_path / "run"
    metadata = run_dir / "backup" / "training_metadata.json"
    process = kitm_popen(_command(tiny_flags, tiny_synthetic, run_dir), cwd=repo_root, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 400
        while not metadata.exists() and process.poll() is None and time.time() < deadline:
            time.sleep(0.02)
        assert metadata.exists(), "no backup appeared: " + (process.stdout.read() if process.poll() is not None else "")
        os.kill(process.pid, signal.SIGKILL)  # mid-run, without any chance to clean up
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == -signal.SIGKILL
    assert not (run_dir / "summary.json").exists() and not (run_dir / "export").exists()
    killed_at = json.loads(metadata.read_text())["step"]
    assert killed_at in (5, 10, 15)  # every backup is mid-epoch

    # Started again with settings that change the run: refused, naming each one, and the backup is kept.
    backup = {path.name: path.read_bytes() for path in (run_dir / "backup").iterdir()}
    for changed, named in ((["--batch_size=12"], "--batch_size: before 16, now 12"),
                           (["--loss=infonce"], "--loss: before ")):
        refused = launch_refused(_flags(tiny_flags, tiny_synthetic, run_dir) + changed)
        assert "Traceback" not in refused, refused[-3000:]
        assert (f"kitm.launch: error: {run_dir} holds an unfinished run (its backup at step {killed_at}) made with "
                f"other settings: {named}") in refused, refused[-3000:]
        assert f"(recorded in {run_dir / 'backup' / 'run_settings.json'})" in refused
        assert {path.name: path.read_bytes() for path in (run_dir / "backup").iterdir()} == backup

    result = kitm_python(_command(tiny_flags, tiny_synthetic, run_dir), cwd=repo_root)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-4000:]
    assert f"Resumed from the backup at step {killed_at} of 18." in result.stdout
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["resumed_from_step"] == killed_at
    assert summary["optimizer_steps"] == 18  # as if never killed
    assert summary["epochs_run"] == 3 - killed_at // 6  # the interrupted epoch (its remaining steps) and the rest
    # The epochs before the interrupted one come back from beside the backup (kitm.training.epoch_history).
    assert summary["history_restored_epochs"] == killed_at // 6 and len(summary["history"]["loss"]) == 3
    with h5py.File(run_dir / "checkpoints" / "last.weights.h5") as weights:
        assert int(weights["optimizer/vars/0"][()]) == 18
    assert (run_dir / "export" / "1" / "saved_model.pb").is_file()
    assert not (run_dir / "backup").exists()  # a completed run leaves no resume state behind

"""End to end: a run killed after training, while it scores the test split or while it writes its SavedModel, is
finished by the same command without training again: no half-written export is left where serving or kitm.index
would look (the export is written under a temporary name and renamed), and the rerun scores and exports."""

import json
import os
import signal
import subprocess
import threading
import time

import pytest


def _command(tiny_flags, tiny_synthetic, run_dir):
    # 6 steps in one epoch; the backup holds the epoch's end when training is over.
    return ["-m", "kitm.launch", *tiny_flags, f"--data_dir={tiny_synthetic}", f"--run_dir={run_dir}",
            "--epochs=1", "--eval_every_epochs=0", "--projector_samples=0"]


def _kill_when(kitm_popen, command, cwd, env, ready, what: str) -> str:
    """Run `command` and SIGKILL it as soon as `ready(lines printed so far)` holds (polled every 5 ms, so a state
    on disk is caught between two lines); its output up to then."""
    process = kitm_popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(process.stdout), daemon=True)
    reader.start()
    try:
        deadline = time.time() + 400
        while not ready(lines) and process.poll() is None and time.time() < deadline:
            time.sleep(0.005)
        assert ready(lines), f"never reached {what}: " + "".join(lines)[-3000:]
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    reader.join(timeout=10)
    assert process.returncode == -signal.SIGKILL
    return "".join(lines)


@pytest.mark.slow
def test_a_run_killed_while_scoring_or_exporting_finishes_on_the_rerun_without_training(
        tiny_synthetic, tmp_path, tiny_flags, repo_root, subprocess_env, kitm_popen, kitm_python):
    from kitm.serving.versions import latest_version_dir

    run_dir = tmp_path / "run"
    env = subprocess_env(PYTHONUNBUFFERED="1")
    command = _command(tiny_flags, tiny_synthetic, run_dir)

    _kill_when(kitm_popen, command, repo_root, env,
               lambda lines: any(line.startswith("Evaluating on the test split") for line in lines),
               "the test scoring")
    assert not (run_dir / "summary.json").exists() and not (run_dir / "export").exists()

    export = run_dir / "export"
    # Killed while the SavedModel is written: the first file under export/ is the temporary's.
    output = _kill_when(kitm_popen, command, repo_root, env, lambda lines: export.exists() and any(export.iterdir()),
                        "the export")
    assert "Resumed from the backup at step 6 of 6." in output
    assert not (export / "1").exists() and all(not path.name.isdigit() for path in export.iterdir())
    assert latest_version_dir(export) is None  # what serving and kitm.index open: nothing half-written

    result = kitm_python(command, cwd=repo_root, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "Resumed from the backup at step 6 of 6." in result.stdout and "Epoch 1/" not in result.stdout
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["optimizer_steps"] == 6 and summary["epochs_run"] == 0 and summary["test"]["i2t_R@1"] >= 0
    # Its history and the collapse monitor's last statistic are the training's, read back from beside the backup.
    assert summary["history_restored_epochs"] == 1 and len(summary["history"]["loss"]) == 1
    assert summary["final_train_metrics"]["loss"] == summary["history"]["loss"][0]
    assert set(summary["collapse"]["last"]) == {"collapse/image_cosine", "collapse/text_cosine"}
    assert sorted(path.name for path in export.iterdir()) == ["1"]  # the stale temporary went with the rerun
    assert latest_version_dir(export) == export / "1" and (export / "1" / "saved_model.pb").is_file()

"""What a new user meets in the first hour (kitm issue 12): a run trained from Python through kitm.experiment, a
finished run directory that is refused instead of silently trained again, validation at the end of a run shorter
than the evaluation interval, and the resume message printed when the backup is restored."""

import json
import pathlib

import keras
import numpy as np
import pytest
import tensorflow as tf

from kitm.errors import KitmConfigError
from kitm.experiment import experiment_config, run
from kitm.training.fault_tolerance import ResumableBackupAndRestore

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_a_python_run_validates_at_its_end_and_its_directory_is_not_trained_again(tiny_synthetic, tmp_path,
                                                                                   launch_refused):
    run_dir = tmp_path / "run"
    # The synthetic presets validate every 3 epochs; this run has one.
    config = experiment_config("synthetic", data_dir=str(tiny_synthetic), run_dir=str(run_dir), epochs=1,
                               batch_size=16, image_size=32, projector_samples=0, progress=False)
    assert config.evaluation.eval_every_epochs == 3
    summary = run(config)
    assert json.loads((run_dir / "summary.json").read_text())["test"] == summary["test"]
    assert summary["epochs_run"] == 1 and summary["flags"]["epochs"] == 1 and summary["export"]
    assert len((run_dir / "evaluations.jsonl").read_text().splitlines()) == 1  # validated at the end
    before = sorted(path.name for path in run_dir.rglob("*"))

    with pytest.raises(KitmConfigError) as refused:
        run(config)
    message = str(refused.value)
    assert f"{run_dir} holds a finished run" in message and "give a new run_dir" in message
    assert f"python -m kitm.eval --run_dir={run_dir}" in message
    # Through the launcher the same refusal names the flag, exits 2, and nothing in the run changed.
    stderr = launch_refused([f"--flagfile={ROOT / 'launch' / 'demo.flags'}", f"--data_dir={tiny_synthetic}",
                             f"--run_dir={run_dir}"])
    assert "give a new --run_dir" in stderr and "Traceback" not in stderr
    assert sorted(path.name for path in run_dir.rglob("*")) == before


class _FirstBatch(keras.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        if batch == 0:
            print("FIRST BATCH", flush=True)


def test_the_resume_message_is_printed_when_the_backup_is_restored(tmp_path, capsys):
    def model():
        keras.utils.set_random_seed(0)
        net = keras.Sequential([keras.Input([3]), keras.layers.Dense(1)])
        net.compile(keras.optimizers.SGD(0.1), "mse")
        return net

    data = tf.data.Dataset.from_tensor_slices((np.ones([8, 3], np.float32), np.zeros([8, 1], np.float32))).batch(2)
    first = model()
    backup = ResumableBackupAndRestore(tmp_path / "backup", steps_per_epoch=4, save_freq=3, delete_checkpoint=False,
                                       total_steps=8)
    first.fit(data.take(3), epochs=1, callbacks=[backup], verbose=0)  # killed after step 3 (stands in for SIGKILL)
    capsys.readouterr()
    resumed = ResumableBackupAndRestore(tmp_path / "backup", steps_per_epoch=4, save_freq=3, total_steps=8)
    model().fit(data.repeat(), epochs=2, steps_per_epoch=4, callbacks=[resumed, _FirstBatch()], verbose=0)
    output = capsys.readouterr().out
    assert "Resumed from the backup at step 3 of 8." in output
    assert output.index("Resumed from the backup") < output.index("FIRST BATCH")  # before training goes on

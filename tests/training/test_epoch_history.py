"""A resumed run's history (kitm.training.epoch_history): the epochs before the restore are read back from beside
the backup, so that the history of a run killed and resumed, or killed after training, is the uninterrupted run's.
The launcher's run killed after training: tests/end_to_end/test_late_kills.py."""

import json
import math

import keras
import numpy as np
import pytest

import kitm  # noqa: F401
from kitm.callbacks.collapse_monitor import CollapseMonitor
from kitm.training.epoch_history import HISTORY, EpochHistoryBackup, merged_history, read_epoch_history
from kitm.training.fault_tolerance import ResumableBackupAndRestore, backup_save_freq


def _tiny_model():
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(keras.optimizers.SGD(0.01), "mse")
    return model


def _data():
    rng = np.random.default_rng(0)
    return rng.normal(size=(20, 3)).astype("float32"), rng.normal(size=(20, 2)).astype("float32")


class _Interrupt(keras.callbacks.Callback):
    def __init__(self, after_step):
        super().__init__()
        self.after_step = after_step

    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) == self.after_step:
            raise RuntimeError("interrupted")


def _callbacks(backup_dir, **backup_options):
    backup = ResumableBackupAndRestore(backup_dir, steps_per_epoch=5, **backup_options)
    return backup, EpochHistoryBackup(backup)


def test_a_run_killed_in_its_second_epoch_reports_every_epoch_after_the_resume(tmp_path):
    x, y = _data()  # batch 4: 5 steps an epoch, 3 epochs; backups after steps 3 and 6; killed at step 8
    backup, epochs = _callbacks(tmp_path / "backup", save_freq=backup_save_freq(3))
    with pytest.raises(RuntimeError, match="interrupted"):
        _tiny_model().fit(x, y, batch_size=4, epochs=3, callbacks=[backup, epochs, _Interrupt(8)], verbose=0)
    first_epoch = read_epoch_history(tmp_path / "backup" / HISTORY)
    assert len(first_epoch) == 1 and set(first_epoch[0]) == {"loss"}

    backup, epochs = _callbacks(tmp_path / "backup", save_freq=backup_save_freq(3))
    history = _tiny_model().fit(x, y, batch_size=4, epochs=3, callbacks=[backup, epochs], verbose=0)
    assert backup.restored_step == 6 and epochs.earlier == first_epoch  # epoch 2 is run again from step 6
    whole = merged_history(epochs.earlier, history.history)
    assert len(history.history["loss"]) == 2 and len(whole["loss"]) == 3
    assert whole["loss"][0] == first_epoch[0]["loss"] and whole["loss"][1:] == history.history["loss"]


def test_a_run_killed_after_training_keeps_its_whole_history(tmp_path):
    x, y = _data()
    backup, epochs = _callbacks(tmp_path / "backup", delete_checkpoint=False)
    trained = _tiny_model().fit(x, y, batch_size=4, epochs=2, callbacks=[backup, epochs], verbose=0)
    backup, epochs = _callbacks(tmp_path / "backup", delete_checkpoint=False)
    history = _tiny_model().fit(x, y, batch_size=4, epochs=2, callbacks=[backup, epochs], verbose=0)
    assert backup.restored_step == 10 and history.history == {}
    np.testing.assert_allclose(merged_history(epochs.earlier, history.history)["loss"], trained.history["loss"])


def test_a_fresh_start_reads_no_history_and_the_file_goes_with_the_backup(tmp_path):
    (tmp_path / "backup").mkdir()
    (tmp_path / "backup" / HISTORY).write_text(json.dumps([{"loss": 99.0}]))  # stale, with no backup to resume
    x, y = _data()
    backup, epochs = _callbacks(tmp_path / "backup")
    history = _tiny_model().fit(x, y, batch_size=4, epochs=2, callbacks=[backup, epochs], verbose=0)
    assert epochs.earlier == [] and merged_history(epochs.earlier, history.history) == history.history
    assert not (tmp_path / "backup").exists()


def test_merged_history_keeps_each_keys_epochs_in_order():
    earlier = [{"loss": 3.0, "val_r1": 10.0}, {"loss": 2.0, "acc": None}]
    merged = merged_history(earlier, {"loss": [1.0], "val_r1": [20.0]})
    assert merged["loss"] == [3.0, 2.0, 1.0] and merged["val_r1"] == [10.0, 20.0]
    assert len(merged["acc"]) == 1 and math.isnan(merged["acc"][0])
    assert merged_history([], {}) == {} and read_epoch_history(__import__("pathlib").Path("/nonexistent")) == []


def test_the_collapse_monitor_counts_the_epochs_before_the_restore():
    collapsed = {"collapse/image_cosine": 0.9999, "collapse/text_cosine": 0.99}
    monitor = CollapseMonitor(threshold=0.9)
    monitor.include_earlier_epochs([{"collapse/image_cosine": 0.2, "collapse/text_cosine": 0.1}, collapsed])
    assert monitor.report()["collapsed_epoch"] == 2 and monitor.report()["last"] == collapsed
    # A fit that ran after the restore keeps its own last values; the earlier collapse still comes first.
    monitor = CollapseMonitor(threshold=0.9, stream=open("/dev/null", "w"))
    monitor.on_epoch_end(2, {"collapse/image_cosine": 0.95, "collapse/text_cosine": 0.5})
    monitor.include_earlier_epochs([{"collapse/image_cosine": 0.1}, collapsed])
    report = monitor.report()
    assert report["collapsed_epoch"] == 2 and report["last"]["collapse/image_cosine"] == 0.95
    # None (a non-finite value in the file) is skipped; no earlier epochs change nothing.
    monitor = CollapseMonitor(threshold=0.9)
    monitor.include_earlier_epochs([{"collapse/image_cosine": None}])
    assert monitor.report()["collapsed_epoch"] is None and monitor.report()["last"] == {}

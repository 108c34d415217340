"""Fault tolerance (kitm.training.fault_tolerance): NaN epochs never reach the checkpoint or the backup; a resumed
fit runs only the rest of the interrupted epoch; a resumed run's history has the epochs before the restore
(kitm.training.epoch_history). A launcher run killed with SIGKILL: tests/end_to_end/test_resume.py."""

import json
import math
import pathlib

import h5py
import keras
import numpy as np
import pytest

import kitm  # noqa: F401
from kitm.callbacks.checkpoint import AtomicWeightsCheckpoint
from kitm.callbacks.collapse_monitor import CollapseMonitor
from kitm.training.epoch_history import HISTORY, EpochHistoryBackup, merged_history, read_epoch_history
from kitm.training.fault_tolerance import ResumableBackupAndRestore, backup_save_freq


def _tiny_model():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(keras.optimizers.SGD(0.01), "mse")
    model.optimizer.build(model.trainable_variables)
    return model


def _data():
    rng = np.random.default_rng(0)
    return rng.normal(size=(20, 3)).astype("float32"), rng.normal(size=(20, 2)).astype("float32")


class _Interrupt(keras.callbacks.Callback):
    """Raises after a given global step: a run stopped between two backups."""

    def __init__(self, after_step):
        super().__init__()
        self.after_step = after_step

    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) == self.after_step:
            raise RuntimeError("interrupted")


class _PoisonWeights(keras.callbacks.Callback):
    """Turns a kernel to NaN at the start of an epoch, so that epoch's loss is NaN."""

    def __init__(self, epoch):
        super().__init__()
        self.epoch = epoch

    def on_epoch_begin(self, epoch, logs=None):
        if epoch == self.epoch:
            kernel = self.model.layers[0].kernel
            kernel.assign(np.full(kernel.shape, np.nan, "float32"))


def test_resumed_fit_runs_only_the_rest_of_the_interrupted_epoch(tmp_path):
    x, y = _data()  # batch 4: 5 steps per epoch, 3 epochs = 15 steps
    model = _tiny_model()
    backup = ResumableBackupAndRestore(tmp_path / "backup", steps_per_epoch=5, save_freq=backup_save_freq(3))
    with pytest.raises(RuntimeError, match="interrupted"):
        model.fit(x, y, batch_size=4, epochs=3, callbacks=[backup, _Interrupt(after_step=8)], verbose=0)
    metadata = json.loads((tmp_path / "backup" / "training_metadata.json").read_text())
    assert metadata["step"] == 6  # backups after steps 3 and 6; the run died at step 8

    model = _tiny_model()  # a new process: fresh weights, restored by the callback
    backup = ResumableBackupAndRestore(tmp_path / "backup", steps_per_epoch=5, save_freq=backup_save_freq(3))
    history = model.fit(x, y, batch_size=4, epochs=3, callbacks=[backup], verbose=0)
    assert backup.restored_step == 6
    assert int(model.optimizer.iterations.numpy()) == 15  # 6 + 4 (rest of epoch 2) + 5, not 6 + 5 + 5
    assert len(history.history["loss"]) == 2  # epochs 2 (partial) and 3
    assert not (tmp_path / "backup").exists()  # removed at the end of a completed fit


def test_a_backup_kept_after_training_resumes_with_no_step_left(tmp_path):
    # The launcher keeps the backup until evaluation and export are written: a run killed in between
    # trains no further when started again.
    x, y = _data()
    model = _tiny_model()
    backup = ResumableBackupAndRestore(tmp_path / "backup", steps_per_epoch=5, delete_checkpoint=False)
    model.fit(x, y, batch_size=4, epochs=2, callbacks=[backup], verbose=0)
    trained = model.layers[0].kernel.numpy()
    model = _tiny_model()
    backup = ResumableBackupAndRestore(tmp_path / "backup", steps_per_epoch=5, delete_checkpoint=False)
    history = model.fit(x, y, batch_size=4, epochs=2, callbacks=[backup], verbose=0)
    assert backup.restored_step == 10 and history.history == {}
    assert int(model.optimizer.iterations.numpy()) == 10
    np.testing.assert_array_equal(model.layers[0].kernel.numpy(), trained)


def test_nan_epoch_is_neither_checkpointed_nor_backed_up(tmp_path):
    x, y = _data()
    model = _tiny_model()
    checkpoint = AtomicWeightsCheckpoint(tmp_path / "last.weights.h5")
    backup = ResumableBackupAndRestore(tmp_path / "backup", steps_per_epoch=5, save_freq=backup_save_freq(1),
                                       delete_checkpoint=False)
    with pytest.warns(RuntimeWarning, match="keeps the last good weights"):
        model.fit(x, y, batch_size=4, epochs=3, verbose=0,
                  callbacks=[keras.callbacks.TerminateOnNaN(), _PoisonWeights(epoch=1), backup, checkpoint])
    assert np.isnan(model.layers[0].kernel.numpy()).all()  # the model itself is ruined...
    assert checkpoint.skipped_epochs == [1]
    for path in (tmp_path / "last.weights.h5", tmp_path / "backup" / "latest.weights.h5"):
        with h5py.File(path) as saved:  # ...but the files hold the last good, finite weights of epoch 1
            kernel = saved["layers/dense/vars/0"][()]
            assert np.isfinite(kernel).all()
            assert int(saved["optimizer/vars/0"][()]) == 5
    assert json.loads((tmp_path / "backup" / "training_metadata.json").read_text())["step"] == 5
    assert not list(tmp_path.glob("*partial*")) and not list((tmp_path / "backup").glob("*partial*"))


def test_backup_frequency_flag_values():
    assert backup_save_freq(0) == "epoch" and backup_save_freq(7) == 7
    with pytest.raises(ValueError, match="integer >= 0"):
        backup_save_freq(-1)




def test_a_backup_resumes_only_under_the_settings_it_was_made_with(tmp_path):
    """A resume with a changed batch size went on silently; with a changed loss it died in a Keras traceback."""
    from kitm.errors import KitmConfigError
    from kitm.training.fault_tolerance import claim_backup

    backup = tmp_path / "run" / "backup"
    settings = {"batch_size": 16, "loss": ["infonce"], "progress": True, "run_dir": "run"}
    claim_backup(backup, settings)  # a fresh run: recorded
    assert json.loads((backup / "run_settings.json").read_text()) == settings
    claim_backup(backup, {**settings, "batch_size": 8})  # no weights backed up yet: nothing to resume, recorded anew
    assert json.loads((backup / "run_settings.json").read_text())["batch_size"] == 8
    claim_backup(backup, settings)
    (backup / "latest.weights.h5").write_bytes(b"weights")
    (backup / "training_metadata.json").write_text(json.dumps({"epoch": 1, "batch": 3, "step": 160}))
    claim_backup(backup, {**settings, "progress": False, "run_dir": "moved"}, ignored={"progress", "run_dir"})
    with pytest.raises(KitmConfigError) as error:
        claim_backup(backup, {**settings, "batch_size": 32, "loss": ["infonce", "triplet"]}, ignored={"progress"})
    assert error.value.for_flags() == (
        f"{backup.parent} holds an unfinished run (its backup at step 160) made with other settings: --batch_size: "
        "before 16, now 32; --loss: before infonce, now infonce,triplet. Resuming it under these would continue its "
        "weights and optimizer state in another run (a changed batch size moves its step into another schedule; a "
        f"changed loss has other variables). Start it again with the settings it was made with (recorded in "
        f"{backup / 'run_settings.json'}) to resume it, give a new --run_dir to train this configuration, or delete "
        f"{backup} to start over in {backup.parent}.")
    assert json.loads((backup / "run_settings.json").read_text()) == settings  # the record is kept
    assert (backup / "latest.weights.h5").read_bytes() == b"weights"


def test_a_backup_made_before_a_setting_existed_resumes_when_that_setting_has_its_default(tmp_path):
    """A setting added to kitm after the backup was made (the record lacks it) is unchanged at its default, and
    changed at any other value."""
    from kitm.errors import KitmConfigError
    from kitm.training.fault_tolerance import claim_backup

    backup = tmp_path / "run" / "backup"
    claim_backup(backup, {"batch_size": 16})  # recorded by an older kitm
    (backup / "latest.weights.h5").write_bytes(b"weights")
    defaults = {"batch_size": 128, "objective_module": []}
    claim_backup(backup, {"batch_size": 16, "objective_module": []}, defaults=defaults)
    with pytest.raises(KitmConfigError) as error:
        claim_backup(backup, {"batch_size": 16, "objective_module": ["mine"]}, defaults=defaults)
    assert "other settings: --objective_module: before (none), now mine." in error.value.for_flags()


# ---- a resumed run's history (kitm.training.epoch_history) ----------------------------------------------------
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
    assert merged_history([], {}) == {} and read_epoch_history(pathlib.Path("/nonexistent")) == []


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

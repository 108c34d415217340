"""Resuming a killed run: Keras' BackupAndRestore, resumed mid-epoch, written atomically, never NaN.

`keras.callbacks.BackupAndRestore(save_freq=n)` backs up the weights (and the optimizer's state, which
`save_weights` includes) every n steps, but Keras 3 restores only the epoch: a run killed at step k of
epoch e starts epoch e again from its first step on the step-k weights, so it runs k more steps than
asked. `ResumableBackupAndRestore` resumes at the step: the restored optimizer's `iterations` (saved in
the same file as the weights, so the two can never disagree) gives
    epoch e = iterations // steps_per_epoch,   steps already done in it k = iterations mod steps_per_epoch,
training restarts at epoch e and that epoch stops after its remaining steps_per_epoch - k steps (by
`model.stop_training`, withdrawn at the epoch's end so the following epochs run). The run thus ends after
exactly epochs x steps_per_epoch optimizer steps, as if never killed. The data of the resumed epoch is a
fresh pass of the input pipeline, not the rest of the interrupted one.

Writes are atomic: `<backup>/latest.partial.weights.h5` then a rename, then the metadata the same way,
so a kill during a backup leaves the previous backup whole. A step or epoch whose loss is NaN or infinite
is never backed up (nor checkpointed: `kitm.callbacks.checkpoint`), so a restart after
`TerminateOnNaN` resumes from the last good state. On a multi-worker non-chief, `write_dir` is its
temporary directory, while restoring reads the chief's `backup_dir` (`kitm.training.distribution`).

A backup resumes only the run that made it: `claim_backup` records the run's settings beside the backup
(`<backup>/run_settings.json`) when a run starts without one, and refuses to resume a backup made under other
settings that change the run (a changed batch size moves the restored step into another schedule; a changed loss
has other variables, which Keras met with a raw traceback), naming each changed setting.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
from collections.abc import Collection, Mapping

import keras

from kitm.callbacks.checkpoint import finite_loss
from kitm.errors import KitmConfigError, option
from kitm.files import atomic_path, write_text_atomically
from kitm.training.lora_state import ADAPTERS, restore_adapters, save_adapters

WEIGHTS = "latest.weights.h5"
METADATA = "training_metadata.json"
SETTINGS = "run_settings.json"


def claim_backup(backup_dir: str | os.PathLike, settings: Mapping[str, object],
                 ignored: Collection[str] = (), defaults: Mapping[str, object] | None = None) -> None:
    """Record `settings` beside the backup in `backup_dir`, or, when a backup is there to resume, check that it was
    made under the same settings (those in `ignored` aside: the ones that do not change what is trained, as the
    output folder or progress bars) and stop naming each one that changed (module docstring). A setting the record
    lacks (one added to kitm after the backup was made) is unchanged where it has its value in `defaults`."""
    backup_dir = pathlib.Path(backup_dir)
    path = backup_dir / SETTINGS
    wanted = json.loads(json.dumps(dict(settings), sort_keys=True, default=str))
    known = json.loads(json.dumps(dict(defaults or {}), sort_keys=True, default=str))
    if (backup_dir / WEIGHTS).is_file() and path.is_file():
        try:
            recorded = json.loads(path.read_text())
        except (OSError, ValueError):
            recorded = None
        if isinstance(recorded, dict):
            recorded = {**{name: value for name, value in known.items() if name in wanted}, **recorded}
            changed = sorted(name for name in set(recorded) | set(wanted)
                             if name not in ignored and recorded.get(name) != wanted.get(name))
            if changed:
                step = _backed_up_step(backup_dir)
                details = "; ".join(f"{option(name)}: before {_shown(recorded.get(name))}, now "
                                    f"{_shown(wanted.get(name))}" for name in changed)
                run_dir = backup_dir.parent
                raise KitmConfigError(
                    f"{run_dir} holds an unfinished run (its backup{step}) made with other settings: {details}. "
                    "Resuming it under these would continue its weights and optimizer state in another run (a "
                    "changed batch size moves its step into another schedule; a changed loss has other "
                    f"variables). Start it again with the settings it was made with (recorded in {path}) to "
                    f"resume it, give a new {option('run_dir')} to train this configuration, or delete "
                    f"{backup_dir} to start over in {run_dir}.")
            return
    backup_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomically(path, json.dumps(wanted, indent=2, sort_keys=True))


def _backed_up_step(backup_dir: pathlib.Path) -> str:
    try:
        step = json.loads((backup_dir / METADATA).read_text()).get("step")
    except (OSError, ValueError, AttributeError):
        step = None
    return f" at step {step}" if isinstance(step, int) else ""


def _shown(value) -> str:
    if isinstance(value, list):
        return ",".join(map(str, value)) or "(none)"
    return "(unset)" if value is None else str(value)


def backup_save_freq(every_steps: int):
    """Keras' `save_freq` for a backup every `every_steps` steps (0: at the end of each epoch)."""
    if isinstance(every_steps, bool) or int(every_steps) != every_steps or every_steps < 0:
        raise ValueError(f"backup every_steps must be an integer >= 0; got {every_steps!r}.")
    return int(every_steps) if every_steps else "epoch"


class ResumableBackupAndRestore(keras.callbacks.BackupAndRestore):
    """BackupAndRestore that resumes a killed run at its last backed-up step (module docstring).

    Args:
      backup_dir: where the backup is restored from (and written, without `write_dir`).
      steps_per_epoch: optimizer steps in one epoch of this run.
      save_freq: "epoch", or back up every this many steps.
      write_dir: where this process writes its backups (a multi-worker non-chief's temporary directory).
      delete_checkpoint: remove this process's backup when `fit` ends. The experiment runner passes False and
        removes it once the whole run (evaluation, export) is done, so a run killed after training resumes there.
      total_steps: the run's optimizer steps; with it, a restore prints "Resumed from the backup at step k of
        total_steps." when it happens (at the start of training).
    Attributes:
      restored_step: the optimizer step restored at the start of training (0: a fresh start).
    """

    def __init__(self, backup_dir: str | os.PathLike, *, steps_per_epoch: int, save_freq="epoch",
                 write_dir: str | os.PathLike | None = None, delete_checkpoint: bool = True,
                 total_steps: int | None = None):
        super().__init__(str(backup_dir), save_freq=save_freq, double_checkpoint=False,
                         delete_checkpoint=delete_checkpoint)
        if isinstance(steps_per_epoch, bool) or int(steps_per_epoch) != steps_per_epoch or steps_per_epoch < 1:
            raise ValueError(f"steps_per_epoch must be a positive integer; got {steps_per_epoch!r}.")
        self.steps_per_epoch = int(steps_per_epoch)
        self.write_dir = pathlib.Path(write_dir if write_dir is not None else backup_dir)
        self.restored_step = 0
        self.total_steps = total_steps
        self._partial_epoch: tuple[int, int] | None = None  # (epoch, steps left in it) after a mid-epoch restore
        self._stopped_partial_epoch = False
        self._epoch = 0

    # -- restore -----------------------------------------------------------------------------------
    def _load_model(self):
        super()._load_model()  # the weights and optimizer state, and Keras' epoch from the metadata
        if not os.path.exists(self._weights_path) or self.model.optimizer is None:
            return
        self.restored_step = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))
        restore_adapters(self.model, pathlib.Path(self.backup_dir) / ADAPTERS, self.restored_step)
        epoch, done = divmod(self.restored_step, self.steps_per_epoch)
        self.model._initial_epoch = epoch  # noqa: SLF001 (the attribute Keras' own BackupAndRestore sets)
        self._current_epoch = epoch
        self._partial_epoch = (epoch, self.steps_per_epoch - done) if done else None
        if self.restored_step and self.total_steps is not None:
            print(f"Resumed from the backup at step {self.restored_step} of {self.total_steps}.", flush=True)

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if finite_loss(logs):  # a NaN step is never backed up; TerminateOnNaN stops the run
            super().on_train_batch_end(batch, logs)
        partial = self._partial_epoch
        if partial and partial[0] == self._epoch and batch + 1 >= partial[1] and not self.model.stop_training:
            # The interrupted epoch's remaining steps are done: end this epoch (not the run, see on_epoch_end).
            self.model.stop_training = True
            self._stopped_partial_epoch = True

    def on_epoch_end(self, epoch, logs=None):
        if self._stopped_partial_epoch:
            self.model.stop_training = False
            self._stopped_partial_epoch = False
        if self._partial_epoch and self._partial_epoch[0] == epoch:
            self._partial_epoch = None
        if finite_loss(logs):  # else keep the last good backup (TerminateOnNaN ends the run)
            super().on_epoch_end(epoch, logs)

    # -- backup ------------------------------------------------------------------------------------
    def _save_model(self):
        """Weights (with the optimizer), LoRA adapters where there are any (kitm.training.lora_state), then
        metadata, each under a temporary name and renamed."""
        with atomic_path(self.write_dir / WEIGHTS, keep_suffix=".weights.h5") as partial:
            self.model.save_weights(str(partial), overwrite=True)
        step = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations)) if self.model.optimizer else None
        save_adapters(self.model, self.write_dir / ADAPTERS, step)
        write_text_atomically(self.write_dir / METADATA,
                              json.dumps({"epoch": self._current_epoch, "batch": self._last_batch_seen, "step": step}))

    def on_train_end(self, logs=None):
        # Only this process's own backup: a non-chief must not remove the chief's.
        if self.delete_checkpoint and self.write_dir.exists():
            shutil.rmtree(self.write_dir, ignore_errors=True)

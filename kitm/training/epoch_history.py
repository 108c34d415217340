"""A resumed run's history: the epochs' logs kept beside the backup, so that summary.json has every epoch.

Keras' History callback holds only the epochs of the current `fit`. A run killed and resumed from its backup
(`kitm.training.fault_tolerance`) therefore used to report only the epochs after the restore, and a run killed after
training (while it scored the test split or exported) none at all: its history, its final training metrics and the
collapse monitor's last statistic were empty, and a study's collapse rule could not read them.

`EpochHistoryBackup` writes every finished epoch's logs (numbers only, the validation figures included when it runs
after the callbacks that add them) to `<backup>/epoch_history.json`, a list whose entry e is epoch e's logs, under a
temporary name and renamed. At the start of a resumed fit it reads back the entries of the epochs before the one the
backup restores into (epoch e = restored step // steps per epoch; an epoch interrupted in the middle is run again
from its restored step and recorded anew), as `earlier`. The file goes with the backup when the run ends.

`merged_history(earlier, history)` puts them before this fit's `History.history`, key by key, as one uninterrupted
fit would have recorded them (a key absent from an epoch, as a validation figure on the epochs without validation,
adds nothing for that epoch).
"""

from __future__ import annotations

import pathlib

import keras

from kitm.files import read_json, write_json_atomically

HISTORY = "epoch_history.json"


def _numbers(logs) -> dict[str, float]:
    """The logs' numeric values as floats (written as strict JSON: a non-finite value becomes null)."""
    values = {}
    for key, value in (logs or {}).items():
        try:
            values[str(key)] = float(value)
        except (TypeError, ValueError):
            continue
    return values


def read_epoch_history(path: pathlib.Path) -> list[dict]:
    """The entries of an epoch_history.json; [] when it is missing or unreadable (a backup made before kitm kept
    one)."""
    entries = read_json(path)
    return [entry for entry in entries if isinstance(entry, dict)] if isinstance(entries, list) else []


class EpochHistoryBackup(keras.callbacks.Callback):
    """Args:
      backup: the run's `ResumableBackupAndRestore` (placed before this callback: it restores first, and its
        `restored_step`, `steps_per_epoch`, `backup_dir` and `write_dir` say what to read and where to write).
    Attributes:
      earlier: after the start of training, the logs of the epochs before the restored one ([] on a fresh start).
    """

    def __init__(self, backup):
        super().__init__()
        self.backup = backup
        self.earlier: list[dict] = []
        self._epochs: list[dict] = []

    def on_train_begin(self, logs=None):
        # A plain Keras BackupAndRestore (the semantic centres' phases each have their own) restores no step here.
        restored_step = getattr(self.backup, "restored_step", 0)
        restored_epoch = restored_step // self.backup.steps_per_epoch if restored_step else 0
        saved = read_epoch_history(pathlib.Path(self.backup.backup_dir) / HISTORY) if restored_epoch else []
        self.earlier = saved[:restored_epoch]
        self._epochs = list(self.earlier)

    def on_epoch_end(self, epoch, logs=None):
        del self._epochs[epoch:]
        self._epochs += [{}] * (epoch - len(self._epochs))  # epochs the saved file lacked (a kill between writes)
        self._epochs.append(_numbers(logs))
        write_dir = getattr(self.backup, "write_dir", self.backup.backup_dir)
        write_json_atomically(pathlib.Path(write_dir) / HISTORY, self._epochs, indent=None)


def merged_history(earlier: list[dict], history: dict[str, list]) -> dict[str, list]:
    """`earlier` epochs' logs before this fit's History.history (module docstring)."""
    merged: dict[str, list] = {}
    for entry in earlier:
        for key, value in entry.items():
            merged.setdefault(key, []).append(float("nan") if value is None else value)
    for key, values in history.items():
        merged.setdefault(key, []).extend(values)
    return merged

"""Weights after every epoch, written atomically (a temporary file, then a rename)."""

from __future__ import annotations

import os
import pathlib

import keras


class AtomicWeightsCheckpoint(keras.callbacks.Callback):
    """Save `model.save_weights` to `path` (ending in .weights.h5) at the end of every epoch.

    Keras' ModelCheckpoint writes in place, so a job killed mid-write leaves a broken file under the final
    name; here the file is written as `<stem>.partial.weights.h5` and renamed, so `path` always holds a
    complete set of weights.
    """

    def __init__(self, path: str | os.PathLike):
        super().__init__()
        self.path = pathlib.Path(path)
        if not self.path.name.endswith(".weights.h5"):
            raise ValueError(f"Checkpoint path must end in .weights.h5; got {self.path}.")
        self.partial = self.path.with_name(self.path.name[: -len(".weights.h5")] + ".partial.weights.h5")

    def on_epoch_end(self, epoch, logs=None):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.model.save_weights(str(self.partial))
        os.replace(self.partial, self.path)

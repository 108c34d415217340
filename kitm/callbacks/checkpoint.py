"""Weights after every epoch, written atomically (a temporary file, then a rename), never NaN weights."""

from __future__ import annotations

import math
import os
import pathlib
import warnings

import keras
from keras import ops

from kitm.files import atomic_path


def finite_loss(logs) -> bool:
    """False when the logs hold a loss that is NaN or infinite (no loss logged counts as finite)."""
    loss = (logs or {}).get("loss")
    return loss is None or math.isfinite(float(loss))


def finite_weights(model) -> bool:
    """True when every trainable weight is finite (one reduction per variable, no copy to the host)."""
    checks = [ops.all(ops.isfinite(v)) for v in model.trainable_variables
              if "float" in keras.backend.standardize_dtype(v.dtype)]
    return bool(ops.convert_to_numpy(ops.all(ops.stack(checks)))) if checks else True


class AtomicWeightsCheckpoint(keras.callbacks.Callback):
    """Save `model.save_weights` to `path` (ending in .weights.h5) at the end of every epoch.

    Keras' ModelCheckpoint writes in place, so a job killed mid-write leaves a broken file under the final
    name; here the file is written as `<stem>.partial.weights.h5` and renamed, so `path` always holds a
    complete set of weights. An epoch whose loss is NaN or infinite, or that left a non-finite weight
    (`keras.callbacks.TerminateOnNaN` stops training within it), is not saved: `path` keeps the last good
    weights. `skipped_epochs` lists the epochs (0-based) not saved.
    """

    def __init__(self, path: str | os.PathLike):
        super().__init__()
        self.path = pathlib.Path(path)
        if not self.path.name.endswith(".weights.h5"):
            raise ValueError(f"Checkpoint path must end in .weights.h5; got {self.path}.")
        self.skipped_epochs: list[int] = []

    def on_epoch_end(self, epoch, logs=None):
        if not (finite_loss(logs) and finite_weights(self.model)):
            self.skipped_epochs.append(epoch)
            kept = f"{self.path} keeps the last good weights" if self.path.exists() else "nothing saved"
            warnings.warn(f"Epoch {epoch + 1}: the loss or the weights are not finite (loss "
                          f"{(logs or {}).get('loss')}); {kept}.", RuntimeWarning, stacklevel=2)
            return
        with atomic_path(self.path, keep_suffix=".weights.h5") as partial:
            self.model.save_weights(str(partial))

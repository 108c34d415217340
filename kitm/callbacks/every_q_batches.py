"""The base of the callbacks that act on a loss every q training batches (adaptive margins, ladder re-clustering).

Both read statistics that their loss accumulates in the training step, act on them every `every_batches` batches
(`update`), log each update to the epoch logs and, with `log_dir`, as tf.summary scalars at its training step.
Their arithmetic runs on every Keras backend (variables read with `to_numpy`, written with `assign`); only the
summary writer is TensorFlow's (TensorBoard's event files), imported when `log_dir` is given.
This class holds the plumbing they share:
- finding the loss among a `DualEncoder`'s `loss_functions` when none is given, and the name its terms are logged
  under (its `compile(losses=...)` key);
- counting training steps from `on_train_batch_end(batch)` indices, so that `steps_per_execution > 1` (one call
  per several steps) still counts every step;
- keeping validation out of the window: a validation run inside `fit` evaluates the loss too, so the window's state
  is saved at `on_test_begin` and restored at `on_test_end`;
- the summary writer.
A subclass sets `loss_type` and implements `update()`, and the window hooks `reset_window`, `window_state`,
`restore_window` and `epoch_logs`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import keras
import numpy as np
from keras import ops

__all__ = ["EveryQBatchesCallback", "BatchCounter", "find_loss", "log_name", "to_numpy"]


def to_numpy(value) -> np.ndarray:
    """A variable or tensor of the Keras backend (or a TensorFlow one, e.g. from a tf.data-side helper) as numpy."""
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, keras.Variable) or ops.is_tensor(value):
        return np.asarray(ops.convert_to_numpy(value))
    return np.asarray(value.numpy() if hasattr(value, "numpy") else value)


def find_loss(model, loss, kind, callback_name: str):
    """`loss` if given, else the single loss of type `kind` among a DualEncoder's `loss_functions`."""
    if loss is not None:
        return loss
    candidates = [l for l in getattr(model, "loss_functions", {}).values() if isinstance(l, kind)]
    if len(candidates) != 1:
        raise ValueError(f"{callback_name} needs a {kind.__name__}: pass loss=... or compile the model with exactly "
                         f"one (found {len(candidates)} among {list(getattr(model, 'loss_functions', {}))}).")
    return candidates[0]


def log_name(model, loss) -> str:
    """The name the model logs the loss's terms under (its `compile(losses=...)` key), else `loss.name`."""
    for name, candidate in getattr(model, "loss_functions", {}).items():
        if candidate is loss:
            return name
    return loss.name


class BatchCounter:
    """Counts training steps from `on_train_batch_end(batch)` indices (one call may stand for several steps)."""

    def __init__(self):
        self.total = 0
        self.since_update = 0
        self._last = -1

    def epoch_begin(self) -> None:
        self._last = -1

    def batch_end(self, batch: int) -> int:
        steps = max(int(batch) - self._last, 1)
        self._last = int(batch)
        self.total += steps
        self.since_update += steps
        return steps


def sync_model_state(model) -> None:
    """Bring the model's variables up to date before a callback reads or sets a loss's state between batches.

    Keras' JAX trainer keeps the variables' values inside fit's stateless loop and writes them back at epoch end
    (`jax_state_sync`); after a sync its next step reads the variables again, so what the callback assigns is what
    the step sees. The other backends update the variables in place (nothing to do)."""
    sync = getattr(model, "jax_state_sync", None)
    if callable(sync):
        sync()


def positive_int(name: str, value) -> int:
    if isinstance(value, bool) or int(value) != value or int(value) < 1:
        raise ValueError(f"{name} must be a positive integer; got {value!r}.")
    return int(value)


class EveryQBatchesCallback(keras.callbacks.Callback):
    """Calls `update()` every `every_batches` training batches on `self.loss` (module docstring).

    Args:
      loss: the loss to drive; None finds the one of type `loss_type` in `model.loss_functions`.
      every_batches: q.
      log_dir: optional directory for tf.summary scalars at each update.
      verbose: 1 prints each update.
    `updates` keeps every update's record (a dict with "step").
    """

    loss_type: type = object

    def __init__(self, loss=None, *, every_batches: int = 500, log_dir: str | None = None, verbose: int = 0):
        super().__init__()
        self.loss = loss
        self.every_batches = positive_int("every_batches", every_batches)
        self.log_dir = log_dir
        self.verbose = int(verbose)
        self.counter = BatchCounter()
        self.updates: list[dict] = []
        self._writer = None
        self._saved_window = None

    # -- for subclasses ----------------------------------------------------------------------------
    def check_loss(self, loss) -> None:
        """Raise if `loss` cannot be driven (found or given)."""

    def update(self) -> dict:
        """Act on the statistics of the last q batches; returns the update's record (each subclass defines it:
        AdaptiveMarginCallback's Eq. 13, LadderReclusterCallback's re-clustering)."""
        raise NotImplementedError(f"{type(self).__name__} derives from EveryQBatchesCallback without an update().")

    def reset_window(self) -> None:
        """Forget the statistics gathered so far (at the start of training)."""

    def window_state(self):
        """A copy of the statistics gathered since the last update (saved around validation)."""

    def restore_window(self, state) -> None:
        """Put back `window_state()`'s copy."""

    def epoch_logs(self) -> Mapping[str, float]:
        """Entries (without the loss's name) for the epoch logs."""
        return {}

    def write_scalars(self, record: Mapping[str, float], keys=None) -> None:
        """`record`'s finite values (those in `keys`, else all but "step") as scalars `<name>/<key>` at its step."""
        if self._writer is None:
            return
        import tensorflow as tf  # a writer exists: log_dir was given, TensorFlow is there

        name = log_name(self.model, self.loss)
        with self._writer.as_default(step=record["step"]):
            for key in keys or [key for key in record if key != "step"]:
                value = record[key]
                if value is not None and math.isfinite(value):
                    tf.summary.scalar(f"{name}/{key}", value)
        self._writer.flush()

    # -- Keras hooks -------------------------------------------------------------------------------
    def on_train_begin(self, logs=None):
        self.loss = find_loss(self.model, self.loss, self.loss_type, type(self).__name__)
        self.check_loss(self.loss)
        if self.log_dir and self._writer is None:
            import tensorflow as tf  # TensorBoard's event files: TensorFlow's job, only with log_dir

            self._writer = tf.summary.create_file_writer(self.log_dir)
        self.reset_window()
        self.counter.since_update = 0

    def on_epoch_begin(self, epoch, logs=None):
        self.counter.epoch_begin()

    def on_train_batch_end(self, batch, logs=None):
        self.counter.batch_end(batch)
        if self.counter.since_update >= self.every_batches:
            sync_model_state(self.model)
            self.update()
            self.counter.since_update = 0

    def on_test_begin(self, logs=None):
        if self.loss is not None:
            self._saved_window = self.window_state()

    def on_test_end(self, logs=None):
        if self.loss is not None and self._saved_window is not None:
            self.restore_window(self._saved_window)
            self._saved_window = None

    def on_epoch_end(self, epoch, logs=None):
        if logs is None or self.loss is None:
            return
        name = log_name(self.model, self.loss)
        logs.update({f"{name}/{key}": value for key, value in self.epoch_logs().items()})

    def on_train_end(self, logs=None):
        if self._writer is not None:
            self._writer.close()
            self._writer = None

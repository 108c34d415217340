"""A callback that embeds (validation, the projector) run against a process-local copy of the trained model.

Across JAX processes (`--strategy=multi_worker` on JAX, `kitm.distribute.processes`) the model's variables span
every process's devices, and a computation on them is one that every process must join: the chief alone cannot
embed the validation split with them (JAX refuses to fetch an array that spans another process's devices). Each
process therefore builds a copy of the model on its own devices (the same construction, so the same random draws
everywhere), and `OnLocalCopy` hands that copy to the wrapped callback, refreshed with the trained weights (every
process holds them whole: data parallelism replicates the variables) before each of its epoch-end and train-end
events. On one process no copy is made and the callbacks see the model itself.
"""

from __future__ import annotations

import keras


class OnLocalCopy(keras.callbacks.Callback):
    """Run `inner` with `local_copy` as its model, `local_copy` holding the trained model's weights whenever
    `inner` may read them (module docstring)."""

    def __init__(self, inner: keras.callbacks.Callback, local_copy: keras.Model):
        super().__init__()
        self.inner, self.local_copy = inner, local_copy

    def set_model(self, model):
        super().set_model(model)
        self.inner.set_model(self.local_copy)

    def set_params(self, params):
        super().set_params(params)
        self.inner.set_params(params)

    def refresh(self) -> None:
        """The trained model's weights into the copy."""
        self.local_copy.set_weights(self.model.get_weights())

    def on_train_begin(self, logs=None):
        self.inner.on_train_begin(logs)

    def on_epoch_begin(self, epoch, logs=None):
        self.inner.on_epoch_begin(epoch, logs)

    def on_epoch_end(self, epoch, logs=None):
        self.refresh()
        self.inner.on_epoch_end(epoch, logs)  # the same logs: the figures it adds reach TensorBoard

    def on_train_end(self, logs=None):
        self.refresh()
        self.inner.on_train_end(logs)

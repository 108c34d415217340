"""DualEncoder's training step on each backend, chosen here (the model holds no backend branch).

- TensorFlow: kitm's own step (`tensorflow_step`: one tape, each optimizer group applied; gradient caching,
  `grad_cache`; logs Keras can reduce across workers, `reducible_logs`).
- JAX: Keras' trainer, or `keras_trainers.jax_train_step` where losses train variables of their own with optimizers
  of their own; the refusals of what the backend cannot do run when the step is traced.
- PyTorch: Keras' trainer, after clearing the gradients of the losses' variables, which are no torch module
  parameters (Keras' step clears those of the module's parameters only, so the losses' would add up).
"""

from __future__ import annotations

from kitm.distribute.backend import backend_name
from kitm.distribute.steps.keras_trainers import (jax_train_step, loss_optimizer_groups, loss_state,
                                                  loss_step_counter, refuse_tensorflow_only,
                                                  with_loss_step_callback)
from kitm.distribute.steps.tensorflow_step import tensorflow_gradients, tensorflow_train_step

__all__ = ["train_step", "tensorflow_gradients", "refuse_tensorflow_only", "loss_optimizer_groups", "loss_state",
           "loss_step_counter", "with_loss_step_callback"]


def train_step(model, args, keras_step):
    """One training step of `model` (a DualEncoder) on the active backend; `keras_step` is Keras' own
    `train_step` of the backend's trainer (the model's `super().train_step`)."""
    backend = backend_name()
    if backend == "tensorflow":
        return tensorflow_train_step(model, *args)
    if backend == "jax":
        # Traced once per compiled step: a keras.distribution set after compile is checked here too.
        refuse_tensorflow_only(model.loss_functions, model.grad_cache_chunk)
        if getattr(model, "_loss_optimizer_groups", None):
            return jax_train_step(model, *args)
    if backend == "torch":
        for variable in getattr(model, "_loss_variables", ()):
            variable.value.grad = None
    return keras_step(*args)

"""What DualEncoder needs on the backends whose training step is Keras' own (JAX, PyTorch), not kitm's TensorFlow step.

- `refuse_tensorflow_only`: `compile` refuses, naming the backend, what only the TensorFlow step does (gradient
  caching; losses with optimizers of their own on PyTorch; tf.distribute's gather there) and the negatives a
  backend cannot give.
- Loss state on JAX. Keras' JAX trainer runs a stateless step: it threads the model's trainable, non-trainable,
  optimizer and metric variables through the compiled function and writes them back at the end of each epoch
  (`jax_state_sync`). A loss's own state (an adaptive margin and its counts, the re-clusterable ladder's thresholds
  and relevance sample, its random draws' seeds: each loss's `non_trainable_variables`) is none of these, so its
  updates inside the step would be lost; `loss_state` lists it for `DualEncoder.non_trainable_variables`, which the
  trainer threads. Callbacks that read or set it between batches sync first (kitm.callbacks.every_q_batches).
- Losses that train variables of their own with optimizers of their own (`optimizer_groups()`: the semantic
  centres, the quantizer, the image-index heads; kitm.losses.centers): on JAX those variables and their optimizers'
  variables travel with the losses' state, and `jax_train_step` takes one gradient of the loss with respect to the
  model's weights and to them, and applies the model's optimizer to the first and each loss's optimizer to its own
  group (`stateless_apply`), as TensorFlow's step applies each group's optimizer (kitm.models.dual_encoder).
- The hardest-negative warm-up (kitm.losses.base) reads the training step. Inside the JAX step the optimizer's
  `iterations` cannot be read (Keras hands the optimizer's variables to the update only, and purges their values
  during fit), so on JAX the losses count a model variable of their own (`loss_step_counter`), incremented by
  `DualEncoder.compute_loss` in each training step and set from the optimizer's count when fit starts (after a
  BackupAndRestore restored it), so that a resumed run continues the warm-up where it stopped.
"""

from __future__ import annotations

import keras
from keras import ops

from kitm.distribute.backend import backend_name, on_jax
from kitm.distribute.replicas import data_parallel_devices


def refuse_tensorflow_only(losses, grad_cache_chunk) -> None:
    """compile on JAX / PyTorch: the training features whose step is TensorFlow's only, and the negatives the
    backend cannot give (kitm.models.dual_encoder's docstring, "Backends")."""
    backend = backend_name()
    if grad_cache_chunk:
        raise NotImplementedError(
            f"grad_cache_chunk={grad_cache_chunk}: gradient caching is implemented on the TensorFlow backend only, "
            f"not on the {backend} backend; use grad_cache_chunk=0 or KERAS_BACKEND=tensorflow.")
    for name, loss in losses.items():
        if getattr(loss, "optimizer_groups", None) is not None and backend != "jax":
            raise NotImplementedError(
                f"The loss {name!r} ({type(loss).__name__}) trains variables of its own with optimizers of its "
                f"own (optimizer_groups), which DualEncoder supports on the TensorFlow and JAX backends, not on the "
                f"{backend} backend; train it with KERAS_BACKEND=tensorflow or jax.")
        if getattr(loss, "global_negatives", False) and backend != "jax":
            raise NotImplementedError(
                f"The loss {name!r} ({type(loss).__name__}) has negatives='global': supported on the TensorFlow "
                f"backend (a tf.distribute gather) and on JAX (keras.distribution, the loss over the global "
                f"array), not on the {backend} backend; use negatives='local' or KERAS_BACKEND=tensorflow / jax.")
    devices = data_parallel_devices()
    for name, loss in losses.items():
        # Under keras.distribution the loss runs once over the global batch (XLA shards its arithmetic), so
        # every anchor meets the whole global batch: "local" (a device's own rows) would silently be "global".
        if devices > 1 and getattr(loss, "supports_global_negatives", False) and not loss.global_negatives:
            raise NotImplementedError(
                f"The loss {name!r} ({type(loss).__name__}) has negatives='local' (each replica's own rows), but "
                f"on the {backend} backend keras.distribution splits the batch over {devices} devices while the "
                f"loss runs once over the global batch, whose rows are all its negatives: per-device negatives "
                f"are not implemented there. Use negatives='global' (the step of one device with the whole "
                f"global batch), or KERAS_BACKEND=tensorflow with a tf.distribute strategy for per-replica "
                f"negatives.")


def loss_step_counter(losses, optimizer):
    """On JAX, with a loss that has a hardest-negative warm-up: a non-trainable integer variable holding the
    optimizer's step count (module docstring); None elsewhere (the losses read `optimizer.iterations`)."""
    if not on_jax() or not any(getattr(loss, "hardest_warmup_steps", 0)
                                                   for loss in losses.values()):
        return None
    iterations = optimizer.iterations
    return keras.Variable(ops.convert_to_numpy(iterations), trainable=False, dtype=iterations.dtype,
                          name="loss_training_step")


def loss_optimizer_groups(losses) -> list:
    """On JAX, every loss's `[(optimizer, variables)]` (`optimizer_groups()`, its optimizers built); [] elsewhere."""
    if not on_jax():
        return []
    groups = []
    for loss in losses.values():
        owned = getattr(loss, "optimizer_groups", None)
        for optimizer, variables in (owned() if owned is not None else ()):
            if not optimizer.built:
                optimizer.build(variables)
            groups.append((optimizer, list(variables)))
    return groups


def loss_state(losses, counter=None, groups=()) -> list:
    """On JAX, the variables the losses read and update in a step (their `non_trainable_variables`, the step
    counter, their own trainable groups and those groups' optimizers' variables), once each; [] elsewhere, where
    the variables are updated in place."""
    if not on_jax():
        return []
    state = [counter] if counter is not None else []
    for loss in losses.values():
        state += [v for v in getattr(loss, "non_trainable_variables", ()) if isinstance(v, keras.Variable)]
    for optimizer, variables in groups:
        state += list(variables) + list(optimizer.variables)
    return list({id(v): v for v in state}.values())


def jax_train_step(model, state, data):
    """Keras' JAX `train_step` (keras.src.backend.jax.trainer), extended to the losses' own optimizer groups
    (module docstring): their variables ride in the non-trainable state, the gradient is taken with respect to the
    model's trainable variables and to them at once, and each group's optimizer applies its part."""
    import jax

    trainable, non_trainable, optimizer_variables, metrics_variables = state
    x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
    position = {id(v): i for i, v in enumerate(model.non_trainable_variables)}
    groups = model._loss_optimizer_groups
    owned = [[position[id(v)] for v in variables] for _, variables in groups]
    slots = [[position[id(v)] for v in optimizer.variables] for optimizer, _ in groups]

    def loss_and_updates(trainable, owned_values, non_trainable):
        non_trainable = list(non_trainable)
        for indices, values in zip(owned, owned_values):
            for index, value in zip(indices, values):
                non_trainable[index] = value
        return model.compute_loss_and_updates(trainable, non_trainable, metrics_variables, x, y, sample_weight,
                                              training=True, optimizer_variables=optimizer_variables)

    owned_values = [[non_trainable[index] for index in indices] for indices in owned]
    (_, aux), (gradients, owned_gradients) = jax.value_and_grad(loss_and_updates, argnums=(0, 1), has_aux=True)(
        trainable, owned_values, non_trainable)
    unscaled_loss, y_pred, non_trainable, metrics_variables = aux
    non_trainable = list(non_trainable)
    trainable, optimizer_variables = model.optimizer.stateless_apply(optimizer_variables, gradients, trainable)
    for (optimizer, _), indices, slot_indices, group_gradients in zip(groups, owned, slots, owned_gradients):
        values, slot_values = optimizer.stateless_apply([non_trainable[i] for i in slot_indices], group_gradients,
                                                        [non_trainable[i] for i in indices])
        for index, value in zip([*indices, *slot_indices], [*values, *slot_values]):
            non_trainable[index] = value
    logs, metrics_variables = model._update_metrics_variables(metrics_variables, unscaled_loss, x, y, y_pred,
                                                              sample_weight)
    return logs, (trainable, non_trainable, optimizer_variables, metrics_variables)


class LossStepFromOptimizer(keras.callbacks.Callback):
    """Sets the losses' step counter to the optimizer's count when training starts; the last callback of `fit`, so
    that it reads the count a BackupAndRestore or a checkpoint restore put back."""

    def on_train_begin(self, logs=None):
        counter = self.model._loss_step_counter
        # A copy: JAX's step donates its arguments' buffers, and one buffer may not be donated twice.
        counter.assign(ops.copy(ops.cast(self.model.optimizer.iterations, counter.dtype)))


def with_loss_step_callback(args, kwargs):
    """`fit`'s (args, kwargs) with `LossStepFromOptimizer` appended to its callbacks (given by keyword or, sixth,
    by position: x, y, batch_size, epochs, verbose, callbacks)."""
    if len(args) > 5:
        args = list(args)
        args[5] = [*(args[5] or []), LossStepFromOptimizer()]
        return tuple(args), kwargs
    return args, {**kwargs, "callbacks": [*(kwargs.get("callbacks") or []), LossStepFromOptimizer()]}

"""DualEncoder's training step on TensorFlow: one gradient tape over the weighted total, each optimizer group applied.

The model's optimizer updates the model's weights (and the variables losses hand it); each loss that owns
parameters (`optimizer_groups()`) has its own optimizer applied to its own group, all from one tape. Under a
`tf.distribute` strategy every optimizer all-reduces its gradients across replicas, as the model's does. Under a
LossScaleOptimizer (mixed_float16; any optimizer with a `loss_scale_factor`) the model's weights take the scaled
loss's gradients and the loss-owned groups, reached through float32 ops only, the unscaled loss's, from the same
(then persistent) tape. A gradient TensorFlow gives as slices (an embedding table's) is summed per row first, so
that clipping and Adam see the gradient the other engines see (`_summed_rows`). With `grad_cache_chunk` the
gradients come from gradient caching (`kitm.distribute.steps.grad_cache`). kitm.models.dual_encoder's docstring has
the whole step.
"""

from __future__ import annotations

import keras

from kitm.distribute.steps.grad_cache import cached_gradients
from kitm.distribute.steps.reducible_logs import keras_reducible_logs

__all__ = ["tensorflow_train_step", "tensorflow_gradients"]


def tensorflow_gradients(model, x, y=None, sample_weight=None):
    """This replica's gradients of the training step, before the optimizers sum them over replicas and apply
    them: (groups [(optimizer, variables)], gradients [one list per group], total loss, y_pred)."""
    taken = cached_gradients if model.grad_cache_chunk else _taped_gradients
    groups, gradients, total, y_pred = taken(model, x, y, sample_weight)
    return groups, [[_summed_rows(gradient) for gradient in group] for group in gradients], total, y_pred


def _taped_gradients(model, x, y, sample_weight):
    """`tensorflow_gradients` from one tape over the whole batch (no gradient caching)."""
    import tensorflow as tf

    scaling = model._loss_scaling()
    with tf.GradientTape(persistent=scaling) as tape:
        y_pred = model(x, training=True)
        total = model.compute_loss(x, y, y_pred, sample_weight, training=True)
        scaled = model.optimizer.scale_loss(total)
    # After the forward pass: without a strategy Keras builds an unbuilt model during the first call.
    groups = model._optimizer_groups()
    if scaling:
        gradients = [tape.gradient(scaled if optimizer is model.optimizer else total, variables)
                     for optimizer, variables in groups]
        del tape
    else:
        flat = tape.gradient(total, [v for _, variables in groups for v in variables])
        gradients, start = [], 0
        for _, variables in groups:
            gradients.append(flat[start:start + len(variables)])
            start += len(variables)
    return groups, gradients, total, y_pred


def _summed_rows(gradient):
    """A gradient TensorFlow hands over as slices (`tf.IndexedSlices`: an embedding table's, one slice per token
    occurrence) as the dense gradient it stands for, each row the sum of its slices, the gradient JAX and PyTorch
    compute. Keras' optimizers would otherwise read the slices one by one: the global norm of `global_clipnorm`
    sums their squares and Adam's second moment adds each slice's square, sum_i g_i^2 for a word met n times where
    the gradient's square is (sum_i g_i)^2 (measured: the table's second moment 160% off after 3 steps, every
    weight's clipping factor 5% off; docs/backends.md, "The same step on every engine"). Adam updates every row of
    the table each step either way (its moments decay where the gradient is zero), so the dense gradient costs one
    table-sized buffer and no extra pass."""
    import tensorflow as tf

    return tf.convert_to_tensor(gradient) if isinstance(gradient, tf.IndexedSlices) else gradient


def tensorflow_train_step(model, data):
    """One training step (module docstring); the logs in the shape Keras can reduce across workers."""
    import tensorflow as tf

    x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
    groups, gradients, total, y_pred = model.compute_gradients(x, y, sample_weight)
    for (optimizer, variables), group in zip(groups, gradients):
        optimizer.apply_gradients(zip(group, variables))
    # Keras logs the loss summed over replicas; compute_loss divided it by their number.
    replicas = tf.distribute.get_strategy().num_replicas_in_sync
    model._loss_tracker.update_state(total * replicas, sample_weight=tf.shape(tf.nest.flatten(x)[0])[0])
    return keras_reducible_logs(model.compute_metrics(x, y, y_pred, sample_weight=sample_weight))

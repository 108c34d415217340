"""Adam (and decoupled weight decay, AdamW) whose update of each variable is TensorFlow's fused Adam kernel.

Keras' Adam updates a variable in several TensorFlow ops (the two moment updates, the square root, the division,
the subtraction, and with weight decay a separate pass beforehand), each a full read and write of the variable's
size. Over the 151 M weights of a CLIP ViT-B/32 that took 1.44x the time of PyTorch's AdamW on two CPU threads
(docs/performance.md). Here each variable's step is TensorFlow's own fused kernel (`ResourceApplyAdam`, the one
TensorFlow's v1 optimizers use: one multithreaded pass over the weights, the two moments and the gradient), after
the decay's one pass where there is decay:

    w <- w - w * wd * lr                                   (decoupled weight decay, Loshchilov & Hutter; if wd > 0)
    m <- m + (g - m) (1 - beta_1)
    v <- v + (g^2 - v) (1 - beta_2)
    w <- w - (m * lr * sqrt(1 - beta_2^t) / (1 - beta_1^t)) / (sqrt(v) + eps)

the formula and order of `keras.optimizers.Adam` / `AdamW` (variables excluded from weight decay stay excluded;
with per-tower rates the decay uses the tower's rate, as PyTorch's parameter groups do, where Keras' AdamW decays
every variable at the global rate). A gradient given as slices (`tf.IndexedSlices`, an embedding table's) is summed
per row first, the gradient it stands for, as JAX and PyTorch compute it (Keras' own update would add each slice's
square to the second moment; kitm's TensorFlow step sums the rows before clipping already, and this keeps a
FusedAdam used elsewhere to the same update: docs/backends.md, "The same step on every engine"). The
kernel forms 1 - beta in float32 where Keras rounds it from Python's double (0.100000024 against 0.1 for
beta_1 = 0.9), so the weights agree with Keras' Adam to float rounding, not bit for bit: a run trained with the fused
update does not repeat a run trained with Keras' update to the last bit. It is the launcher's default on TensorFlow
(`fused_update`, docs/performance.md); runs trained before it repeat with `--fused_update=false`.
"""

from __future__ import annotations

import keras
import tensorflow as tf


def _fused_adam(variable, momentum, velocity, gradient, learning_rate, step, beta_1, beta_2, epsilon):
    tf.raw_ops.ResourceApplyAdam(var=variable.handle, m=momentum.handle, v=velocity.handle,
                                 beta1_power=tf.pow(beta_1, step), beta2_power=tf.pow(beta_2, step), lr=learning_rate,
                                 beta1=beta_1, beta2=beta_2, epsilon=epsilon, grad=tf.cast(gradient, variable.dtype))


@keras.saving.register_keras_serializable(package="kitm")
class FusedAdam(keras.optimizers.Adam):
    """`keras.optimizers.Adam` (with `weight_decay`: AdamW) updating each variable with TensorFlow's fused kernel.

    TensorFlow backend only; not with `amsgrad`. Its slots are Adam's, so checkpoints move between the two.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.amsgrad:
            raise ValueError("FusedAdam does not implement amsgrad; use keras.optimizers.Adam(amsgrad=True).")

    def _apply_weight_decay(self, variables):
        """Nothing here: `update_step` decays each variable just before its Adam step (at the tower's rate)."""

    def update_step(self, gradient, variable, learning_rate):
        dtype = variable.dtype
        weights = _tf_variable(variable)
        if self.weight_decay and self._use_weight_decay(variable):  # Keras' decay, in its order of the products
            weights.assign_sub(weights * tf.cast(self.weight_decay, dtype) * tf.cast(learning_rate, dtype))
        if isinstance(gradient, tf.IndexedSlices):  # one slice per token occurrence: their sum per row (docstring)
            gradient = tf.convert_to_tensor(gradient)
        index = self._get_variable_index(variable)
        _fused_adam(weights, _tf_variable(self._momentums[index]), _tf_variable(self._velocities[index]), gradient,
                    tf.cast(learning_rate, dtype), tf.cast(self.iterations + 1, dtype), tf.cast(self.beta_1, dtype),
                    tf.cast(self.beta_2, dtype), tf.cast(self.epsilon, dtype))


def _tf_variable(variable):
    return variable.value if isinstance(variable, keras.Variable) else variable

"""The learnable logit scale exp(t) of CLIP and SigLIP (and SigLIP's bias b) as a Keras layer, with the number checks
the contrastive losses share (kitm.losses.contrastive; docs/methods.md#contrastive)."""

from __future__ import annotations

import math

import keras
from keras import ops


def _at_most(value, cap):
    """min(value, cap) with the gradient of `tf.minimum` (to `value` where value <= cap), in value's dtype: Keras'
    PyTorch backend computes `ops.minimum` of float64 in float32."""
    cap = ops.convert_to_tensor(cap, dtype=value.dtype)  # not ops.cast: a Python float goes through float32 on TF
    return ops.where(value <= cap, value, cap)


def _positive_number(name: str, value, allow_none: bool = False) -> float | None:
    if value is None and allow_none:
        return None
    if value is None or isinstance(value, bool):
        raise ValueError(f"{name} must be a positive number; got {value!r}.")
    value = float(value)
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a positive finite number; got {value}.")
    return value


def _finite_number(name: str, value) -> float:
    if value is None or isinstance(value, bool):
        raise ValueError(f"{name} must be a number; got {value!r}.")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite; got {value}.")
    return value


class _AtMost(keras.constraints.Constraint):
    """Clip a variable at `value` (applied by Keras optimizers after each step)."""

    def __init__(self, value: float):
        self.value = float(value)

    def __call__(self, w):
        return _at_most(ops.convert_to_tensor(w), self.value)

    def get_config(self):
        return {"value": self.value}


@keras.saving.register_keras_serializable(package="kitm")
class LogitScale(keras.layers.Layer):
    """The learnable logit scale exp(t), optionally clipped, and optionally a learnable bias b.

    Weights: `logit_scale_log` (t, initialised at log(initial_scale)) and, with `initial_bias`, `logit_bias` (b).
    `scale()` is exp(min(t, log max_scale)); with `max_scale` the optimizer also clips t there after each step.
    """

    def __init__(self, initial_scale: float, max_scale: float | None = None, initial_bias: float | None = None,
                 **kwargs):
        super().__init__(**kwargs)
        self.initial_scale = _positive_number("logit_scale_init", initial_scale)
        self.max_scale = _positive_number("max_logit_scale", max_scale, allow_none=True)
        if self.max_scale is not None and self.initial_scale > self.max_scale:
            raise ValueError(f"logit_scale_init={self.initial_scale} is above max_logit_scale={self.max_scale}.")
        self.initial_bias = None if initial_bias is None else _finite_number("bias_init", initial_bias)
        self.log_scale = self.add_weight(
            shape=(), name="logit_scale_log", initializer=keras.initializers.Constant(math.log(self.initial_scale)),
            constraint=_AtMost(math.log(self.max_scale)) if self.max_scale is not None else None)
        self.bias = None
        if self.initial_bias is not None:
            self.bias = self.add_weight(shape=(), name="logit_bias",
                                        initializer=keras.initializers.Constant(self.initial_bias))
        self.built = True

    def scale(self):
        # The variable's value where it is read: inside a traced step (a Keras trainer, or keras.StatelessScope in
        # a user's jax.jit) the traced value, so that the gradient reaches t.
        log_scale = ops.convert_to_tensor(self.log_scale)
        if self.max_scale is not None:
            log_scale = _at_most(log_scale, math.log(self.max_scale))
        return ops.exp(log_scale)

    def call(self, inputs=None):
        return self.scale()

    def get_config(self):
        config = super().get_config()
        config.update(initial_scale=self.initial_scale, max_scale=self.max_scale, initial_bias=self.initial_bias)
        return config

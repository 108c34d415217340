"""Learning-rate schedules for Adam, by training steps.

- Step decay (VSE++): lr(t) = lr0 * factor ** floor(epoch(t) / decay_epochs), epoch(t) = t // steps_per_epoch,
  t = the optimizer's step counter (steps already taken, 0-based); a
  `keras.optimizers.schedules.PiecewiseConstantDecay` with a boundary every `decay_epochs` epochs.
- Linear warm-up then cosine (Loshchilov & Hutter, SGDR; Goyal et al. for the warm-up), Keras'
  `CosineDecay(warmup_target=..., warmup_steps=...)`:
      lr(t) = lr0 * t / W                                   for t < W (W warm-up steps; starts at 0)
      lr(t) = lr0 * (alpha + (1 - alpha) * (1 + cos(pi * min(t - W, S) / S)) / 2)   after, S = total - W
- Fine-tuning after a frozen phase (VSE++ "FT"): `PhaseSwitch` follows the first schedule for the frozen
  phase's steps, then holds the fine-tuning learning rate (VSE++ lowers it tenfold for fine-tuning).

Every function returns a float (a constant rate) or a serialisable `LearningRateSchedule`, so the optimizer
and Keras' TensorBoard callback (which logs `learning_rate` every epoch) see the rate in effect.
"""

from __future__ import annotations

import keras

SCHEDULES = ("step", "cosine")


def step_decay(learning_rate: float, *, steps_per_epoch: int, epochs: int, decay_epochs: int, decay_factor: float):
    """lr0 until `decay_epochs`, then times `decay_factor` every `decay_epochs` epochs (0: constant)."""
    if not decay_epochs or decay_epochs >= epochs:
        return float(learning_rate)
    boundaries = list(range(decay_epochs, epochs, decay_epochs))
    values = [float(learning_rate) * decay_factor ** i for i in range(len(boundaries) + 1)]
    # PiecewiseConstantDecay keeps values[i] while step <= boundary i, and the optimizer passes the number of
    # steps already taken: the first step of epoch b (step b * steps_per_epoch) must see the decayed rate.
    return keras.optimizers.schedules.PiecewiseConstantDecay([b * steps_per_epoch - 1 for b in boundaries], values)


def warmup_cosine(learning_rate: float, *, total_steps: int, warmup_steps: int = 0, alpha: float = 0.0):
    """Linear warm-up from 0 to `learning_rate` over `warmup_steps`, then a cosine to alpha * lr at
    `total_steps` (module docstring)."""
    if warmup_steps < 0 or total_steps < 1:
        raise ValueError(f"warmup_steps must be >= 0 and total_steps >= 1; got {warmup_steps}, {total_steps}.")
    if warmup_steps >= total_steps:
        raise ValueError(f"the warm-up ({warmup_steps} steps) must be shorter than training ({total_steps} steps).")
    if warmup_steps == 0:
        return keras.optimizers.schedules.CosineDecay(float(learning_rate), total_steps, alpha=alpha)
    return keras.optimizers.schedules.CosineDecay(0.0, total_steps - warmup_steps, alpha=alpha,
                                                  warmup_target=float(learning_rate), warmup_steps=warmup_steps)


@keras.saving.register_keras_serializable(package="kitm")
class PhaseSwitch(keras.optimizers.schedules.LearningRateSchedule):
    """`first(t)` for t < boundary_step, then the constant `then` (the fine-tuning rate).

    Args:
      first: a float or a LearningRateSchedule for the frozen phase.
      boundary_step: the first step of the fine-tuning phase.
      then: the fine-tuning learning rate.
    """

    def __init__(self, first, boundary_step: int, then: float):
        self.first = first
        self.boundary_step = int(boundary_step)
        self.then = float(then)

    def __call__(self, step):
        import tensorflow as tf

        step = tf.cast(step, tf.float32)
        first = self.first(step) if callable(self.first) else tf.constant(self.first, tf.float32)
        return tf.where(step < self.boundary_step, tf.cast(first, tf.float32), tf.constant(self.then, tf.float32))

    def get_config(self):
        first = self.first
        if isinstance(first, keras.optimizers.schedules.LearningRateSchedule):
            first = keras.saving.serialize_keras_object(first)
        return {"first": first, "boundary_step": self.boundary_step, "then": self.then}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config["first"], dict):
            config["first"] = keras.saving.deserialize_keras_object(config["first"])
        return cls(**config)


def build_schedule(kind: str, learning_rate: float, *, steps_per_epoch: int, epochs: int, decay_epochs: int = 0,
                   decay_factor: float = 0.1, warmup_steps: int = 0, finetune_after_epochs: int = 0,
                   finetune_learning_rate: float | None = None):
    """The launcher's learning rate: `kind` "step" or "cosine", then optionally the fine-tuning switch.

    With fine-tuning after E epochs, the step or cosine schedule spans the frozen phase only (E epochs,
    warm-up included) and the rate is `finetune_learning_rate` from step E * steps_per_epoch on.
    Raises ValueError naming the problem (the launcher adds the flag names).
    """
    if kind not in SCHEDULES:
        raise ValueError(f"unknown schedule {kind!r}; choose one of {SCHEDULES}.")
    if steps_per_epoch < 1:
        raise ValueError(f"steps_per_epoch must be >= 1; got {steps_per_epoch}.")
    phase_epochs = finetune_after_epochs if finetune_after_epochs else epochs
    if kind == "step":
        if warmup_steps:
            raise ValueError("the warm-up is part of the cosine schedule; use the cosine schedule or no warm-up.")
        schedule = step_decay(learning_rate, steps_per_epoch=steps_per_epoch, epochs=phase_epochs,
                              decay_epochs=decay_epochs, decay_factor=decay_factor)
    else:
        schedule = warmup_cosine(learning_rate, total_steps=phase_epochs * steps_per_epoch, warmup_steps=warmup_steps)
    if not finetune_after_epochs:
        return schedule
    if finetune_learning_rate is None:
        raise ValueError("fine-tuning needs its learning rate.")
    return PhaseSwitch(schedule, finetune_after_epochs * steps_per_epoch, finetune_learning_rate)

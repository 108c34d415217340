"""Per-tower learning-rate multipliers: Adam whose step for some variables is the schedule's rate times a factor.

Fine-tuning a pretrained tower at a fraction of the rate of the new parts (projections, a text tower trained from
scratch) is the common recipe for CLIP-style fine-tuning; a multiplier of 0 keeps a tower where it is (LiT's locked
image tower, though `freeze_image_tower` does that without computing its gradients). kitm multiplies per tower
rather than decaying per layer (BEiT / EVA-CLIP layer-wise decay): one rule for every keras-hub family and the
papers' towers alike, with no per-family map from variable names to depth, and the two settings cover the recipes
the field uses for dual encoders (a frozen or slowed image tower, a faster text tower).

Scaling the gradients would not do it: Adam's step does not depend on the gradient's scale. So the multiplier
scales the learning rate inside `update_step`, variable by variable.
"""

from __future__ import annotations

import keras

from kitm.training.fused_adam import FusedAdam


@keras.saving.register_keras_serializable(package="kitm")
class TowerLearningRateAdam(keras.optimizers.Adam):
    """`keras.optimizers.Adam` with a learning-rate multiplier per variable (1 for those not given)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._multipliers: dict[str, float] = {}

    def set_multiplier(self, variables, multiplier: float) -> None:
        """Every variable of `variables` steps at learning_rate x `multiplier`."""
        for variable in variables:
            self._multipliers[self._var_key(variable)] = float(multiplier)

    def multiplier_of(self, variable) -> float:
        return self._multipliers.get(self._var_key(variable), 1.0)

    def update_step(self, gradient, variable, learning_rate):
        multiplier = self.multiplier_of(variable)
        if multiplier != 1.0:
            learning_rate = keras.ops.multiply(keras.ops.cast(learning_rate, variable.dtype), multiplier)
        return super().update_step(gradient, variable, learning_rate)


@keras.saving.register_keras_serializable(package="kitm")
class FusedTowerLearningRateAdam(TowerLearningRateAdam, FusedAdam):
    """Per-tower learning rates over the fused update (kitm.training.fused_adam): the multiplier scales the rate,
    the fused pass applies it."""

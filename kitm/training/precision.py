"""Mixed precision: float16 (GPU) or bfloat16 (CPU, TPU) compute with float32 variables.

`set_mixed_precision(True)` sets Keras' global dtype policy before the model is built:
"mixed_float16" when a GPU is visible (tensor cores; Keras' `Model.compile` then wraps the optimizer in a
`LossScaleOptimizer`, which `DualEncoder.train_step` honours through `optimizer.scale_loss`), else
"mixed_bfloat16" (bfloat16 has float32's exponent range and needs no loss scaling). The layers compute in
the low precision and keep float32 weights; `DualEncoder.encode_image` / `encode_text` cast their outputs
to float32 before the L2 normalisation, so similarities, losses and relevance statistics are float32.
"""

from __future__ import annotations

import keras


def mixed_policy_name() -> str:
    """"mixed_float16" with a GPU, else "mixed_bfloat16"."""
    import tensorflow as tf

    return "mixed_float16" if tf.config.list_logical_devices("GPU") else "mixed_bfloat16"


def set_mixed_precision(enabled: bool) -> str:
    """Set (or reset to "float32") the global dtype policy; returns the policy's name.

    Call before building the model: layers take the global policy when they are created.
    """
    name = mixed_policy_name() if enabled else "float32"
    keras.mixed_precision.set_global_policy(name)
    return name

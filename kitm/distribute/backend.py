"""Which Keras backend runs, and the few facts of it that numerics depend on.

`KERAS_BACKEND` is read once, by Keras (kitm's package `__init__` only sets TensorFlow as the default); everything
in kitm that needs the backend asks here. TensorFlow is imported only when it is the backend (`tensorflow_module`),
so the model side imports without it.
"""

from __future__ import annotations

import keras
import numpy as np

__all__ = ["backend_name", "on_tensorflow", "on_jax", "on_torch", "tensorflow_module", "jax_has_64_bit_types",
           "widest_integer", "widest_float", "known_values", "compiled", "static_rank", "loaded_tensorflow"]


def backend_name() -> str:
    """"tensorflow", "jax" or "torch": the backend Keras was imported with."""
    return keras.backend.backend()


def on_tensorflow() -> bool:
    return backend_name() == "tensorflow"


def on_jax() -> bool:
    return backend_name() == "jax"


def on_torch() -> bool:
    return backend_name() == "torch"


def tensorflow_module():
    """The `tensorflow` module where Keras runs on it, else None (imported on demand: the other backends never
    need TensorFlow)."""
    if not on_tensorflow():
        return None
    import tensorflow as tf

    return tf


def jax_has_64_bit_types() -> bool:
    """Whether JAX keeps int64 / float64 (`jax_enable_x64`); without it JAX truncates them to 32 bits, warning."""
    import jax

    return bool(jax.config.jax_enable_x64)


def widest_integer() -> str:
    """int64, or int32 on JAX without 64-bit types (a counter's dtype)."""
    return "int32" if on_jax() and not jax_has_64_bit_types() else "int64"


def widest_float() -> str:
    """float64, or float32 on JAX without 64-bit types (an accumulator's dtype)."""
    return "float32" if on_jax() and not jax_has_64_bit_types() else "float64"


def known_values(values):
    """The values of `values` as numpy where they are known without tracing or a device round trip, else None
    (a JAX tracer, a tensor on an accelerator or inside torch.compile; and TensorFlow's tensors, whose checks are
    the graph's own asserts: `kitm.distribute.checks`)."""
    if isinstance(values, (np.ndarray, np.generic)):
        return np.asarray(values)
    backend = backend_name()
    if backend == "jax":
        import jax

        if not isinstance(values, jax.core.Tracer):
            return np.asarray(values)
    elif backend == "torch":
        import torch

        if values.device.type == "cpu" and not torch.compiler.is_compiling():
            return values.numpy()
    return None


def compiled(function, **tf_function_options):
    """`function` compiled where the backend compiles a plain function kitm calls eagerly (tf.function on
    TensorFlow, with `tf_function_options`); as it is elsewhere (JAX and PyTorch run it op by op)."""
    tf = tensorflow_module()
    return function if tf is None else tf.function(function, **tf_function_options)


def static_rank(values) -> int | None:
    """The rank of `values`, None where unknown (a TensorFlow graph tensor of unknown rank)."""
    shape = values.shape
    if getattr(shape, "rank", 0) is None:
        return None
    return len(shape)


def loaded_tensorflow():
    """The `tensorflow` module where it is loaded already, whatever the backend (tf.data reads the input on every
    backend, so TensorFlow's errors can reach a command that runs on JAX); None where it is not: nothing of it can
    have been raised."""
    import sys

    return sys.modules.get("tensorflow")

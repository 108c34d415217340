"""Run-time checks of integer inputs (row and image indices) on every backend.

A gather does not fail on every backend and device for an out-of-range index (TensorFlow on a GPU returns zeros, JAX
clips or fills, `keras.ops.take` wraps negative indices), so the losses check the indices they gather with. How a
check runs is the backend's: TensorFlow asserts in the graph (the step stops with the message, also inside
tf.function); elsewhere the values are checked where they are concrete (eager), with ValueError; a traced step (JAX
under jit, torch.compile) or a tensor on an accelerator cannot be checked without waiting for the device, which the
caller is told (`IndexCheck.checked` False) so that it can make an invalid index harmless instead.
"""

from __future__ import annotations

from typing import NamedTuple

from kitm.distribute.backend import known_values, tensorflow_module

__all__ = ["IndexCheck", "check_index_range"]


class IndexCheck(NamedTuple):
    values: object  # the indices, behind the graph's asserts on TensorFlow
    checked: bool  # False: traced or on an accelerator, not checked


def check_index_range(index, upper, *, upper_message: str, lower_message: str | None = None) -> IndexCheck:
    """`index` (an integer tensor) checked to be < `upper` (and >= 0 where `lower_message` is given): the messages
    name the input; a concrete violation raises ValueError with the offending value appended."""
    tf = tensorflow_module()
    if tf is not None:
        checks = [tf.debugging.assert_less(index, tf.cast(upper, index.dtype), message=upper_message)]
        if lower_message is not None:
            checks.insert(0, tf.debugging.assert_non_negative(index, message=lower_message))
        with tf.control_dependencies(checks):
            return IndexCheck(tf.identity(index), True)
    values = known_values(index)
    if values is None:
        return IndexCheck(index, False)
    if lower_message is not None and values.size and values.min() < 0:
        raise ValueError(f"{lower_message}; got {values.min()}.")
    if values.size and values.max() >= int(upper):
        raise ValueError(f"{upper_message}; got {values.max()}.")
    return IndexCheck(index, True)

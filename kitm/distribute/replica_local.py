"""Variables that a loss or metric updates inside the training step, on every backend and under every strategy.

Under TensorFlow's `tf.distribute` each replica runs the step: a counter that each replica adds to is a
sync-on-read variable (`synchronization=ON_READ`), one copy a replica, written by its own replica only, whose
cross-replica read aggregates the copies (SUM, or the first replica's copy). On JAX and PyTorch one step sees the
global batch, so such a variable is a plain Keras variable, one copy (on JAX listed in the state a stateless step
carries: `kitm.distribute.steps.keras_trainers`). Callbacks read and set every copy with `replica_local_values` and
`assign_replica_local`.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from kitm.distribute.backend import tensorflow_module, widest_integer

__all__ = ["AGGREGATIONS", "per_replica_variable", "state_variable", "replica_local_values", "assign_replica_local",
           "is_variable"]

AGGREGATIONS = ("sum", "first_replica")


def per_replica_variable(initial, name: str, aggregation: str = "sum"):
    """A variable each replica writes its own copy of (module docstring), starting at `initial` (a numpy array:
    its dtype is the variable's; int64 becomes int32 on JAX without 64-bit types). `aggregation`: how a
    cross-replica read combines the copies, "sum" or "first_replica"."""
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS}; got {aggregation!r}.")
    initial = np.asarray(initial)
    tf = tensorflow_module()
    if tf is not None:
        return tf.Variable(tf.constant(initial), trainable=False, name=name,
                           synchronization=tf.VariableSynchronization.ON_READ,
                           aggregation=(tf.VariableAggregation.SUM if aggregation == "sum"
                                        else tf.VariableAggregation.ONLY_FIRST_REPLICA))
    if initial.dtype == np.int64:
        initial = initial.astype(widest_integer())
    return keras.Variable(initial, trainable=False, dtype=str(initial.dtype), name=name)


def state_variable(initial, name: str):
    """A non-trainable variable a loss reads in its step and a callback sets between steps (the ladder's
    thresholds): on TensorFlow a `tf.Variable` (mirrored under a strategy, outside Keras' tracking), elsewhere a
    Keras variable."""
    tf = tensorflow_module()
    initial = np.asarray(initial)
    if tf is not None:
        return tf.Variable(initial, trainable=False, name=name)
    return keras.Variable(initial, trainable=False, name=name)


def _strategy_of(tf, variable):
    # The variable's own strategy: a callback may run outside `strategy.scope()`, where get_strategy() is the
    # default one and would read the aggregate instead of the copies.
    return getattr(variable, "distribute_strategy", None) or tf.distribute.get_strategy()


def _tf_variable(variable):
    # A Keras variable on TensorFlow holds a tf.Variable (its value), the one a strategy knows.
    return variable.value if isinstance(variable, keras.Variable) else variable


def replica_local_values(variable) -> list[np.ndarray]:
    """The value of every replica's copy of `variable` (one entry without a distribution strategy, and on JAX and
    PyTorch, whose variables have one copy)."""
    tf = tensorflow_module()
    if tf is None:
        return [np.asarray(ops.convert_to_numpy(variable))]
    variable = _tf_variable(variable)
    strategy = _strategy_of(tf, variable)
    return [np.asarray(v.numpy() if hasattr(v, "numpy") else v)
            for v in strategy.experimental_local_results(variable)]


def assign_replica_local(variable, values) -> None:
    """Set every replica's copy of `variable`: `values` is one array for all, or a list with one per replica.

    Assigning the copies one by one sidesteps the aggregation rule of a cross-replica assign (with SUM,
    TensorFlow would divide the value by the number of replicas).
    """
    tf = tensorflow_module()
    if tf is None:
        local = [variable]
    else:
        variable = _tf_variable(variable)
        local = _strategy_of(tf, variable).experimental_local_results(variable)
    if isinstance(values, (list, tuple)):
        if len(values) != len(local):
            raise ValueError(f"Expected {len(local)} per-replica values for {variable.name}; got {len(values)}.")
    else:
        values = [values] * len(local)
    for copy, value in zip(local, values):
        copy.assign(ops.cast(value, copy.dtype))


def is_sync_on_read(variable) -> bool:
    """A per-replica copy variable (`per_replica_variable`): tf.VariableSynchronization.ON_READ (its str form
    "VariableSynchronization.ON_READ") or Keras' "on_read"."""
    return str(getattr(variable, "synchronization", "")).lower().endswith("on_read")


def replica_summed_value(variable) -> np.ndarray:
    """The value a checkpoint keeps of `variable`: the sum of its replicas' copies for a per-replica variable, else
    its value."""
    values = replica_local_values(variable)
    return np.sum(values, axis=0) if is_sync_on_read(variable) and len(values) > 1 else values[0]


def assign_replica_summed(variable, value) -> None:
    """`replica_summed_value` read back: a per-replica variable's first copy takes `value`, the others zeros (the
    sum of its copies is then `value`); any other variable takes `value`."""
    copies = len(replica_local_values(variable))
    value = np.asarray(value)
    assign_replica_local(variable, [value] + [np.zeros_like(value)] * (copies - 1) if copies > 1 else value)


def is_variable(value) -> bool:
    """A Keras variable, or a TensorFlow one (`per_replica_variable` and `state_variable` on TensorFlow)."""
    if isinstance(value, keras.Variable):
        return True
    tf = tensorflow_module()
    return tf is not None and isinstance(value, tf.Variable)

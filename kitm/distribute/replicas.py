"""How many replicas compute a loss, how many devices share the batch's rows, and a replica's share of a loss.

Two ways of running one step on several devices, one a backend (docs/scale.md):

- TensorFlow (`tf.distribute`): R replicas each run the step on their b = B / R rows; a loss reduced on a replica is
  divided by R (Keras' convention) because the optimizer sums the replicas' gradients. `num_replicas_in_sync` is R.
- JAX (`keras.distribution.DataParallel`): one jit-compiled step over the global batch, its rows split over D
  devices; the loss runs once over the global array (XLA partitions it), so R is 1 and `data_parallel_devices` is D.

PyTorch runs one process on one device: R = D = 1.
"""

from __future__ import annotations

from keras import ops

from kitm.distribute.backend import on_jax, tensorflow_module
from kitm.errors import DistributionError, option

__all__ = ["num_replicas_in_sync", "data_parallel_devices", "batch_replicas", "replica_share",
           "per_replica_batch_size", "tensorflow_replica_context", "writes_checkpoints"]


def num_replicas_in_sync() -> int:
    """R, the replicas a reduced loss is shared by: the `tf.distribute` strategy's on TensorFlow (1 outside a
    strategy's scope); 1 elsewhere (module docstring)."""
    tf = tensorflow_module()
    return 1 if tf is None else int(tf.distribute.get_strategy().num_replicas_in_sync)


def data_parallel_devices() -> int:
    """D, the devices `keras.distribution` splits the batch's rows over on JAX: the size of the distribution's batch
    axis, 1 without a distribution and on the other backends (module docstring)."""
    if not on_jax():
        return 1
    import keras

    distribution = keras.distribution.distribution()
    if distribution is None:
        return 1
    mesh, axis = distribution.device_mesh, distribution.batch_dim_name
    if axis is None or axis not in mesh.axis_names:
        return 1
    return int(mesh.shape[list(mesh.axis_names).index(axis)])


def batch_replicas(strategy=None) -> int:
    """The replicas (TensorFlow: `strategy`'s, or the one in scope) or devices (JAX) the global batch's rows are
    split over."""
    tf = tensorflow_module()
    if tf is None:
        return data_parallel_devices()
    return int((strategy or tf.distribute.get_strategy()).num_replicas_in_sync)


def tensorflow_replica_context():
    """TensorFlow's replica context of a step with several replicas in sync, else None (one replica, no context,
    or another backend: there a loss sees the global batch)."""
    tf = tensorflow_module()
    if tf is None:
        return None
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync <= 1:
        return None
    return context


def replica_share(value, reduction: str | None, global_negatives: bool = False):
    """A replica's reduced loss scaled for the optimizer's sum over replicas (docs/scale.md).

    Local negatives, or "sum_over_batch_size": divided by R (a mean over b rows / R is the mean over B rows).
    Global negatives with "sum": undivided (the replicas' sums add up to the global batch's sum).
    """
    if reduction in (None, "none"):
        return value
    replicas = num_replicas_in_sync()
    if replicas > 1 and not (global_negatives and reduction == "sum"):
        value = value / ops.cast(replicas, value.dtype)
    return value


def per_replica_batch_size(global_batch: int, replicas: int, what: str = "replicas") -> int:
    """b = B / R; refused, naming the flag, when R does not divide B (`what` names the R: replicas, or "devices
    keras.distribution.DataParallel splits it over")."""
    if global_batch % replicas:
        raise DistributionError(f"{option('batch_size')}={global_batch} must be divisible by the {replicas} {what}.")
    return global_batch // replicas


def writes_checkpoints(model=None) -> bool:
    """Whether this process keeps what it checkpoints: under TensorFlow's multi-worker strategy the chief only
    (`should_checkpoint` of `model`'s strategy, or the one in scope); on JAX process 0 (as keras.distribution's
    saving does); elsewhere True."""
    tf = tensorflow_module()
    if tf is not None:
        strategy = getattr(model, "distribute_strategy", None) or tf.distribute.get_strategy()
        return bool(getattr(strategy.extended, "should_checkpoint", True))
    if on_jax():
        import jax

        return jax.process_index() == 0
    return True

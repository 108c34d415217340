"""The launcher's devices on Keras' JAX backend: `--strategy=mirrored` as `keras.distribution.DataParallel`.

On TensorFlow the launcher's strategies are `tf.distribute` ones (`kitm.training.distribution`). On JAX a
`tf.distribute` strategy cannot place Keras' variables or steps, so there:

    default        one device, no distribution (as before)
    mirrored       `keras.distribution.DataParallel` over every JAX device (all local GPUs, or `--cpu_devices`
                   host devices: `XLA_FLAGS=--xla_force_host_platform_device_count`, set before JAX starts)
    multi_worker   `keras.distribution.DataParallel` over every device of several JAX processes, which have joined
                   before JAX started (`kitm.distribute.processes`); each process's pipeline feeds its own rows

Under DataParallel one `tf.data` pipeline yields the global batch B (with its [B, B] relevance, as on one device);
Keras' JAX trainer splits its rows over the D devices and XLA shards the step. The losses run once over the global
array, so every anchor meets all B - 1 negatives: global negatives, the step of one device with the whole batch
(`kitm.models.dual_encoder`, "Backends"; `kitm.distribute.replicas.data_parallel_devices` reads D back). B must be a
multiple of D. The TensorFlow side (the input pipeline, the SavedModel export) keeps its default strategy.
"""

from __future__ import annotations

import os
import re

import keras

from kitm.distribute.backend import backend_name
from kitm.distribute.replicas import per_replica_batch_size
from kitm.errors import DistributionError, option

HOST_DEVICES_FLAG = "--xla_force_host_platform_device_count"


def split_host_devices(num_devices: int) -> None:
    """JAX: make the CPU `num_devices` host devices (XLA_FLAGS), which JAX reads when it first lists its devices.

    Refused, naming the variable, when JAX has already started with another count (then only a new process can
    change it)."""
    if num_devices < 1:
        return
    backend = backend_name()
    if backend != "jax":
        raise DistributionError(
            f"{option('cpu_devices')}={num_devices} on the {backend} backend: the launcher splits the CPU into "
            f"devices on TensorFlow and JAX only; leave {option('cpu_devices')} at 0 here.")
    from jax._src import xla_bridge  # the one place JAX says whether its backends have started

    flags = re.sub(rf"{HOST_DEVICES_FLAG}=\S+", "", os.environ.get("XLA_FLAGS", "")).split()
    if not xla_bridge.backends_are_initialized():
        os.environ["XLA_FLAGS"] = " ".join([*flags, f"{HOST_DEVICES_FLAG}={num_devices}"])
        return
    import jax

    if jax.default_backend() == "cpu" and jax.device_count() != num_devices:
        raise DistributionError(
            f"{option('cpu_devices')}={num_devices}: JAX has already started with {jax.device_count()} CPU "
            f"device(s) in this process; set XLA_FLAGS={HOST_DEVICES_FLAG}={num_devices} before it starts.")


def set_data_parallel(strategy: str) -> int:
    """Set the distribution `strategy` names on a backend other than TensorFlow (module docstring); the number of
    devices the batch's rows are split over (1: none set)."""
    backend = backend_name()
    if strategy == "default":
        return 1
    if backend != "jax":
        where = "KERAS_BACKEND=tensorflow" if strategy == "multi_worker" else "KERAS_BACKEND=tensorflow / jax"
        raise DistributionError(
            f"{option('strategy')}={strategy} on the {backend} backend: the launcher distributes with tf.distribute "
            f"on TensorFlow and keras.distribution.DataParallel on JAX; use {option('strategy')}=default here, or "
            f"{where}.")
    if strategy not in ("mirrored", "multi_worker"):
        raise DistributionError(f"{option('strategy')}={strategy}: expected default, mirrored or multi_worker.")
    devices = keras.distribution.list_devices()  # every process's, once the processes have joined
    # Across processes each process's pipeline already yields its own rows of the global batch (the launcher's
    # input, kitm.experiment.training_run), so Keras must not shard the dataset again.
    keras.distribution.set_distribution(keras.distribution.DataParallel(
        devices=devices, auto_shard_dataset=strategy != "multi_worker"))
    return len(devices)


def check_batch(global_batch: int, devices: int) -> None:
    """The global batch splits evenly over the devices (Keras' JAX trainer shards its rows)."""
    per_replica_batch_size(global_batch, devices, "devices keras.distribution.DataParallel splits it over")

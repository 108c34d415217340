"""Uniform random keys for the losses' random draws (random negatives, the ladder's relevance sample).

On TensorFlow kitm draws with the stateful and stateless `tf.random` ops it has always drawn with, so that a run's
draws stay what they were; elsewhere with `keras.random` and a `keras.random.SeedGenerator`, whose state advances
with every draw, also inside a traced (jit) step whose state Keras threads through.
"""

from __future__ import annotations

import keras
from keras import ops

from kitm.distribute.backend import on_jax, static_rank, tensorflow_module

__all__ = ["seed_stream", "uniform_keys", "replica_stream_uniform"]


def seed_stream(seed=None, offset: int = 0):
    """What a loss keeps to draw with (`uniform_keys`' `seed`): on TensorFlow the op seed itself (`seed + offset`,
    or None), elsewhere a `keras.random.SeedGenerator` started there. `offset` gives a second stream that does not
    repeat the first's draws."""
    op_seed = None if seed is None else int(seed) + offset
    if tensorflow_module() is not None:
        return op_seed
    return keras.random.SeedGenerator(op_seed)


def _seed_tensor(seed):
    """A [2] seed tensor as `keras.random` takes it on the active backend: JAX takes the key array itself (uint32),
    traced or not; PyTorch (eager) takes an int, here a fixed function of the pair."""
    if on_jax():
        import jax.numpy as jnp

        return jnp.asarray(seed, dtype=jnp.uint32)
    first, second = (int(v) for v in ops.convert_to_numpy(seed))
    return (first * 1_000_003 + second) % 2**31


def uniform_keys(shape, seed):
    """Uniform float32 keys in [0, 1) of `shape`. `seed`: None, an int (on TensorFlow the op-level seed of a
    stateful draw; elsewhere the same draw every call), a SeedGenerator (fresh draws), or a [2] integer tensor
    (a stateless draw: `tf.random.stateless_uniform` on TensorFlow)."""
    if isinstance(seed, keras.random.SeedGenerator):
        return keras.random.uniform(shape, dtype="float32", seed=seed)
    if seed is not None and not isinstance(seed, int):
        seed = ops.convert_to_tensor(seed)
        if static_rank(seed) != 1 or (seed.shape[0] is not None and seed.shape[0] != 2):
            raise ValueError(f"seed must be None, an int or a shape [2] integer tensor; got shape {seed.shape}.")
    tf = tensorflow_module()
    if tf is not None:
        if seed is None or isinstance(seed, int):
            return tf.random.uniform(shape, dtype=tf.float32, seed=seed)
        return tf.random.stateless_uniform(shape, seed=seed, dtype=tf.float32)
    if seed is not None and not isinstance(seed, int):
        seed = _seed_tensor(seed)
    return keras.random.uniform(shape, dtype="float32", seed=seed)


def replica_stream_uniform(shape, seed: int, draws, seed_generator=None):
    """Uniform float32 keys of `shape` from a stream of its own per replica: on TensorFlow stateless, from
    (seed, draws x replicas + replica) (`draws`: the caller's count of its draws so far); elsewhere (one step over
    the global batch) from `seed_generator`."""
    tf = tensorflow_module()
    if tf is None:
        return keras.random.uniform(shape, dtype="float32", seed=seed_generator)
    context = tf.distribute.get_replica_context()
    if context is None:  # cross-replica context: a single writer
        replica, replicas = tf.constant(0, tf.int64), 1
    else:
        replica, replicas = tf.cast(context.replica_id_in_sync_group, tf.int64), context.num_replicas_in_sync
    counter = tf.cast(draws, tf.int64) * replicas + replica
    return tf.random.stateless_uniform(shape, seed=tf.stack([tf.constant(seed, tf.int64), counter]), dtype=tf.float32)

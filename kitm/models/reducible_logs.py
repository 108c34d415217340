"""A training step's logs in the shape Keras 3 can reduce across the workers of a MultiWorkerMirroredStrategy."""

from __future__ import annotations

import tensorflow as tf


def in_multi_worker_mode(strategy: tf.distribute.Strategy) -> bool:
    """True for a MultiWorkerMirroredStrategy over several workers (the condition Keras' trainer tests)."""
    return (isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
            and bool(strategy.extended._in_multi_worker_mode()))  # noqa: SLF001 (no public accessor)


def keras_reducible_logs(logs: dict, strategy: tf.distribute.Strategy | None = None) -> dict:
    """A training step's logs in a shape Keras 3 can reduce across workers.

    In multi-worker mode Keras' `reduce_per_replica` reduces every logged value with
    `strategy.reduce("MEAN", value, axis=0)`, which fails on a scalar ("Invalid reduction dimension 0 for
    input with 0 dimensions", tensorflow/tensorflow#72388). Given as [1] per replica, each value reduces to
    the scalar mean over all replicas, what a single worker logs. Elsewhere the logs are returned as they are.
    """
    strategy = strategy or tf.distribute.get_strategy()
    if not in_multi_worker_mode(strategy):
        return logs
    return {name: tf.reshape(value, [1]) for name, value in logs.items()}

"""A training step's logs in the shape Keras 3 can reduce across the workers of a MultiWorkerMirroredStrategy.

A TensorFlow matter (tf.distribute): TensorFlow is imported only when the backend is TensorFlow, and on the other
backends the logs pass through unchanged.
"""

from __future__ import annotations

import keras


def in_multi_worker_mode(strategy) -> bool:
    """True for a MultiWorkerMirroredStrategy over several workers (the condition Keras' trainer tests)."""
    import tensorflow as tf

    return (isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
            and bool(strategy.extended._in_multi_worker_mode()))  # noqa: SLF001 (no public accessor)


def keras_reducible_logs(logs: dict, strategy=None) -> dict:
    """A training step's logs in a shape Keras 3 can reduce across workers.

    In multi-worker mode Keras' `reduce_per_replica` reduces every logged value with
    `strategy.reduce("MEAN", value, axis=0)`, which fails on a scalar ("Invalid reduction dimension 0 for
    input with 0 dimensions", tensorflow/tensorflow#72388). Given as [1] per replica, each value reduces to
    the scalar mean over all replicas, what a single worker logs. Elsewhere (and on the backends other than
    TensorFlow, which have no tf.distribute strategy) the logs are returned as they are.
    """
    if strategy is None and keras.backend.backend() != "tensorflow":
        return logs
    import tensorflow as tf

    strategy = strategy or tf.distribute.get_strategy()
    if not in_multi_worker_mode(strategy):
        return logs
    return {name: tf.reshape(value, [1]) for name, value in logs.items()}

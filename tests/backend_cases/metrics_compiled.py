"""Backend cases: the metrics' updates inside a compiled step, as `fit` runs them (JAX: `stateless_update_state`
under jax.jit; TensorFlow: tf.function; PyTorch: eager, as Keras' torch trainer runs them by default).
`cases()` is `EmbeddingCollapse`'s; metrics_compiled_relevance.py runs `RelevanceStatistics`'."""

import keras
import numpy as np
from keras import ops

from kitm.metrics import EmbeddingCollapse, RelevanceStatistics


def _compiled_updates(metric, batches):
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        @jax.jit
        def update(variables, y_true, y_pred):
            return metric.stateless_update_state(variables, y_true, y_pred)

        variables = [v.value for v in metric.variables]
        for y_true, y_pred in batches:
            variables = update(variables, y_true, y_pred)
        for variable, value in zip(metric.variables, variables):
            variable.assign(value)
    elif backend == "tensorflow":
        import tensorflow as tf

        update = tf.function(metric.update_state)
        for y_true, y_pred in batches:
            update(y_true, y_pred)
    else:
        for y_true, y_pred in batches:
            metric.update_state(y_true, y_pred)
    return {key: ops.convert_to_numpy(value) for key, value in metric.result().items()}


def collapse_cases():
    rng = np.random.default_rng(22)
    embeddings = [{"image": rng.normal(size=(5, 3)), "text": rng.normal(size=(5, 3))} for _ in range(2)]
    return _compiled_updates(EmbeddingCollapse(), [({}, y_pred) for y_pred in embeddings])


def relevance_cases():
    rng = np.random.default_rng(23)
    relevance = [{"relevance": rng.uniform(size=(6, 6)), "image_index": np.array([0, 0, 1, 2, 3, 3], np.int32)},
                 {"relevance": rng.uniform(size=(6, 6)), "image_index": np.arange(6, dtype=np.int32)}]
    return _compiled_updates(RelevanceStatistics(), [(y_true, None) for y_true in relevance])


def cases():
    return collapse_cases()

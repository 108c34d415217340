"""The collapse monitor callback: its warning and stop, and a model that really collapses (the statistic:
tests/metrics/test_collapse.py; the launcher's flags: tests/end_to_end/test_launch_runs.py)."""

import io

import numpy as np
import pytest
import tensorflow as tf

import kitm  # noqa: F401  (selects the TensorFlow backend)
import keras
from kitm.callbacks.collapse_monitor import CollapseMonitor
from kitm.losses import TripletLoss
from kitm.metrics import EmbeddingCollapse
from kitm.models import DualEncoder


def test_callback_warns_once_names_the_fixes_and_can_stop():
    stream = io.StringIO()
    monitor = CollapseMonitor(0.9, stream=stream)
    monitor.set_model(keras.Sequential([keras.layers.Dense(1)]))
    monitor.on_epoch_end(0, {"collapse/image_cosine": 0.3, "collapse/text_cosine": 0.5})
    assert stream.getvalue() == "" and monitor.collapsed_epoch is None
    monitor.on_epoch_end(1, {"collapse/image_cosine": 0.999, "collapse/text_cosine": 0.5})
    monitor.on_epoch_end(2, {"collapse/image_cosine": 0.999, "collapse/text_cosine": 0.999})
    warning = stream.getvalue()
    assert warning.count("WARNING") == 1 and "epoch 2" in warning and "0.999" in warning
    for fix in ("--hardest_warmup_epochs", "--max_violation=false", "--angular_form=npair", "--stop_on_collapse"):
        assert fix in warning
    assert not getattr(monitor.model, "stop_training", False)
    assert monitor.report()["collapsed_epoch"] == 2 and not monitor.report()["stopped"]

    stopper = CollapseMonitor(0.9, stop=True, stream=io.StringIO())
    stopper.set_model(keras.Sequential([keras.layers.Dense(1)]))
    stopper.on_epoch_end(0, {"collapse/text_cosine": 0.95})
    assert stopper.model.stop_training and stopper.report()["stopped"]
    with pytest.raises(ValueError, match="threshold"):
        CollapseMonitor(1.5)


class Constant(keras.layers.Layer):
    """An encoder whose output ignores its input: every embedding is the same vector (a collapsed model)."""

    def build(self, input_shape):
        self.value = self.add_weight(shape=(4,), initializer="ones")

    def call(self, inputs):
        return tf.zeros([tf.shape(inputs)[0], 4]) + self.value


def test_a_non_finite_epoch_is_not_called_a_collapse():
    """A diverged run (NaN embeddings) is stopped and named by the non-finite stop; the collapse warning, which
    blames hardest negatives, stays silent."""
    stream = io.StringIO()
    monitor = CollapseMonitor(0.9, stream=stream, stop=True)
    monitor.set_model(keras.Sequential([keras.layers.Dense(1)]))
    monitor.on_epoch_end(0, {"collapse/image_cosine": float("nan"), "collapse/text_cosine": 0.4})
    assert stream.getvalue() == "" and monitor.collapsed_epoch is None
    assert not getattr(monitor.model, "stop_training", False)


def test_a_collapsed_model_is_caught_during_fit():
    rng = np.random.default_rng(2)
    x = {"image": rng.normal(size=(32, 5)).astype(np.float32), "tokens": rng.integers(1, 9, (32, 3)).astype(np.int32)}
    model = DualEncoder(Constant(), Constant(), embedding_dim=3)
    model.build_from_inputs({key: tf.TensorSpec([None, *value.shape[1:]], value.dtype) for key, value in x.items()})
    model.compile(keras.optimizers.Adam(1e-3), losses={"triplet": TripletLoss()}, monitors=[EmbeddingCollapse()])
    stream = io.StringIO()
    monitor = CollapseMonitor(stop=True, stream=stream)
    history = model.fit(tf.data.Dataset.from_tensor_slices((x, {"image_index": np.arange(32)})).batch(8), epochs=3,
                        callbacks=[monitor], verbose=0)
    assert history.history["collapse/image_cosine"][0] > 0.999
    assert monitor.collapsed_epoch == 0 and len(history.history["loss"]) == 1  # stopped after the first epoch
    assert "collapsed in epoch 1" in stream.getvalue()



"""The collapse monitor: its statistic against a numpy oracle, the callback's warning and stop, a model that really
collapses, and the launcher's flags (a threshold every run exceeds forces the warning deterministically)."""

import io
import json

import numpy as np
import pytest
import tensorflow as tf

import kitm  # noqa: F401  (selects the TensorFlow backend)
import keras
from kitm.callbacks.collapse_monitor import CollapseMonitor
from kitm.losses import TripletLoss
from kitm.metrics import EmbeddingCollapse, mean_pairwise_cosine
from kitm.models import DualEncoder


def pairwise_cosine_oracle(x):
    """Mean of the off-diagonal entries of the cosine matrix."""
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    c = x @ x.T
    b = len(x)
    return (c.sum() - np.trace(c)) / (b * (b - 1)) if b > 1 else 0.0


def test_mean_pairwise_cosine_matches_the_oracle_and_its_limits():
    rng = np.random.default_rng(0)
    for b, d in ((2, 3), (7, 5), (64, 16)):
        x = rng.normal(size=(b, d)) * rng.uniform(0.5, 3, size=(b, 1))  # rows of any norm
        np.testing.assert_allclose(float(mean_pairwise_cosine(x)), pairwise_cosine_oracle(x), atol=1e-5)
    same = np.tile(rng.normal(size=(1, 8)), (10, 1))
    np.testing.assert_allclose(float(mean_pairwise_cosine(same)), 1.0, atol=1e-5)  # collapsed
    np.testing.assert_allclose(float(mean_pairwise_cosine(np.eye(6))), 0.0, atol=1e-7)  # orthogonal
    np.testing.assert_allclose(float(mean_pairwise_cosine(np.array([[1.0, 0], [-1.0, 0]]))), -1.0, atol=1e-7)
    assert float(mean_pairwise_cosine(np.ones((1, 4)))) == 0.0  # no pair


def test_metric_averages_batches_and_resets():
    rng = np.random.default_rng(1)
    metric = EmbeddingCollapse()
    batches = [(rng.normal(size=(8, 4)), rng.normal(size=(8, 4))) for _ in range(3)]
    for image, text in batches:
        metric.update_state(None, {"image": image, "text": text})
    result = {key: float(value) for key, value in metric.result().items()}
    np.testing.assert_allclose(result["collapse/image_cosine"], np.mean([pairwise_cosine_oracle(i) for i, _ in batches]),
                               atol=1e-5)
    np.testing.assert_allclose(result["collapse/text_cosine"], np.mean([pairwise_cosine_oracle(t) for _, t in batches]),
                               atol=1e-5)
    metric.reset_state()
    assert float(metric.result()["collapse/image_cosine"]) == 0.0


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


@pytest.mark.slow
def test_launcher_warns_logs_and_stops_on_collapse(tiny_synthetic, tmp_path):
    from test_launch import TINY_FLAGS, _launch

    run_dir = tmp_path / "run"
    # Every run "collapses" under a threshold of 0.0001: the warning path is exercised deterministically.
    result = _launch([*TINY_FLAGS, f"--data_dir={tiny_synthetic}", f"--run_dir={run_dir}", "--epochs=3",
                      "--eval_every_epochs=0", "--export=false", "--collapse_threshold=0.0001", "--stop_on_collapse"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert "the embeddings collapsed in epoch 1" in result.stderr and "--hardest_warmup_epochs" in result.stderr
    assert "this run's embeddings collapsed" in result.stderr  # repeated at the end, where it is seen
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["collapse"]["collapsed_epoch"] == 1 and summary["collapse"]["stopped"]
    assert summary["epochs_run"] == 1
    assert 0 < summary["final_train_metrics"]["collapse/image_cosine"] <= 1
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "logs" / "train"), size_guidance={"tensors": 0})
    events.Reload()
    assert {"epoch_collapse/image_cosine", "epoch_collapse/text_cosine"} <= set(events.Tags()["tensors"])

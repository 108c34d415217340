"""DualEncoder: unit embeddings, weighted loss terms logged one by one, training reduces the loss, config."""

import numpy as np
import pytest
import tensorflow as tf

import kitm  # noqa: F401
import keras
from kitm.layers import GRUTextEncoder, SmallConvEncoder, build_image_encoder
from kitm.losses import TripletLoss, triplet_loss
from kitm.models import DualEncoder


def _model(vocabulary_size=20):
    return DualEncoder(SmallConvEncoder(filters=(8, 8, 8, 8), width=16), GRUTextEncoder(vocabulary_size, 8, 8),
                       embedding_dim=12)


def _batch(b=8, seed=0):
    rng = np.random.default_rng(seed)
    x = {"image": rng.random((b, 32, 32, 3), dtype=np.float32),
         "tokens": rng.integers(1, 20, size=(b, 6)).astype(np.int32)}
    return x, {"image_index": np.arange(b, dtype=np.int32)}


def test_embeddings_are_unit_vectors_of_the_joint_size():
    model = _model()
    x, _ = _batch()
    out = model(x)
    assert out["image"].shape == (8, 12) and out["text"].shape == (8, 12)
    np.testing.assert_allclose(np.linalg.norm(out["image"], axis=1), 1, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(out["text"], axis=1), 1, atol=1e-5)


def test_compute_loss_is_the_weighted_sum_of_terms_and_logs_each():
    model = _model()
    model.compile("adam", losses={"hard": TripletLoss(0.2, True), "all": TripletLoss(0.1, False)},
                  loss_weights={"all": 0.5})
    x, y = _batch()
    y_pred = model(x)
    s = (y_pred["image"] @ tf.transpose(y_pred["text"])).numpy()
    expected = triplet_loss(s, 0.2, True).numpy().sum() + 0.5 * triplet_loss(s, 0.1, False).numpy().sum()
    total = model.compute_loss(x, y, y_pred)
    np.testing.assert_allclose(float(total), expected, rtol=1e-5)
    names = {m.name for m in model.metrics}
    assert {"hard/i2t", "hard/t2i", "all/i2t", "all/t2i"} <= names
    i2t, t2i = (model.term_trackers[f"hard/{t}"].result().numpy() for t in ("i2t", "t2i"))
    np.testing.assert_allclose(i2t + t2i, triplet_loss(s, 0.2, True).numpy().sum(), rtol=1e-5)


def test_fit_reduces_the_loss_and_reports_terms():
    keras.utils.set_random_seed(0)
    model = _model()
    model.compile(keras.optimizers.Adam(3e-3), losses={"triplet": TripletLoss()})
    x, y = _batch(16)
    history = model.fit(tf.data.Dataset.from_tensors((x, y)).repeat(10), epochs=4, verbose=0, shuffle=False)
    assert set(history.history) >= {"loss", "triplet/i2t", "triplet/t2i"}
    losses = history.history["loss"]
    assert losses[-1] < 0.5 * losses[0]
    np.testing.assert_allclose(losses, np.add(history.history["triplet/i2t"], history.history["triplet/t2i"]),
                               rtol=1e-5)


def test_compile_rejects_keras_losses_and_unknown_weights():
    model = _model()
    with pytest.raises(ValueError, match="losses="):
        model.compile("adam", loss="mse")
    with pytest.raises(ValueError, match="not among the losses"):
        model.compile("adam", losses={"triplet": TripletLoss()}, loss_weights={"sam": 1.0})
    with pytest.raises(TypeError, match="RetrievalLoss"):
        model.compile("adam", losses={"mse": keras.losses.MeanSquaredError()})


def test_saved_and_reloaded_model_gives_the_same_embeddings(tmp_path):
    model = _model()
    x, _ = _batch()
    before = model(x)
    path = str(tmp_path / "model.keras")
    model.save(path)
    restored = keras.models.load_model(path)
    after = restored(x)
    np.testing.assert_allclose(before["image"], after["image"], atol=1e-6)
    np.testing.assert_allclose(before["text"], after["text"], atol=1e-6)


def test_image_encoders_by_name_without_downloads():
    resnet = build_image_encoder("resnet50", image_size=64, weights=None)
    assert resnet(np.zeros((1, 64, 64, 3), np.float32)).shape == (1, 2048)
    mlp = build_image_encoder("features_mlp")
    assert mlp(np.zeros((2, 10), np.float32)).shape == (2, 1024)
    with pytest.raises(ValueError, match="Unknown image encoder"):
        build_image_encoder("vit")


def test_atomic_checkpoint_leaves_only_whole_files(tmp_path):
    from kitm.callbacks.checkpoint import AtomicWeightsCheckpoint

    model = _model()
    model.compile("adam", losses={"triplet": TripletLoss()})
    x, y = _batch()
    path = tmp_path / "ckpt" / "last.weights.h5"
    model.fit(tf.data.Dataset.from_tensors((x, y)), epochs=2, verbose=0,
              callbacks=[AtomicWeightsCheckpoint(path)])
    assert sorted(p.name for p in path.parent.iterdir()) == ["last.weights.h5"]
    clone = _model()
    clone(x)
    clone.load_weights(str(path))
    np.testing.assert_allclose(clone(x)["text"], model(x)["text"], atol=1e-6)
    with pytest.raises(ValueError, match="must end in .weights.h5"):
        AtomicWeightsCheckpoint(tmp_path / "model.h5")


def test_jit_compiled_training_matches_the_plain_step(tiny_dual_encoder, tiny_batches):
    losses = {}
    for jit in (False, True):
        keras.utils.set_random_seed(0)
        model = tiny_dual_encoder(gru=False)  # XLA-compiling the GRU's loop costs 20 s on 2 cores, and adds nothing here
        model.compile(keras.optimizers.Adam(1e-3), losses={"triplet": TripletLoss()}, jit_compile=jit)
        assert model.jit_compile is jit
        losses[jit] = model.fit(tiny_batches(), epochs=2, verbose=0).history["loss"]
    assert np.all(np.isfinite(losses[True]))
    np.testing.assert_allclose(losses[True], losses[False], rtol=1e-3)  # XLA fuses differently, same maths


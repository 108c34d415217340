"""kitm.training.precision: mixed precision (bfloat16, float16 with loss scaling) trains a few real steps on CPU,
with float32 embeddings, losses and loss-owned parameters."""

import numpy as np
import pytest
import tensorflow as tf

import keras
import kitm  # noqa: F401
from kitm.losses import TripletLoss
from kitm.models import DualEncoder


@pytest.fixture
def restore_policy():
    yield
    keras.mixed_precision.set_global_policy("float32")


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision_trains_with_float32_embeddings_and_losses(policy, restore_policy, tiny_dual_encoder, tiny_batches):
    keras.utils.set_random_seed(0)
    keras.mixed_precision.set_global_policy(policy)
    model = tiny_dual_encoder()
    model.compile(keras.optimizers.Adam(1e-2, global_clipnorm=2.0), losses={"triplet": TripletLoss()})
    assert model.image_encoder.compute_dtype == policy.split("_")[1]
    assert all(v.dtype == "float32" for v in model.trainable_variables)  # float32 master weights
    if policy == "mixed_float16":  # Keras wraps the optimizer; the step scales the loss through it
        assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    before = [v.numpy().copy() for v in model.trainable_variables]
    # 8 steps: float16's dynamic loss scale starts at 2^15, where these gradients overflow; the optimizer skips
    # those steps and halves the scale until they are finite, then trains.
    history = model.fit(tiny_batches(steps=8), epochs=1, verbose=0)
    assert np.all(np.isfinite(history.history["loss"])) and history.history["loss"][0] > 0
    assert any(not np.array_equal(b, v.numpy()) for b, v in zip(before, model.trainable_variables))
    if policy == "mixed_float16":
        assert float(model.optimizer.dynamic_scale) < 2.0 ** 15 and int(model.optimizer.iterations) >= 1
    out = model({"image": tf.zeros([2, 16, 16, 3]), "tokens": tf.ones([2, 5], tf.int32)})
    assert out["image"].dtype == tf.float32 and out["text"].dtype == tf.float32
    np.testing.assert_allclose(np.linalg.norm(out["text"].numpy(), axis=1), 1.0, atol=1e-5)


def test_loss_owned_parameters_take_unscaled_gradients_under_float16_loss_scaling(restore_policy):
    """Semantic centres (a loss's own float32 parameters, their own SGD) move as in float32 while the model's
    LossScaleOptimizer works on the scaled loss (skipping its first step, which overflows at the 2^15 scale)."""
    from kitm.losses import SemanticCenterLoss

    rng = np.random.default_rng(4)
    x = {"image": rng.normal(size=(6, 5)).astype(np.float32), "tokens": rng.normal(size=(6, 7)).astype(np.float32)}
    # One step: the model's float16 step overflows and is skipped, so later embeddings would differ from float32's.
    data = tf.data.Dataset.from_tensors((x, {"image_index": np.arange(6, dtype=np.int32)}))
    centers = {}
    for policy in ("float32", "mixed_float16"):
        keras.mixed_precision.set_global_policy(policy)
        keras.utils.set_random_seed(0)
        model = DualEncoder(keras.layers.Dense(12), keras.layers.Dense(12), embedding_dim=4)
        loss = SemanticCenterLoss(6, 4, centers_initializer="random_normal")
        model.compile(keras.optimizers.Adam(1e-2), losses={"triplet": TripletLoss(), "centers": loss})
        start = loss.centers.numpy().copy()
        model.fit(data, epochs=1, verbose=0)
        centers[policy] = (start, loss.centers.numpy())
        if policy == "mixed_float16":
            assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
            assert float(model.optimizer.dynamic_scale) == 2.0 ** 14  # the overflowing step was skipped
    np.testing.assert_array_equal(centers["float32"][0], centers["mixed_float16"][0])
    moved = centers["float32"][1] - centers["float32"][0]
    assert np.abs(moved).max() > 1e-3
    # The same SGD steps up to float16 rounding of the embeddings (unscaled: a 2^15 scale would explode them).
    np.testing.assert_allclose(centers["mixed_float16"][1] - centers["mixed_float16"][0], moved, rtol=0.05,
                               atol=2e-3)


def test_precision_helper_picks_bfloat16_on_cpu(restore_policy):
    from kitm.training.precision import set_mixed_precision

    assert set_mixed_precision(True) == "mixed_bfloat16"  # no GPU on the test machines
    assert keras.mixed_precision.global_policy().name == "mixed_bfloat16"
    assert set_mixed_precision(False) == "float32"


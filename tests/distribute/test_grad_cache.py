"""Gradient caching (`DualEncoder.compile(grad_cache_chunk=N)`): the cached step's gradients are the plain step's
(float64, one device), random layers and batch-norm statistics are replayed so that the second pass sees what the
first saw, and the settings it cannot honour are refused by name. With global negatives on 2 replicas:
benchmarks/bench_global_negatives.py --check (tests/benchmarks/test_global_negatives_check.py)."""

import numpy as np
import pytest
import tensorflow as tf

import keras
from kitm import losses
from kitm.models import DualEncoder


def _model(dtype="float32", dropout=0.0, batch_norm=False):
    image_layers = [keras.layers.Dense(10, activation="tanh", dtype=dtype)]
    if batch_norm:
        image_layers.append(keras.layers.BatchNormalization(dtype=dtype))
    if dropout:
        image_layers.append(keras.layers.Dropout(dropout, seed=3, dtype=dtype))
    image = keras.Sequential(image_layers)
    text = keras.Sequential([keras.layers.Embedding(20, 10, dtype=dtype),
                             keras.layers.GlobalAveragePooling1D(dtype=dtype)])
    model = DualEncoder(image, text, embedding_dim=6, dtype=dtype)
    model.build_from_inputs({"image": tf.TensorSpec([None, 12], dtype), "tokens": tf.TensorSpec([None, 5], tf.int32)})
    return model


def _data(rows=12, dtype="float32"):
    rng = np.random.default_rng(1)
    image_index = np.repeat(np.arange(rows // 2), 2).astype(np.int32)
    x = {"image": tf.constant(rng.normal(size=(rows, 12)), dtype), "tokens": tf.constant(rng.integers(1, 20, (rows, 5)),
                                                                                         tf.int32)}
    y = {"image_index": tf.constant(image_index), "relevance": tf.constant(rng.uniform(size=(rows, rows)), dtype)}
    return x, y


def _step(chunk, loss, weights, dtype="float32", **layers):
    model = _model(dtype, **layers)
    model.set_weights(weights)
    model.compile(keras.optimizers.SGD(1.0), losses={"loss": loss}, grad_cache_chunk=chunk)
    x, y = _data(dtype=dtype)

    @tf.function
    def step(x, y):
        _, (gradients,), total, _ = model.compute_gradients(x, y)
        return total, gradients

    total, gradients = step(x, y)
    gradients = [np.zeros(v.shape) if g is None else tf.convert_to_tensor(g).numpy()
                 for g, v in zip(gradients, model.optimizer_variables())]
    return float(total), gradients, model


@pytest.mark.parametrize("make", [lambda: losses.GradedInfoNCELoss(0.2, logit_scale_init=4.0, dtype="float64"),
                                  lambda: losses.SigLIPLoss(4.0, bias_init=-2.0, dtype="float64")],
                         ids=["graded_infonce", "siglip"])
@pytest.mark.parametrize("chunk", [3, 4])
def test_the_cached_step_has_the_plain_steps_loss_and_gradients(make, chunk):
    policy = keras.config.dtype_policy()
    keras.config.set_dtype_policy("float64")  # the projections and the losses' variables too
    try:
        weights = _model("float64").get_weights()
        plain_loss, plain, _ = _step(0, make(), weights, "float64")
        cached_loss, cached, _ = _step(chunk, make(), weights, "float64")
    finally:
        keras.config.set_dtype_policy(policy)
    assert cached_loss == pytest.approx(plain_loss, abs=1e-12)
    assert len(cached) == len(plain) and any(np.abs(g).max() > 0 for g in plain)
    for a, b in zip(cached, plain):
        np.testing.assert_allclose(a, b, atol=1e-12)


def test_random_layers_and_batch_norm_are_replayed_between_the_two_passes():
    # One chunk of the whole batch: the second pass must draw the first pass's dropout mask and start from its
    # batch-norm statistics, so the cached step equals the plain step; the statistics move once, not twice.
    weights = _model(dropout=0.5, batch_norm=True).get_weights()
    plain_loss, plain, plain_model = _step(0, losses.InfoNCELoss(), weights, dropout=0.5, batch_norm=True)
    cached_loss, cached, cached_model = _step(12, losses.InfoNCELoss(), weights, dropout=0.5, batch_norm=True)
    assert cached_loss == pytest.approx(plain_loss, rel=1e-6)
    for a, b in zip(cached, plain):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    for a, b in zip(cached_model.non_trainable_variables, plain_model.non_trainable_variables):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)


def test_fit_trains_with_gradient_caching():
    model = _model()
    model.compile(keras.optimizers.Adam(1e-2), losses={"infonce": losses.InfoNCELoss()}, grad_cache_chunk=4)
    x, y = _data()
    history = model.fit(tf.data.Dataset.from_tensors((x, y)).repeat(8), epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    assert int(model.optimizer.iterations) == 8


def test_gradient_caching_refuses_what_it_cannot_honour():
    model = _model()
    with pytest.raises(ValueError, match="grad_cache_chunk must be an integer >= 0"):
        model.compile("sgd", losses={"infonce": losses.InfoNCELoss()}, grad_cache_chunk=-1)

    class OwnState(losses.RetrievalLoss):
        def optimizer_groups(self):
            return []

    with pytest.raises(ValueError, match="grad_cache_chunk=4: the loss 'centers'.*cannot replay.*grad_cache_chunk=0"):
        model.compile("sgd", losses={"centers": OwnState(name="own")}, grad_cache_chunk=4)
    model.compile("sgd", losses={"infonce": losses.InfoNCELoss()}, grad_cache_chunk=5)
    x, y = _data()
    with pytest.raises(ValueError, match="grad_cache_chunk=5 must divide the per-replica batch of 12 rows"):
        model.compute_gradients(x, y)


def test_gradient_caching_under_float16_loss_scaling_takes_the_scaled_gradients():
    # The chain runs on the scaled loss (the LossScaleOptimizer unscales the sum): the cached step's gradients are
    # the plain step's up to float16 resolution.
    policy = keras.config.dtype_policy()
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        weights = _model().get_weights()
        results = []
        for chunk in (0, 4):
            model = _model()
            model.set_weights(weights)
            model.compile(keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1), initial_scale=4.0),
                          losses={"infonce": losses.InfoNCELoss()}, grad_cache_chunk=chunk)

            @tf.function
            def step(x, y):
                _, (gradients,), total, _ = model.compute_gradients(x, y)
                return total, gradients

            total, gradients = step(*_data())
            results.append((float(total), [tf.convert_to_tensor(g).numpy() for g in gradients]))
    finally:
        keras.mixed_precision.set_global_policy(policy)
    (plain_loss, plain), (cached_loss, cached) = results
    assert cached_loss == pytest.approx(plain_loss, rel=1e-6)
    for a, b in zip(cached, plain):
        assert np.isfinite(a).all()
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-3 * max(1.0, np.abs(b).max()))

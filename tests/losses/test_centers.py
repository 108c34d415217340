"""Semantic center loss (Malali & Keller, Eq. 6), image-index cross-entropy heads, and the loss-owned parameters'
own optimizers in `fit` (one device and MirroredStrategy on 2 logical CPUs)."""

import pathlib
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import kitm  # noqa: F401
import keras
from kitm.losses import TripletLoss
from kitm.losses.centers import (ImageIndexCrossEntropy, SemanticCenterLoss, index_cross_entropy_terms,
                                 scale_gradient, semantic_center_loss, semantic_center_terms)
from kitm.models import DualEncoder

# DualEncoder.train_step routes loss-owned variables (centres, heads) to their own optimizers.
TrainingDualEncoder = DualEncoder


def unit(rng, b, d=5):
    x = rng.normal(size=(b, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def center_oracle(x, y, centers, delta):
    """Eq. 6 per row with explicit loops."""
    rows = []
    for p in range(len(x)):
        image = max(sum((x[p, k] - centers[p, k]) ** 2 for k in range(x.shape[1])) - delta, 0.0)
        text = max(sum((y[p, k] - centers[p, k]) ** 2 for k in range(x.shape[1])) - delta, 0.0)
        rows.append((image, text))
    return np.array(rows)


def center_sgd_oracle(centers, x, y, image_index, delta, learning_rate, steps=1):
    """SGD on the batch-mean of Eq. 6 w.r.t. the centres: d/dc [|v - c|^2 - delta]+ = -2 (v - c) when active."""
    centers = centers.copy()
    b = len(x)
    for _ in range(steps):
        gradient = np.zeros_like(centers)
        for p in range(b):
            c = centers[image_index[p]]
            for v in (x[p], y[p]):
                if np.sum((v - c) ** 2) > delta:
                    gradient[image_index[p]] += -2.0 * (v - c) / b
        centers -= learning_rate * gradient
    return centers


def test_hand_computed_example():
    value = semantic_center_loss([[1.0, 0.0]], [[0.0, 1.0]], [[0.5, 0.5]], delta=0.1)
    np.testing.assert_allclose(value.numpy(), [0.8], rtol=1e-6)


@pytest.mark.parametrize("delta", [0.0, 0.1, 0.7])
def test_center_terms_match_the_loop_oracle(delta):
    rng = np.random.default_rng(1)
    x, y = unit(rng, 6), unit(rng, 6)
    centers = rng.normal(size=(6, 5)) * 0.6  # negative entries, some rows within delta of a sample
    centers[0] = x[0] + 0.01  # inside the hinge for delta > 0: contributes 0
    image, text = semantic_center_terms(x, y, centers, delta=delta)
    expected = center_oracle(x, y, centers, delta)
    np.testing.assert_allclose(np.stack([image.numpy(), text.numpy()], axis=1), expected, rtol=1e-12, atol=1e-14)
    if delta > 0:
        assert image.numpy()[0] == 0.0
    np.testing.assert_allclose(semantic_center_loss(x, y, centers, delta=delta).numpy(), expected.sum(axis=1),
                               rtol=1e-12)


def test_gradients_match_finite_differences():
    rng = np.random.default_rng(2)
    x, y = unit(rng, 4), unit(rng, 4)
    centers = rng.normal(size=(4, 5))

    def f(image, text, c):
        return tf.reduce_sum(semantic_center_loss(image, text, c, delta=0.2))

    theoretical, numerical = tf.test.compute_gradient(f, [tf.constant(x), tf.constant(y), tf.constant(centers)])
    for t, n in zip(theoretical, numerical):
        np.testing.assert_allclose(t, n, atol=1e-6)


def test_scale_gradient_is_the_identity_forward_and_scales_backward():
    value = tf.constant([1.5, -2.0])
    with tf.GradientTape() as tape:
        tape.watch(value)
        scaled = scale_gradient(value, 0.25)
        total = tf.reduce_sum(3.0 * scaled)
    assert scaled.numpy().tolist() == [1.5, -2.0]
    np.testing.assert_allclose(tape.gradient(total, value).numpy(), [0.75, 0.75])


def test_loss_gathers_each_rows_center_and_its_gradient_is_sparse_and_batch_mean():
    rng = np.random.default_rng(3)
    num_images, d = 10, 5
    loss = SemanticCenterLoss(num_images, d, delta=0.05)
    table = rng.normal(size=(num_images, d)).astype(np.float32)
    loss.centers.assign(table)
    x, y = unit(rng, 4, d).astype(np.float32), unit(rng, 4, d).astype(np.float32)
    index = np.array([7, 2, 7, 0], np.int32)
    with tf.GradientTape(persistent=True) as tape:
        image = tf.constant(x)
        tape.watch(image)
        terms = loss.compute_terms({"image_index": index}, {"image": image, "text": y})
        total = tf.add_n([tf.reduce_sum(v) for v in terms.values()])
    expected = center_oracle(x.astype(np.float64), y.astype(np.float64), table[index].astype(np.float64), 0.05)
    np.testing.assert_allclose(terms["image"].numpy(), expected[:, 0], rtol=1e-5)
    np.testing.assert_allclose(terms["text"].numpy(), expected[:, 1], rtol=1e-5)
    gradient = tape.gradient(total, loss.centers)
    assert isinstance(gradient, tf.IndexedSlices)
    dense = tf.convert_to_tensor(gradient).numpy()
    # The step the centre optimizer takes is on the batch mean: (1/B) * d(sum)/dc.
    oracle_step = table - center_sgd_oracle(table.astype(np.float64), x, y, index, 0.05, 1.0)
    np.testing.assert_allclose(dense, oracle_step, rtol=1e-4, atol=1e-6)
    assert not np.any(dense[[1, 3, 4, 5, 6, 8, 9]])
    # The embeddings' gradient is the plain gradient of the sum (no scaling).
    np.testing.assert_allclose(tape.gradient(total, image).numpy(),
                               np.where(expected[:, :1] > 0, 2 * (x - table[index]), 0), rtol=1e-4, atol=1e-6)


def test_mean_reduction_does_not_rescale_the_center_gradient():
    loss = SemanticCenterLoss(3, 2, delta=0.0, reduction="sum_over_batch_size")
    x = np.array([[1.0, 0.0], [0.0, 1.0]], np.float32)
    with tf.GradientTape() as tape:
        terms = loss.compute_terms({"image_index": [0, 1]}, {"image": x, "text": x})
        total = tf.add_n([tf.reduce_sum(v) for v in terms.values()])  # the plain sum: its gradient is unscaled
    np.testing.assert_allclose(tf.convert_to_tensor(tape.gradient(total, loss.centers)).numpy(),
                               [[-4.0, 0.0], [0.0, -4.0], [0.0, 0.0]])


def test_cross_entropy_heads_match_a_loop_oracle_and_keras():
    rng = np.random.default_rng(4)
    logits_i, logits_t = rng.normal(size=(5, 7)) * 3, rng.normal(size=(5, 7)) * 3
    index = np.array([0, 6, 3, 3, 1])
    image, text = index_cross_entropy_terms(logits_i, logits_t, index)
    for logits, got in ((logits_i, image), (logits_t, text)):
        expected = [-(logits[p, index[p]] - np.log(np.sum(np.exp(logits[p])))) for p in range(5)]
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12)
        keras_value = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="sum")(index, logits)
        np.testing.assert_allclose(float(keras_value), sum(expected), rtol=1e-6)

    loss = ImageIndexCrossEntropy(7, 5)
    x, y = unit(rng, 5).astype(np.float32), unit(rng, 5).astype(np.float32)
    terms = loss.compute_terms({"image_index": index}, {"image": x, "text": y})
    heads = loss.heads
    expected_logits = x @ heads.image_head.kernel.numpy() + heads.image_head.bias.numpy()
    np.testing.assert_allclose(terms["image"].numpy(), index_cross_entropy_terms(expected_logits, expected_logits,
                                                                                 index)[0].numpy(), rtol=1e-5)
    assert {v.path for _, group in loss.optimizer_groups() for v in group} == {
        v.path for v in heads.trainable_variables}


def test_errors_name_the_argument():
    loss = SemanticCenterLoss(4, 3)
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(ValueError, match="image_index"):
        loss.compute_terms({}, {"image": x, "text": x})
    with pytest.raises(ValueError, match="embedding_dim=3"):
        loss.compute_terms({"image_index": [0, 1]}, {"image": np.zeros((2, 5), np.float32),
                                                     "text": np.zeros((2, 5), np.float32)})
    with pytest.raises(tf.errors.InvalidArgumentError, match="num_images=4"):
        loss.compute_terms({"image_index": [0, 4]}, {"image": x, "text": x})
    with pytest.raises(tf.errors.InvalidArgumentError, match=">= 0"):
        loss.compute_terms({"image_index": [-1, 0]}, {"image": x, "text": x})
    with pytest.raises(ValueError, match="y_pred"):
        loss.compute_terms({"image_index": [0, 1]}, x)
    with pytest.raises(ValueError, match="num_images"):
        SemanticCenterLoss(0, 3)
    with pytest.raises(ValueError, match="delta"):
        SemanticCenterLoss(4, 3, delta=-1.0)
    with pytest.raises(ValueError, match="centers must be"):
        semantic_center_terms(x, x, np.zeros((3, 3)))
    with pytest.raises(ValueError, match="centers_optimizer"):
        SemanticCenterLoss(4, 3, centers_optimizer=object())


def test_get_config_round_trips():
    losses = [SemanticCenterLoss(6, 4, delta=0.3, centers_learning_rate=0.1, name="c"),
              SemanticCenterLoss(6, 4, centers_optimizer=keras.optimizers.SGD(0.2, momentum=0.5),
                                 centers_initializer="random_normal"),
              ImageIndexCrossEntropy(6, 4, optimizer=keras.optimizers.Adam(1e-3), name="ce"),
              ImageIndexCrossEntropy(6, 4)]
    for loss in losses:
        config = loss.get_config()
        restored = type(loss).from_config(config)
        assert restored.get_config() == config
        assert keras.losses.deserialize(keras.losses.serialize(loss)).get_config() == config
    assert losses[1].centers_optimizer.momentum == 0.5
    restored = SemanticCenterLoss.from_config(losses[1].get_config())
    assert isinstance(restored.centers_optimizer, keras.optimizers.SGD) and restored.centers_optimizer.momentum == 0.5


# ------------------------------------------------------------------------------------------------
# fit: the centre table and the heads train with their own optimizers
# ------------------------------------------------------------------------------------------------

def identity_model(dim, cls=TrainingDualEncoder):
    model = cls(keras.layers.Identity(), keras.layers.Identity(), embedding_dim=dim)
    model.build_from_inputs({"image": tf.TensorSpec([None, dim]), "tokens": tf.TensorSpec([None, dim])})
    for projection in (model.image_projection, model.text_projection):
        projection.kernel.assign(np.eye(dim, dtype=np.float32))
        projection.bias.assign(np.zeros(dim, np.float32))
    model.trainable = False
    return model


def test_fit_updates_centers_by_sgd_on_the_batch_mean_and_heads_by_their_optimizer():
    rng = np.random.default_rng(5)
    num_images, d, b = 9, 5, 6
    x, y = unit(rng, b, d).astype(np.float32), unit(rng, b, d).astype(np.float32)
    index = np.array([3, 0, 3, 8, 1, 5], np.int32)  # image 3 twice: its two rows add up
    model = identity_model(d)
    centers = SemanticCenterLoss(num_images, d, delta=0.3, centers_initializer="random_normal")
    heads = ImageIndexCrossEntropy(num_images, d, optimizer=keras.optimizers.SGD(0.1))
    start = centers.centers.numpy().astype(np.float64)
    kernel = heads.heads.image_head.kernel.numpy()
    model.compile("sgd", losses={"centers": centers, "ce": heads})
    data = tf.data.Dataset.from_tensors(({"image": x, "tokens": y}, {"image_index": index})).repeat(3)
    history = model.fit(data, epochs=1, verbose=0, shuffle=False)
    expected = center_sgd_oracle(start, x.astype(np.float64), y.astype(np.float64), index, 0.3, 0.5, steps=3)
    np.testing.assert_allclose(centers.centers.numpy(), expected, rtol=1e-5, atol=1e-6)
    assert not np.allclose(heads.heads.image_head.kernel.numpy(), kernel)
    np.testing.assert_allclose(model.image_projection.kernel.numpy(), np.eye(d))  # the frozen model stays
    assert set(history.history) >= {"loss", "centers/image", "centers/text", "ce/image", "ce/text"}


def test_end_to_end_training_lowers_every_term_and_freezing_the_table_keeps_it():
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(6)
    n, d = 16, 6
    model = TrainingDualEncoder(keras.layers.Dense(12), keras.layers.Dense(12), embedding_dim=d)
    centers = SemanticCenterLoss(n, d)
    heads = ImageIndexCrossEntropy(n, d, optimizer=keras.optimizers.Adam(1e-2))
    model.compile(keras.optimizers.Adam(1e-2), losses={"triplet": TripletLoss(), "centers": centers, "ce": heads})
    x = {"image": rng.normal(size=(n, 5)).astype(np.float32), "tokens": rng.normal(size=(n, 7)).astype(np.float32)}
    data = tf.data.Dataset.from_tensor_slices((x, {"image_index": np.arange(n, dtype=np.int32)})).batch(8)
    history = model.fit(data.repeat(6), epochs=3, verbose=0, shuffle=False).history
    for key in ("loss", "centers/image", "centers/text", "ce/image", "ce/text"):
        assert history[key][-1] < history[key][0], key
    terms = sum(np.array(history[k]) for k in history if "/" in k)
    np.testing.assert_allclose(history["loss"], terms, rtol=1e-5)

    centers.table.trainable = False
    assert centers.optimizer_groups() == []
    frozen = centers.centers.numpy()
    # As for any Keras freezing, compile again so that the training step is traced anew.
    model.compile(keras.optimizers.Adam(1e-2), losses={"triplet": TripletLoss(), "centers": centers, "ce": heads})
    model.fit(data, epochs=1, verbose=0, shuffle=False)
    np.testing.assert_array_equal(centers.centers.numpy(), frozen)


# ------------------------------------------------------------------------------------------------
# MirroredStrategy on 2 logical CPUs: centres, adaptive-margin counters, ladder relevance sample
# ------------------------------------------------------------------------------------------------

DISTRIBUTED_SCRIPT = textwrap.dedent("""
    import os, sys, warnings
    warnings.simplefilter("ignore")
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import numpy as np
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    sys.path.insert(0, sys.argv[1])
    import kitm
    import keras
    from test_centers import TrainingDualEncoder, center_sgd_oracle, identity_model
    from kitm.losses.centers import SemanticCenterLoss
    from kitm.losses.adaptive_margin import AdaptiveMarginTripletLoss
    from kitm.callbacks.adaptive_margin import AdaptiveMarginCallback
    from kitm.losses import ReclusterableLadderLoss

    d, b, steps, n_images = 6, 8, 3, 10
    rng = np.random.default_rng(0)
    x = rng.normal(size=(b, d)); x /= np.linalg.norm(x, axis=1, keepdims=True)
    y = rng.normal(size=(b, d)); y /= np.linalg.norm(y, axis=1, keepdims=True)
    index = np.array([0, 1, 2, 3, 0, 5, 6, 7], np.int32)  # image 0 on both replicas
    blocks = [rng.uniform(-0.5, 1.0, size=(4, 4)) for _ in range(2)]
    relevance = np.concatenate(blocks).astype(np.float32)  # [B, b]: replica r gets its own [b, b] block

    # Expected adaptive-margin counts: the single-device loss on each replica's half, added.
    expected_counts = np.zeros(4, np.int64)
    for half in (slice(0, 4), slice(4, 8)):
        single = AdaptiveMarginTripletLoss(0.2, 0.2, sampling="all")
        single({"image_index": index[half]}, {"image": x[half].astype(np.float32), "text": y[half].astype(np.float32)})
        s = single.statistics()
        expected_counts += [s["satisfied_x"], s["used_x"], s["satisfied_y"], s["used_y"]]

    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        model = identity_model(d)
        centers = SemanticCenterLoss(n_images, d, delta=0.2, centers_initializer="random_normal")
        margin_loss = AdaptiveMarginTripletLoss(0.2, 0.2, sampling="all")
        ladder = ReclusterableLadderLoss(sample_size=64)
        model.compile("sgd", losses={"centers": centers, "amt": margin_loss, "ladder": ladder})
    start = centers.centers.numpy().astype(np.float64)
    data = tf.data.Dataset.from_tensors(({"image": x.astype(np.float32), "tokens": y.astype(np.float32)},
                                         {"image_index": index, "relevance": relevance}))
    callback = AdaptiveMarginCallback(every_batches=steps, share_threshold=0.0, multiplier=1.5)
    warnings.simplefilter("ignore")
    model.fit(data.repeat(steps), epochs=1, verbose=0, callbacks=[callback])

    # 1. Centres: SGD on the global batch mean, whatever the replica count (gradients all-reduced).
    expected = center_sgd_oracle(start, x, y, index, 0.2, 0.5, steps=steps)
    for copy in strategy.experimental_local_results(centers.centers.value):
        assert np.allclose(copy.numpy(), expected, rtol=1e-5, atol=1e-6), (copy.numpy(), expected)
    # 2. Adaptive-margin counters: summed over replicas; the margins moved on every replica; counters reset.
    u = callback.updates[0]
    got = np.array([u["satisfied_x"], u["used_x"], u["satisfied_y"], u["used_y"]])
    assert np.array_equal(got, steps * expected_counts), (got, steps * expected_counts)
    assert np.allclose([float(v.numpy()) for v in strategy.experimental_local_results(margin_loss.margin_x)], 0.3)
    assert margin_loss.statistics()["used_x"] == 0
    # 3. Ladder relevance sample: every replica's negatives (off-diagonal of its own block), merged.
    offered = np.concatenate([blk[~np.eye(4, dtype=bool)] for blk in blocks] * steps)
    assert ladder.relevance_sample.offered_count() == offered.size == 72
    sample = ladder.relevance_sample.sample()
    assert sample.size == 64 and np.all(np.isin(sample.astype(np.float32), offered.astype(np.float32)))
    print("OK", got.tolist())
""")


def test_loss_owned_state_under_mirrored_strategy(kitm_python):
    # A fresh process: logical devices must be configured before TensorFlow initialises.
    tests_dir = str(pathlib.Path(__file__).resolve().parent)
    result = kitm_python(["-c", DISTRIBUTED_SCRIPT, tests_dir], timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "OK" in result.stdout

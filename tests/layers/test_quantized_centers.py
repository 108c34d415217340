"""SoftmaxQuantizedCenters (Malali & Keller, Sec. 3.4) and QuantizedCenterLoss (Eq. 7): loop oracles, scikit-learn
k-means initialisation, gradients, config, and phase-2 training of the quantizer alone."""

import numpy as np
import pytest
import tensorflow as tf

import kitm  # noqa: F401
import keras
from kitm.layers.quantized_centers import SoftmaxQuantizedCenters
from kitm.losses.centers import QuantizedCenterLoss, center_repulsion, quantized_center_loss, quantized_center_terms


def unit(rng, b, d=4):
    x = rng.normal(size=(b, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def softmax(z):
    z = z - z.max(axis=1, keepdims=True)
    return np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)


def repulsion_oracle(centers, delta):
    total = 0.0
    for k1 in range(len(centers)):
        for k2 in range(len(centers)):
            if k1 != k2:
                total += max(2 * delta - np.sum((centers[k1] - centers[k2]) ** 2), 0.0)
    return total


def quantized_oracle(x, y, wx, wy, centers, delta, a_c):
    """Eq. 7 per row with explicit loops; the repulsion shared evenly by the B rows."""
    b = len(x)
    rows = np.zeros((b, 3))
    for p in range(b):
        for j in range(len(centers)):
            rows[p, 0] += wx[p, j] * max(np.sum((x[p] - centers[j]) ** 2) - delta, 0.0)
            rows[p, 1] += wy[p, j] * max(np.sum((y[p] - centers[j]) ** 2) - delta, 0.0)
    rows[:, 2] = a_c * repulsion_oracle(centers, delta) / b
    return rows


def test_layer_is_a_softmax_of_a_dense_layer_on_the_embedding():
    rng = np.random.default_rng(0)
    layer = SoftmaxQuantizedCenters(5)
    x = unit(rng, 3).astype(np.float32)
    w = layer(x).numpy()
    kernel, bias = layer.assignment.kernel.numpy(), layer.assignment.bias.numpy()
    np.testing.assert_allclose(w, softmax(x @ kernel + bias), rtol=1e-5)
    np.testing.assert_allclose(w.sum(axis=1), 1.0, rtol=1e-6)  # Eqs. 8-9
    assert layer.centers.shape == (5, 4) and layer.compute_output_shape((None, 4)) == (None, 5)
    wide = SoftmaxQuantizedCenters(400)
    wide.build((None, 64))
    assert 0.8 < np.mean(np.linalg.norm(wide.centers.numpy(), axis=1)) < 1.2  # about unit norm, like the embeddings


def test_initialize_from_is_scikit_learn_kmeans_and_netvlad_option():
    from sklearn.cluster import KMeans

    rng = np.random.default_rng(1)
    unquantized = np.concatenate([rng.normal(loc, 0.1, size=(20, 4)) for loc in (-1.0, 0.0, 2.0)])
    layer = SoftmaxQuantizedCenters(3)  # unbuilt: initialize_from builds it
    labels = layer.initialize_from(unquantized, seed=7)
    reference = KMeans(n_clusters=3, n_init=1, max_iter=300, random_state=7).fit(unquantized)
    np.testing.assert_allclose(layer.centers.numpy(), reference.cluster_centers_, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(labels, reference.labels_)
    kernel = layer.assignment.kernel.numpy().copy()

    # NetVLAD start: softmax(2 a c.e - a |c|^2) = softmax(-a |e - c|^2).
    labels = layer.initialize_from(unquantized, seed=7, assignment_scale=3.0)
    e = unit(rng, 5)
    centroids = layer.centers.numpy().astype(np.float64)
    distances = ((e[:, None, :] - centroids[None]) ** 2).sum(axis=2)
    np.testing.assert_allclose(layer(e.astype(np.float32)).numpy(), softmax(-3.0 * distances), rtol=1e-4, atol=1e-6)
    assert not np.allclose(layer.assignment.kernel.numpy(), kernel)


def test_layer_errors_and_config():
    with pytest.raises(ValueError, match="num_centers"):
        SoftmaxQuantizedCenters(0)
    layer = SoftmaxQuantizedCenters(4, centers_initializer="zeros", name="q")
    layer.build((None, 3))
    with pytest.raises(ValueError, match="at least num_centers=4"):
        layer.initialize_from(np.zeros((3, 3)))
    with pytest.raises(ValueError, match="D = 3"):
        layer.initialize_from(np.zeros((10, 5)))
    with pytest.raises(ValueError, match="finite"):
        layer.initialize_from(np.full((10, 3), np.nan))
    with pytest.raises(ValueError, match="assignment_scale"):
        layer.initialize_from(np.random.default_rng(0).normal(size=(10, 3)), assignment_scale=0.0)
    config = layer.get_config()
    restored = SoftmaxQuantizedCenters.from_config(config)
    assert restored.get_config() == config
    clone = keras.layers.deserialize(keras.layers.serialize(layer))
    assert clone.num_centers == 4 and clone.centers.shape == (4, 3)


@pytest.mark.parametrize("delta", [0.0, 0.3])
def test_quantized_terms_match_the_loop_oracle(delta):
    rng = np.random.default_rng(2)
    b, nq = 5, 4
    x, y = unit(rng, b), unit(rng, b)
    wx, wy = softmax(rng.normal(size=(b, nq))), softmax(rng.normal(size=(b, nq)))
    centers = rng.normal(size=(nq, 4)) * 0.4  # close centres: some repulsion hinges are active
    centers[1] = centers[0] + 0.05
    image, text, repulsion = quantized_center_terms(x, y, wx, wy, centers, delta=delta, repulsion_weight=1.5)
    expected = quantized_oracle(x, y, wx, wy, centers, delta, 1.5)
    np.testing.assert_allclose(np.stack([image.numpy(), text.numpy(), repulsion.numpy()], axis=1), expected,
                               rtol=1e-10, atol=1e-12)
    if delta > 0:
        assert expected[0, 2] > 0
    np.testing.assert_allclose(quantized_center_loss(x, y, wx, wy, centers, delta=delta, repulsion_weight=1.5).numpy(),
                               expected.sum(axis=1), rtol=1e-10)


def test_repulsion_counts_ordered_pairs_and_chunking_changes_nothing():
    centers = np.array([[0.0, 0.0], [0.1, 0.0], [3.0, 0.0]])
    # Only the pair (0, 1) is within 2 delta = 0.2: [0.2 - 0.01]+ counted for (0, 1) and (1, 0).
    assert float(center_repulsion(centers, delta=0.1)) == pytest.approx(2 * 0.19)
    rng = np.random.default_rng(3)
    many = rng.normal(size=(11, 3)) * 0.3
    expected = repulsion_oracle(many, 0.25)
    for chunk in (1, 3, 11, 64):
        np.testing.assert_allclose(float(center_repulsion(many, delta=0.25, chunk_size=chunk)), expected, rtol=1e-10)
    assert float(center_repulsion(many[:1], delta=0.25)) == 0.0  # one centre: no pair


def test_gradients_match_finite_differences():
    rng = np.random.default_rng(4)
    x, y = unit(rng, 3), unit(rng, 3)
    wx, wy = softmax(rng.normal(size=(3, 4))), softmax(rng.normal(size=(3, 4)))
    centers = rng.normal(size=(4, 4)) * 0.4

    def f(image, weights, c):
        return tf.reduce_sum(quantized_center_loss(image, y, weights, wy, c, delta=0.3))

    theoretical, numerical = tf.test.compute_gradient(f, [tf.constant(x), tf.constant(wx), tf.constant(centers)])
    for t, n in zip(theoretical, numerical):
        np.testing.assert_allclose(t, n, atol=1e-6)


def test_loss_class_uses_its_layer_and_owns_two_optimizer_groups():
    rng = np.random.default_rng(5)
    loss = QuantizedCenterLoss(3, 4, delta=0.2)
    x, y = unit(rng, 5).astype(np.float32), unit(rng, 5).astype(np.float32)
    with tf.GradientTape() as tape:
        terms = loss.compute_terms(None, {"image": x, "text": y})
        total = tf.add_n([tf.reduce_sum(v) for v in terms.values()])
    layer = loss.quantizer
    expected = quantized_oracle(x.astype(np.float64), y.astype(np.float64), layer(x).numpy().astype(np.float64),
                                layer(y).numpy().astype(np.float64), layer.centers.numpy().astype(np.float64), 0.2, 1.0)
    got = np.stack([terms["image"].numpy(), terms["text"].numpy(), terms["repulsion"].numpy()], axis=1)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    groups = loss.optimizer_groups()
    assert [type(opt).__name__ for opt, _ in groups] == ["Adam", "SGD"]
    assert len(groups[0][1]) == 2 and groups[1][1][0] is layer.centers
    # The centres' gradient is that of the batch mean (the sum's gradient / B).
    center_gradient = tape.gradient(total, layer.centers).numpy()
    with tf.GradientTape() as tape:
        c = tf.convert_to_tensor(layer.centers)
        tape.watch(c)
        plain = tf.reduce_sum(quantized_center_loss(x, y, layer(x), layer(y), c, delta=0.2))
    np.testing.assert_allclose(center_gradient, tape.gradient(plain, c).numpy() / 5, rtol=1e-5, atol=1e-7)
    layer.trainable = False
    assert loss.optimizer_groups() == []


def test_loss_initialize_from_config_and_errors():
    rng = np.random.default_rng(6)
    loss = QuantizedCenterLoss(2, 3, delta=0.05, repulsion_weight=0.5, chunk_size=7,
                               centers_optimizer=keras.optimizers.SGD(0.3), name="qc")
    labels = loss.initialize_from(rng.normal(size=(12, 3)), seed=1)
    assert labels.shape == (12,) and set(labels) == {0, 1}
    config = loss.get_config()
    restored = QuantizedCenterLoss.from_config(config)
    assert restored.get_config() == config
    assert keras.losses.deserialize(keras.losses.serialize(loss)).get_config() == config
    with pytest.raises(ValueError, match="quantizer"):
        QuantizedCenterLoss(3, 3, quantizer=SoftmaxQuantizedCenters(4))
    with pytest.raises(ValueError, match="embedding_dim=3"):
        loss.compute_terms(None, {"image": np.zeros((2, 4), np.float32), "text": np.zeros((2, 4), np.float32)})
    with pytest.raises(ValueError, match="repulsion_weight"):
        QuantizedCenterLoss(2, 3, repulsion_weight=-1)
    with pytest.raises(ValueError, match="image_weights"):
        quantized_center_terms(np.zeros((2, 3)), np.zeros((2, 3)), np.zeros((2, 5)), np.zeros((2, 5)), np.zeros((4, 3)))


def test_phase_two_trains_the_quantizer_with_the_model_frozen(identity_model):
    rng = np.random.default_rng(7)
    d, b = 4, 6
    x, y = unit(rng, b, d).astype(np.float32), unit(rng, b, d).astype(np.float32)
    model = identity_model(d)
    loss = QuantizedCenterLoss(3, d, delta=0.1, assignment_optimizer=keras.optimizers.Adam(1e-2))
    loss.initialize_from(np.concatenate([x, y]), seed=0)
    centers, kernel = loss.centers.numpy().copy(), loss.quantizer.assignment.kernel.numpy().copy()
    model.compile("sgd", losses={"quantized": loss})
    data = tf.data.Dataset.from_tensors(({"image": x, "tokens": y}, {"image_index": np.arange(b, dtype=np.int32)}))
    history = model.fit(data.repeat(20), epochs=2, verbose=0, shuffle=False).history
    assert not np.allclose(loss.centers.numpy(), centers)
    assert not np.allclose(loss.quantizer.assignment.kernel.numpy(), kernel)
    np.testing.assert_allclose(model.image_projection.kernel.numpy(), np.eye(d))
    total = np.add(history["quantized/image"], history["quantized/text"]) + history["quantized/repulsion"]
    assert total[-1] < total[0]

"""TripletLoss against a numpy oracle written from docs/methods.md's VSE++ equation."""

import numpy as np
import pytest
import tensorflow as tf

import kitm  # noqa: F401  (selects the TensorFlow backend)
import keras
from kitm.losses import TripletLoss, triplet_loss


def oracle(s, margin, max_violation, image_index=None):
    """Per-row VSE++ loss by explicit loops over anchors and negatives."""
    b = s.shape[0]
    idx = np.arange(b) if image_index is None else np.asarray(image_index)
    rows = np.zeros(b)
    for p in range(b):
        i2t = [max(0.0, margin + s[p, q] - s[p, p]) for q in range(b) if idx[q] != idx[p]]
        t2i = [max(0.0, margin + s[m, p] - s[p, p]) for m in range(b) if idx[m] != idx[p]]
        agg = max if max_violation else sum
        rows[p] = (agg(i2t) if i2t else 0.0) + (agg(t2i) if t2i else 0.0)
    return rows


def test_hand_computed_example():
    s = np.array([[0.9, 0.5], [0.8, 0.6]])
    np.testing.assert_allclose(triplet_loss(s, 0.2, True).numpy(), [0.1, 0.5], atol=1e-12)
    # Sum over negatives is the same with one negative per anchor.
    np.testing.assert_allclose(triplet_loss(s, 0.2, False).numpy(), [0.1, 0.5], atol=1e-12)


@pytest.mark.parametrize("max_violation", [True, False])
@pytest.mark.parametrize("margin", [0.0, 0.2, 0.5])
def test_matches_oracle_on_random_including_negative_similarities(max_violation, margin):
    rng = np.random.default_rng(3)
    for b in (1, 2, 7, 16):
        s = rng.uniform(-1, 1, size=(b, b))
        np.testing.assert_allclose(triplet_loss(s, margin, max_violation).numpy(), oracle(s, margin, max_violation),
                                   atol=1e-12)


@pytest.mark.parametrize("max_violation", [True, False])
def test_same_image_samples_are_not_negatives(max_violation):
    rng = np.random.default_rng(4)
    s = rng.uniform(-1, 1, size=(6, 6))
    image_index = np.array([0, 0, 1, 2, 2, 2])
    got = triplet_loss(s, 0.2, max_violation, image_index=image_index).numpy()
    np.testing.assert_allclose(got, oracle(s, 0.2, max_violation, image_index), atol=1e-12)
    # A batch made of one image only has no negatives.
    assert np.all(triplet_loss(s[:2, :2], 0.2, True, image_index=[5, 5]).numpy() == 0)


def test_class_sums_rows_and_logs_terms():
    rng = np.random.default_rng(5)
    image = tf.math.l2_normalize(rng.normal(size=(8, 4)), axis=1)
    text = tf.math.l2_normalize(rng.normal(size=(8, 4)), axis=1)
    s = (image @ tf.transpose(text)).numpy()
    loss = TripletLoss(margin=0.2)
    value = loss(None, {"image": image, "text": text}).numpy()
    np.testing.assert_allclose(value, oracle(s, 0.2, True).sum(), rtol=1e-6)
    terms = loss.compute_terms(None, {"image": image, "text": text})
    assert set(terms) == {"i2t", "t2i"}
    np.testing.assert_allclose((terms["i2t"] + terms["t2i"]).numpy(), oracle(s, 0.2, True), atol=1e-6)


def test_gradient_matches_finite_differences():
    rng = np.random.default_rng(6)
    s = tf.constant(rng.uniform(-1, 1, size=(5, 5)))
    for max_violation in (True, False):
        theoretical, numerical = tf.test.compute_gradient(
            lambda x: tf.reduce_sum(triplet_loss(x, 0.2, max_violation)), [s])
        np.testing.assert_allclose(theoretical[0], numerical[0], atol=1e-6)


def test_get_config_round_trip_and_serialization():
    loss = TripletLoss(margin=0.3, max_violation=False, name="vse")
    clone = TripletLoss.from_config(loss.get_config())
    assert (clone.margin, clone.max_violation, clone.name, clone.reduction) == (0.3, False, "vse", "sum")
    restored = keras.losses.deserialize(keras.losses.serialize(loss))
    assert isinstance(restored, TripletLoss) and restored.margin == 0.3


def test_negative_margin_is_rejected():
    with pytest.raises(ValueError, match="margin must be >= 0"):
        TripletLoss(margin=-0.1)
    with pytest.raises(ValueError, match=r"\[B, B\]"):
        triplet_loss(np.zeros(3))


def test_y_pred_must_be_the_embedding_dict():
    with pytest.raises(ValueError, match=r"y_pred = \{'image'"):
        TripletLoss()(None, np.zeros((2, 2)))

"""Adaptive-margin triplet loss (Malali & Keller, Eqs. 10-13) and AdaptiveMarginCallback: loop oracles, counts,
gradients, config and the margin update rule in `fit`. The callback's tests (kitm.callbacks.adaptive_margin) are
here, beside the loss whose oracle they use."""

import math
import os
from unittest import mock

import numpy as np
import pytest
import tensorflow as tf

import kitm  # noqa: F401
import keras
from kitm.callbacks.adaptive_margin import AdaptiveMarginCallback
from kitm.losses import adaptive_margin
from kitm.losses.adaptive_margin import (AdaptiveMarginTripletLoss, adaptive_margin_triplet_loss,
                                         adaptive_margin_triplet_terms, exact_pairwise_l2_distances,
                                         pairwise_l2_distances)


def unit(rng, b, d=5):
    x = rng.normal(size=(b, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def oracle(x, y, negative_captions, negative_images, margin_x, margin_y):
    """Eq. 10 with explicit loops; counts the negatives whose hinge argument is <= 0 (satisfied)."""
    b = len(x)
    rows = np.zeros(b)
    counts = dict(satisfied_x=0, used_x=0, satisfied_y=0, used_y=0)
    for p in range(b):
        n = negative_captions[p]
        if n >= 0:
            argument = np.linalg.norm(x[p] - y[p]) - np.linalg.norm(x[p] - y[n]) + margin_x
            rows[p] += max(argument, 0.0)
            counts["used_x"] += 1
            counts["satisfied_x"] += argument <= 0
        m = negative_images[p]
        if m >= 0:
            argument = np.linalg.norm(y[p] - x[p]) - np.linalg.norm(y[p] - x[m]) + margin_y
            rows[p] += max(argument, 0.0)
            counts["used_y"] += 1
            counts["satisfied_y"] += argument <= 0
    return rows, counts


def oracle_all(x, y, margin_x, margin_y, image_index=None):
    b = len(x)
    image_index = np.arange(b) if image_index is None else np.asarray(image_index)
    rows = np.zeros(b)
    counts = dict(satisfied_x=0, used_x=0, satisfied_y=0, used_y=0)
    for p in range(b):
        for q in range(b):
            if image_index[p] == image_index[q]:
                continue
            a_x = np.linalg.norm(x[p] - y[p]) - np.linalg.norm(x[p] - y[q]) + margin_x  # image anchor p, caption q
            rows[p] += max(a_x, 0.0)
            counts["used_x"] += 1
            counts["satisfied_x"] += a_x <= 0
            a_y = np.linalg.norm(y[p] - x[p]) - np.linalg.norm(y[p] - x[q]) + margin_y  # caption anchor p, image q
            rows[p] += max(a_y, 0.0)
            counts["used_y"] += 1
            counts["satisfied_y"] += a_y <= 0
    return rows, counts


def counts_of(terms):
    return {key: int(getattr(terms, key)) for key in ("satisfied_x", "used_x", "satisfied_y", "used_y")}


def test_hand_computed_example():
    x, y_pos, y_neg = np.array([[1.0, 0.0]]), np.array([[0.6, 0.8]]), np.array([[0.0, 1.0]])
    image = np.concatenate([x, np.array([[0.0, -1.0]])])
    text = np.concatenate([y_pos, y_neg])
    # Row 0: image anchor 0 against caption 1; its caption-anchor term is switched off (-1).
    terms = adaptive_margin_triplet_terms(image, text, [1, -1], [-1, -1], margin_x=0.2, margin_y=0.2)
    assert terms.i2t.numpy()[0] == 0.0 and counts_of(terms) == dict(satisfied_x=1, used_x=1, satisfied_y=0, used_y=0)
    terms = adaptive_margin_triplet_terms(image, text, [1, -1], [-1, -1], margin_x=0.6, margin_y=0.2)
    np.testing.assert_allclose(terms.i2t.numpy()[0], np.sqrt(0.8) - np.sqrt(2) + 0.6, rtol=1e-12)
    np.testing.assert_allclose(terms.i2t.numpy()[0], 0.0802, atol=1e-4)
    assert counts_of(terms)["satisfied_x"] == 0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sampled_negatives_match_the_loop_oracle(seed):
    rng = np.random.default_rng(seed)
    b = 7
    x, y = unit(rng, b), unit(rng, b)
    negative_captions = rng.integers(-1, b, size=b)
    negative_images = rng.integers(-1, b, size=b)
    margin_x, margin_y = 0.3, 0.5
    expected, expected_counts = oracle(x, y, negative_captions, negative_images, margin_x, margin_y)
    terms = adaptive_margin_triplet_terms(x, y, negative_captions, negative_images, margin_x=margin_x,
                                          margin_y=margin_y)
    np.testing.assert_allclose((terms.i2t + terms.t2i).numpy(), expected, rtol=1e-10, atol=1e-12)
    assert counts_of(terms) == expected_counts
    np.testing.assert_allclose(adaptive_margin_triplet_loss(x, y, negative_captions, negative_images,
                                                            margin_x=margin_x, margin_y=margin_y).numpy(), expected,
                               rtol=1e-10, atol=1e-12)


def test_every_negative_with_same_image_rows_and_unnormalised_embeddings():
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(6, 4)) * 0.7, rng.normal(size=(6, 4)) * 0.7  # not unit: plain L2 still holds
    image_index = [0, 0, 1, 2, 2, 3]
    expected, expected_counts = oracle_all(x, y, 0.4, 0.1, image_index)
    terms = adaptive_margin_triplet_terms(x, y, margin_x=0.4, margin_y=0.1, image_index=image_index)
    np.testing.assert_allclose((terms.i2t + terms.t2i).numpy(), expected, rtol=1e-9, atol=1e-12)
    assert counts_of(terms) == expected_counts
    assert 0 < expected_counts["satisfied_x"] < expected_counts["used_x"] == 6 * 6 - (4 + 2 + 4)


def test_pairwise_distances_and_squared_option():
    rng = np.random.default_rng(4)
    a, b = rng.normal(size=(3, 5)), rng.normal(size=(4, 5))
    expected = np.linalg.norm(a[:, None, :] - b[None, :, :], axis=2)
    np.testing.assert_allclose(pairwise_l2_distances(a, b).numpy(), expected, rtol=1e-10)
    np.testing.assert_allclose(pairwise_l2_distances(a, b, squared=True).numpy(), expected ** 2, rtol=1e-10)
    x, y = unit(rng, 4), unit(rng, 4)
    terms = adaptive_margin_triplet_terms(x, y, [1, 2, 3, 0], [3, 0, 1, 2], margin_x=0.2, margin_y=0.2, squared=True)
    d2 = lambda u, v: np.sum((u - v) ** 2)  # noqa: E731
    expected = [max(d2(x[p], y[p]) - d2(x[p], y[(p + 1) % 4]) + 0.2, 0) for p in range(4)]
    np.testing.assert_allclose(terms.i2t.numpy(), expected, rtol=1e-10, atol=1e-12)


def test_every_negative_path_is_exact_for_coincident_float32_embeddings():
    """sampling="all" measures distances from the differences: equal float32 rows are exactly 0 apart, as on the
    hardest and indexed paths (the Gram matrix leaves a rounding residue: 4.9e-4 and 6.9e-4 for two of these rows
    on the project's machine), and chunked rows give the same values as one chunk."""
    rng = np.random.default_rng(8)
    x = (rng.normal(size=(8, 64)) * 3).astype(np.float32)  # not unit: the residue grows with the norms
    y = x[[1, 0, 3, 2, 5, 4, 7, 6]]  # every caption equals another image's embedding
    exact = np.asarray(exact_pairwise_l2_distances(x, y))
    expected = np.linalg.norm(x[:, None, :].astype(np.float64) - y[None, :, :], axis=2)
    assert (exact[expected == 0] == 0).all() and (expected == 0).sum() == 8
    np.testing.assert_allclose(exact, expected, rtol=1e-6)
    margin = 0.3
    terms = adaptive_margin_triplet_terms(x, y, margin_x=margin, margin_y=margin)
    positive = np.diag(expected)
    i2t = np.maximum(positive[:, None] - expected + margin, 0)
    np.fill_diagonal(i2t, 0)
    np.testing.assert_allclose(np.asarray(terms.i2t), i2t.sum(axis=1), rtol=1e-6)
    with mock.patch.object(adaptive_margin, "_EXACT_CHUNK_ELEMENTS", 3 * 8 * 64):  # three rows per chunk
        np.testing.assert_array_equal(np.asarray(exact_pairwise_l2_distances(x, y)), exact)


def test_loss_class_samples_hardest_and_easiest_by_distance():
    rng = np.random.default_rng(5)
    b = 6
    x, y = unit(rng, b).astype(np.float32), unit(rng, b).astype(np.float32)
    distances = np.linalg.norm(x[:, None] - y[None], axis=2)
    off = ~np.eye(b, dtype=bool)
    for sampling, pick in (("hardest", np.argmin), ("easiest", np.argmax)):
        loss = AdaptiveMarginTripletLoss(0.3, 0.4, sampling=sampling)
        negative_captions = [pick(np.where(off[p], distances[p], np.inf if pick is np.argmin else -np.inf))
                             for p in range(b)]
        negative_images = [pick(np.where(off[:, q], distances[:, q], np.inf if pick is np.argmin else -np.inf))
                           for q in range(b)]
        expected, counts = oracle(x.astype(np.float64), y.astype(np.float64), negative_captions, negative_images,
                                  0.3, 0.4)
        np.testing.assert_allclose(float(loss(None, {"image": x, "text": y})), expected.sum(), rtol=1e-5)
        assert loss.statistics() == counts


def test_random_sampling_counts_one_negative_per_anchor_and_skips_same_image():
    rng = np.random.default_rng(6)
    x, y = unit(rng, 5).astype(np.float32), unit(rng, 5).astype(np.float32)
    loss = AdaptiveMarginTripletLoss(sampling="random", seed=3)
    loss({"image_index": [0, 0, 1, 1, 2]}, {"image": x, "text": y})
    stats = loss.statistics()
    assert stats["used_x"] == stats["used_y"] == 5
    loss.reset_statistics()
    loss({"image_index": [4, 4, 4, 4, 4]}, {"image": x, "text": y})  # one image: no negative at all
    assert loss.statistics() == dict(satisfied_x=0, used_x=0, satisfied_y=0, used_y=0)
    value = loss({"image_index": [4, 4, 4, 4, 4]}, {"image": x, "text": y})
    assert float(value) == 0.0


def test_margins_are_variables_the_loss_reads_on_every_call():
    rng = np.random.default_rng(7)
    x, y = unit(rng, 5).astype(np.float32), unit(rng, 5).astype(np.float32)
    loss = AdaptiveMarginTripletLoss(sampling="all")
    step = tf.function(lambda: loss(None, {"image": x, "text": y}))
    before = float(step())
    loss.margin_x.assign(0.9)
    loss.margin_y.assign(0.7)
    expected, _ = oracle_all(x.astype(np.float64), y.astype(np.float64), 0.9, 0.7)
    after = float(step())  # the same traced function sees the new margins
    np.testing.assert_allclose(after, expected.sum(), rtol=1e-5)
    assert after > before
    assert not loss.margin_x.trainable


def test_gradients_match_finite_differences_and_are_finite_for_identical_pairs():
    rng = np.random.default_rng(8)
    x, y = unit(rng, 4), unit(rng, 4)
    negative_captions, negative_images = [1, 2, 3, 0], [2, 3, 0, 1]

    def f(image, text):
        return tf.reduce_sum(adaptive_margin_triplet_loss(image, text, negative_captions, negative_images,
                                                          margin_x=1.5, margin_y=1.2))

    theoretical, numerical = tf.test.compute_gradient(f, [tf.constant(x), tf.constant(y)])
    for t, n in zip(theoretical, numerical):
        np.testing.assert_allclose(t, n, atol=1e-6)
    same = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(same)
        value = tf.reduce_sum(adaptive_margin_triplet_loss(same, same, negative_captions, negative_images))
    assert np.all(np.isfinite(tape.gradient(value, same).numpy()))


def test_errors_name_the_argument():
    x = np.zeros((3, 4), np.float32)
    with pytest.raises(ValueError, match="sampling"):
        AdaptiveMarginTripletLoss(sampling="semihard")
    with pytest.raises(ValueError, match="margin_x"):
        AdaptiveMarginTripletLoss(margin_x=-0.1)
    with pytest.raises(ValueError, match="both"):
        adaptive_margin_triplet_terms(x, x, [0, 1, 2], None)
    with pytest.raises(ValueError, match="same shape|one shape"):
        adaptive_margin_triplet_terms(x, np.zeros((2, 4), np.float32))
    with pytest.raises(ValueError, match="negative_captions"):
        adaptive_margin_triplet_terms(x, x, np.zeros((3, 1), np.int32), [0, 1, 2])
    with pytest.raises(ValueError, match="y_pred"):
        AdaptiveMarginTripletLoss().compute_terms(None, x)
    with pytest.raises(ValueError, match="multiplier"):
        AdaptiveMarginCallback(multiplier=1.0)
    with pytest.raises(ValueError, match="every_batches"):
        AdaptiveMarginCallback(every_batches=0)
    with pytest.raises(ValueError, match="share_threshold"):
        AdaptiveMarginCallback(share_threshold=1.5)


def test_get_config_round_trip():
    loss = AdaptiveMarginTripletLoss(0.25, 0.3, sampling="hardest", squared=True, seed=4, name="amt")
    config = loss.get_config()
    restored = AdaptiveMarginTripletLoss.from_config(config)
    assert restored.get_config() == config
    assert keras.losses.deserialize(keras.losses.serialize(loss)).get_config() == config


# ------------------------------------------------------------------------------------------------
# The callback in fit
# ------------------------------------------------------------------------------------------------

def dataset(image, text, repeat, image_index=None):
    y = {"image_index": np.arange(len(image), dtype=np.int32) if image_index is None else image_index}
    return tf.data.Dataset.from_tensors(({"image": image.astype(np.float32), "tokens": text.astype(np.float32)},
                                         y)).repeat(repeat)


def fit(model, data, callbacks, epochs=1, **kwargs):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "no trainable weights": the frozen identity model is intended
        return model.fit(data, epochs=epochs, verbose=0, callbacks=callbacks, shuffle=False, **kwargs)


def test_margins_grow_by_c_every_q_batches_until_the_cap(identity_model):
    d = 6
    basis = np.eye(d)  # x_p = y_p = e_p: D+ = 0, D- = sqrt(2) > every margin below the cap
    model = identity_model(d)
    loss = AdaptiveMarginTripletLoss(0.2, 0.2, sampling="all")
    model.compile("sgd", losses={"amt": loss})
    callback = AdaptiveMarginCallback(every_batches=2, multiplier=1.5, max_margin=1.0)
    history = fit(model, dataset(basis, basis, 5), [callback], epochs=2)  # 10 batches: 5 updates
    expected, margin = [], 0.2
    for _ in range(5):
        margin = min(margin * 1.5, 1.0)
        expected.append(margin)
    assert [u["step"] for u in callback.updates] == [2, 4, 6, 8, 10]
    np.testing.assert_allclose([u["margin_x"] for u in callback.updates], expected, rtol=1e-6)
    np.testing.assert_allclose([u["margin_y"] for u in callback.updates], expected, rtol=1e-6)
    assert all(u["share_x"] == 1.0 and u["used_x"] == 2 * d * (d - 1) for u in callback.updates)
    assert float(loss.margin_x.numpy()) == pytest.approx(1.0)
    np.testing.assert_allclose(history.history["amt/margin_x"], [0.45, 1.0], rtol=1e-6)
    assert history.history["amt/share_y"] == [1.0, 1.0]


def test_share_is_satisfied_over_used_and_margin_stays_at_or_below_r(identity_model):
    rng = np.random.default_rng(9)
    b, d = 6, 6
    x, y = unit(rng, b, d), unit(rng, b, d)
    _, counts = oracle_all(x / np.linalg.norm(x, axis=1, keepdims=True), y, 0.2, 0.2)
    share_x = counts["satisfied_x"] / counts["used_x"]
    share_y = counts["satisfied_y"] / counts["used_y"]
    model = identity_model(d)
    loss = AdaptiveMarginTripletLoss(0.2, 0.2, sampling="all")
    model.compile("sgd", losses={"amt": loss})
    # r between the two shares: exactly the direction with the larger share grows.
    r = (share_x + share_y) / 2
    callback = AdaptiveMarginCallback(every_batches=3, share_threshold=r, multiplier=1.1)
    fit(model, dataset(x, y, 3), [callback])
    update = callback.updates[0]
    assert update["used_x"] == 3 * counts["used_x"] and update["satisfied_x"] == 3 * counts["satisfied_x"]
    np.testing.assert_allclose([update["share_x"], update["share_y"]], [share_x, share_y], rtol=1e-12)
    grown, kept = ("x", "y") if share_x > share_y else ("y", "x")
    assert update[f"margin_{grown}"] == pytest.approx(0.22) and update[f"margin_{kept}"] == pytest.approx(0.2)


def test_validation_does_not_count_and_steps_per_execution_counts_every_step(tmp_path, identity_model):
    d = 5
    basis = np.eye(d)
    model = identity_model(d)
    loss = AdaptiveMarginTripletLoss(0.2, 0.2, sampling="all")
    model.compile("sgd", losses={"amt": loss}, steps_per_execution=2)
    callback = AdaptiveMarginCallback(every_batches=4, multiplier=1.5, log_dir=str(tmp_path / "logs"))
    # 6 batches per epoch, 2 epochs; validation runs the loss too and must not add to the counters.
    fit(model, dataset(basis, basis, 6), [callback], epochs=2, validation_data=dataset(basis, basis, 3))
    assert [u["step"] for u in callback.updates] == [4, 8, 12]
    assert all(u["used_x"] == 4 * d * (d - 1) for u in callback.updates)
    assert loss.statistics()["used_x"] == 0  # reset after the last update at step 12
    assert any(name.startswith("events.out.tfevents") for name in os.listdir(tmp_path / "logs"))


def test_callback_finds_the_loss_and_rejects_a_missing_one_or_a_margin_above_the_cap(identity_model):
    d = 4
    basis = np.eye(d)
    model = identity_model(d)
    from kitm.losses import TripletLoss

    model.compile("sgd", losses={"triplet": TripletLoss()})
    with pytest.raises(ValueError, match="AdaptiveMarginTripletLoss"):
        fit(model, dataset(basis, basis, 1), [AdaptiveMarginCallback(every_batches=1)])
    model.compile("sgd", losses={"amt": AdaptiveMarginTripletLoss(0.5, 0.2)})
    with pytest.raises(ValueError, match="max_margin"):
        fit(model, dataset(basis, basis, 1), [AdaptiveMarginCallback(every_batches=1, max_margin=0.4)])


def test_no_update_before_q_batches_and_no_negative_means_no_change(identity_model):
    d = 4
    basis = np.eye(d)
    model = identity_model(d)
    loss = AdaptiveMarginTripletLoss(0.2, 0.2, sampling="all")
    model.compile("sgd", losses={"amt": loss})
    callback = AdaptiveMarginCallback(every_batches=3, multiplier=2.0)
    history = fit(model, dataset(basis, basis, 2, image_index=np.zeros(d, np.int32)), [callback], epochs=2)
    # One image per batch: no negative is ever used; the one update (step 3) keeps the margins.
    assert len(callback.updates) == 1 and math.isnan(callback.updates[0]["share_x"])
    assert float(loss.margin_x.numpy()) == pytest.approx(0.2)
    assert history.history["amt/margin_x"] == pytest.approx([0.2, 0.2])


# The counters under MirroredStrategy (2 logical CPUs, summed over replicas, margins assigned on every replica)
# are checked in tests/losses/test_centers.py::test_loss_owned_state_under_mirrored_strategy, one subprocess for all
# the loss-owned state of the semantic centers objective and of the ladder re-clustering.

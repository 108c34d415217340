"""The hardest-negative warm-up (kitm.losses.base): every hardest-negative term sums over the negatives (or draws a
random negative) for the first `hardest_warmup_steps` training steps, then takes the hardest one. Oracles are
numpy loops written from docs/methods.md's equations."""

import numpy as np
import pytest
import tensorflow as tf

import kitm  # noqa: F401  (selects the TensorFlow backend)
import keras
from kitm.losses import (AdaptiveLadderLoss, AdaptiveMarginTripletLoss, AngularLoss, LadderLoss, SAMLoss, TripletLoss,
                         ladder_levels, ladder_loss)
from kitm.losses.ladder import ladder_terms


def unit(rng, b, d=6):
    v = rng.normal(size=(b, d))
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def triplet_rows(s, margin, hardest, image_index=None):
    """VSE++ per row: max (hardest) or sum over the negatives of [a + s[p, q] - s[p, p]]+, both directions."""
    b = s.shape[0]
    idx = np.arange(b) if image_index is None else np.asarray(image_index)
    agg = max if hardest else sum
    rows = np.zeros(b)
    for p in range(b):
        i2t = [max(0.0, margin + s[p, q] - s[p, p]) for q in range(b) if idx[q] != idx[p]]
        t2i = [max(0.0, margin + s[m, p] - s[p, p]) for m in range(b) if idx[m] != idx[p]]
        rows[p] = (agg(i2t) if i2t else 0.0) + (agg(t2i) if t2i else 0.0)
    return rows


def first_rung_rows(s, row_levels, column_levels, margin, hardest):
    """The ladder's first rung per row: over the candidates of level >= 1, max or sum of [a_1 - s(q,q) + s(q,j)]+."""
    b = s.shape[0]
    agg = max if hardest else sum
    rows = np.zeros(b)
    for p in range(b):
        i2t = [max(0.0, margin - s[p, p] + s[p, j]) for j in range(b) if row_levels[p, j] >= 1]
        t2i = [max(0.0, margin - s[p, p] + s[j, p]) for j in range(b) if column_levels[j, p] >= 1]
        rows[p] = (agg(i2t) if i2t else 0.0) + (agg(t2i) if t2i else 0.0)
    return rows


def bound(loss, step):
    variable = tf.Variable(step, dtype=tf.int64)
    loss.bind_training_step(variable)
    return variable


def test_triplet_sums_during_the_warm_up_and_takes_the_hardest_after():
    rng = np.random.default_rng(0)
    x, y = unit(rng, 7), unit(rng, 7)
    s = x.astype(float) @ y.astype(float).T
    image_index = np.array([0, 0, 1, 2, 3, 3, 4])
    loss = TripletLoss(0.2, hardest_warmup_steps=3)
    step = bound(loss, 0)
    graph_loss = tf.function(lambda: loss({"image_index": image_index}, {"image": x, "text": y}))
    for value, hardest in ((0, False), (2, False), (3, True), (10, True)):
        step.assign(value)  # the same traced function switches: the step is read in the graph
        want = triplet_rows(s, 0.2, hardest, image_index).sum()
        np.testing.assert_allclose(graph_loss().numpy(), want, rtol=1e-5)
    # max_violation=False never takes the hardest negative; no warm-up is the plain VSE++ loss.
    plain = TripletLoss(0.2, max_violation=False, hardest_warmup_steps=3)
    bound(plain, 10)
    np.testing.assert_allclose(plain(None, {"image": x, "text": y}).numpy(), triplet_rows(s, 0.2, False).sum(),
                               rtol=1e-5)
    np.testing.assert_allclose(TripletLoss(0.2)(None, {"image": x, "text": y}).numpy(),
                               triplet_rows(s, 0.2, True).sum(), rtol=1e-5)


def test_ladder_first_rung_sums_during_the_warm_up_other_rungs_unchanged():
    rng = np.random.default_rng(1)
    b = 8
    x, y = unit(rng, b), unit(rng, b)
    s = (x.astype(float) @ y.astype(float).T)
    relevance = rng.uniform(size=(b, b))
    levels = ladder_levels(relevance, (0.6, 0.3)).numpy()
    margins, betas = (0.2, 0.05, 0.01), (1.0, 0.5, 0.25)
    for hardest in (True, False):
        terms = ladder_terms(s, levels, levels, margins=margins, betas=betas, first_hardest=hardest)
        np.testing.assert_allclose(terms[0].numpy(), first_rung_rows(s, levels, levels, 0.2, hardest), atol=1e-10)
    hard = ladder_terms(s, levels, levels, margins=margins, betas=betas)
    warm = ladder_terms(s, levels, levels, margins=margins, betas=betas, first_hardest=False)
    for h, w in zip(hard[1:], warm[1:]):
        np.testing.assert_allclose(h.numpy(), w.numpy(), atol=1e-12)
    np.testing.assert_allclose(ladder_loss(s, levels, levels, margins=margins, betas=betas, first_hardest=False).numpy(),
                               sum(t.numpy() for t in warm), atol=1e-10)
    # The classes: LadderLoss and AdaptiveLadderLoss switch their first rung with the bound step.
    for loss in (LadderLoss((0.6, 0.3), margins, betas, hardest_warmup_steps=2),
                 AdaptiveLadderLoss((2, 3), hardest_warmup_steps=2)):
        step = bound(loss, 0)
        y_true = {"relevance": relevance.astype(np.float32)}
        warm_terms = loss.compute_terms(y_true, {"image": x, "text": y})
        row_levels, column_levels = (levels, levels) if isinstance(loss, LadderLoss) else \
            [v.numpy() for v in loss.levels(y_true)]
        np.testing.assert_allclose(warm_terms["level_1"].numpy(),
                                   first_rung_rows(s, row_levels, column_levels, 0.2, False), rtol=1e-5, atol=1e-6)
        step.assign(2)
        hard_terms = loss.compute_terms(y_true, {"image": x, "text": y})
        np.testing.assert_allclose(hard_terms["level_1"].numpy(),
                                   first_rung_rows(s, row_levels, column_levels, 0.2, True), rtol=1e-5, atol=1e-6)


def test_sam_warm_up_sums_the_triplet_and_samples_at_random():
    rng = np.random.default_rng(2)
    b = 16
    x, y = unit(rng, b), unit(rng, b)
    s = x.astype(float) @ y.astype(float).T
    relevance = rng.uniform(size=(b, b)).astype(np.float32)
    loss = SAMLoss(5.0, sampling="hardest", hardest_warmup_steps=4, seed=3)
    step = bound(loss, 0)
    terms = loss.compute_terms({"relevance": relevance}, {"image": x, "text": y})
    np.testing.assert_allclose((terms["triplet_i2t"] + terms["triplet_t2i"]).numpy(), triplet_rows(s, 0.2, False),
                               rtol=1e-5, atol=1e-6)
    hardest_captions = np.where(np.eye(b, dtype=bool), -np.inf, s).argmax(axis=1)
    drawn = [loss.sample(tf.constant(s, tf.float32), hardest_on=tf.constant(False))[0].numpy() for _ in range(5)]
    assert all(((d >= 0) & (d != np.arange(b))).all() for d in drawn)  # valid negatives
    assert any((d != hardest_captions).any() for d in drawn)  # not the hardest one every time
    step.assign(4)
    negative_captions, _ = loss.sample(tf.constant(s, tf.float32), hardest_on=loss.hardest_negatives_on())
    np.testing.assert_array_equal(negative_captions.numpy(), hardest_captions)
    terms = loss.compute_terms({"relevance": relevance}, {"image": x, "text": y})
    np.testing.assert_allclose((terms["triplet_i2t"] + terms["triplet_t2i"]).numpy(), triplet_rows(s, 0.2, True),
                               rtol=1e-5, atol=1e-6)


def test_adaptive_margin_triplet_hardest_sampling_warms_up():
    rng = np.random.default_rng(4)
    x, y = unit(rng, 12), unit(rng, 12)
    loss = AdaptiveMarginTripletLoss(sampling="hardest", hardest_warmup_steps=1, seed=5)
    step = bound(loss, 0)
    warm = [loss._negatives(tf.constant(x), tf.constant(y), None)[0].numpy() for _ in range(5)]
    step.assign(1)
    hard = loss._negatives(tf.constant(x), tf.constant(y), None)[0].numpy()
    distances = np.linalg.norm(x[:, None, :] - y[None, :, :], axis=-1)
    np.testing.assert_array_equal(hard, np.where(np.eye(12, dtype=bool), np.inf, distances).argmin(axis=1))
    assert any((w != hard).any() for w in warm)


def test_dual_encoder_compile_binds_the_optimizer_step():
    from kitm.models import DualEncoder

    model = DualEncoder(keras.layers.Dense(4), keras.layers.Dense(4), embedding_dim=3)
    loss = TripletLoss(hardest_warmup_steps=5)
    model.compile(keras.optimizers.Adam(), losses={"triplet": loss})
    assert loss._training_step is model.optimizer.iterations
    assert not bool(loss.hardest_negatives_on())
    model.optimizer.iterations.assign(5)
    assert bool(loss.hardest_negatives_on())


def test_config_round_trip_and_errors_name_the_argument():
    for loss in (TripletLoss(hardest_warmup_steps=7), SAMLoss(3.0, hardest_warmup_steps=7),
                 LadderLoss(hardest_warmup_steps=7), AdaptiveLadderLoss(hardest_warmup_steps=7),
                 AdaptiveMarginTripletLoss(sampling="hardest", hardest_warmup_steps=7)):
        config = loss.get_config()
        assert config["hardest_warmup_steps"] == 7
        assert type(loss).from_config(config).hardest_warmup_steps == 7
    assert "hardest_warmup_steps" not in AngularLoss().get_config()
    with pytest.raises(ValueError, match="hardest_warmup_steps"):
        TripletLoss(hardest_warmup_steps=-1)
    with pytest.raises(ValueError, match="bind_training_step"):
        TripletLoss(hardest_warmup_steps=3)(None, {"image": np.eye(3, dtype=np.float32),
                                                   "text": np.eye(3, dtype=np.float32)})
    # Without a warm-up no step is needed.
    assert TripletLoss().hardest_negatives_on() is True

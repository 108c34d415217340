"""Ladder re-clustering: variable thresholds, the bottom-k relevance sample, and LadderReclusterCallback in `fit`
against a brute-force 1-D k-means + scikit-learn silhouette oracle."""

import itertools
import warnings

import numpy as np
import pytest
import tensorflow as tf

import kitm  # noqa: F401
import keras
from kitm.callbacks.ladder_recluster import LadderReclusterCallback
from kitm.losses.reclusterable_ladder import (ReclusterableLadderLoss, RelevanceSample, threshold_levels,
                                              thresholds_from_clusters)
from kitm.losses import LadderLoss, ladder_levels


def unit(rng, b, d=4):
    x = rng.normal(size=(b, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def kmeans_oracle(values, k_min, k_max):
    """Exhaustive 1-D k-means (every cut of the sorted values between distinct values) and the k with the
    highest scikit-learn silhouette (first on ties): (k, labels with 1 = highest cluster, means high->low)."""
    from sklearn.metrics import silhouette_score

    order = np.argsort(values, kind="stable")
    ordered = values[order]
    cut_points = [i for i in range(1, len(ordered)) if ordered[i] != ordered[i - 1]]
    best = None
    for k in range(k_min, k_max + 1):
        if k - 1 > len(cut_points):
            break
        best_sse, best_cuts = np.inf, None
        for cuts in itertools.combinations(cut_points, k - 1):
            runs = np.split(ordered, cuts)
            sse = sum(np.sum((run - run.mean()) ** 2) for run in runs)
            if sse < best_sse - 1e-12:
                best_sse, best_cuts = sse, cuts
        run_of_sorted = np.zeros(len(ordered), int)
        for c in best_cuts:
            run_of_sorted[c:] += 1
        labels = np.empty(len(values), int)
        labels[order] = k - run_of_sorted  # the highest run gets label 1
        score = silhouette_score(values[:, None], labels)
        if best is None or score > best[0] + 1e-12:
            means = np.array([values[labels == l].mean() for l in range(1, k + 1)])
            best = (score, k, labels, means)
    return best[1], best[2], best[3]


def test_threshold_levels_equal_ladder_levels_and_minus_inf_empties_a_level():
    rng = np.random.default_rng(0)
    relevance = rng.uniform(-0.5, 1.0, size=(7, 7)).astype(np.float32)
    relevance[0, 3] = np.float32(0.4)  # exactly at a threshold: the more relevant level (>=)
    index = np.array([0, 1, 1, 2, 3, 4, 5])
    for thresholds in ((0.4,), (0.4, 0.1), (0.7, 0.0, -0.3)):
        np.testing.assert_array_equal(threshold_levels(relevance, np.float32(thresholds), image_index=index).numpy(),
                                      ladder_levels(relevance, thresholds, image_index=index).numpy())
    with_empty = threshold_levels(relevance, np.array([0.4, -np.inf], np.float32)).numpy()
    np.testing.assert_array_equal(with_empty, ladder_levels(relevance, (0.4,)).numpy())
    assert with_empty.max() == 2


def test_loss_equals_ladder_loss_and_follows_its_threshold_variable():
    rng = np.random.default_rng(1)
    x, y = unit(rng, 6).astype(np.float32), unit(rng, 6).astype(np.float32)
    relevance = rng.uniform(0, 1, size=(6, 6)).astype(np.float32)
    y_true = {"relevance": relevance, "image_index": np.arange(6, dtype=np.int32)}
    y_pred = {"image": x, "text": y}
    loss = ReclusterableLadderLoss(thresholds=(0.6, 0.3), margins=(0.2, 0.1, 0.05), betas=(1.0, 0.5, 0.25))
    step = tf.function(lambda: loss(y_true, y_pred))
    reference = LadderLoss(thresholds=(0.6, 0.3), margins=(0.2, 0.1, 0.05), betas=(1.0, 0.5, 0.25))
    np.testing.assert_allclose(float(step()), float(reference(y_true, y_pred)), rtol=1e-6)
    loss.threshold_variable.assign([0.5, 0.2])
    reference = LadderLoss(thresholds=(0.5, 0.2), margins=(0.2, 0.1, 0.05), betas=(1.0, 0.5, 0.25))
    np.testing.assert_allclose(float(step()), float(reference(y_true, y_pred)), rtol=1e-6)
    assert loss.relevance_sample.offered_count() == 2 * 30  # two calls, 30 negatives each


def test_sample_keeps_everything_offered_when_it_fits_and_only_masked_in_values():
    sample = RelevanceSample(size=40, seed=3)
    values = np.arange(36, dtype=np.float32).reshape(6, 6)
    mask = ~np.eye(6, dtype=bool)
    sample.update(values, mask)
    np.testing.assert_array_equal(np.sort(sample.sample()), np.sort(values[mask]))
    assert sample.offered_count() == 30
    state = sample.state()
    sample.reset()
    assert sample.sample().size == 0 and sample.offered_count() == 0
    sample.restore(state)
    np.testing.assert_array_equal(np.sort(sample.sample()), np.sort(values[mask]))


def test_sample_is_uniform_without_replacement_across_updates():
    sample = RelevanceSample(size=50, seed=11)
    update = tf.function(lambda v: sample.update(v))
    batches = [np.arange(25 * i, 25 * (i + 1), dtype=np.float32) for i in range(4)]
    trials = 300
    inclusion = np.zeros(100)
    for _ in range(trials):
        sample.reset()
        for batch in batches:
            update(batch)
        kept = sample.sample()
        assert kept.size == 50 and np.unique(kept).size == 50  # without replacement
        inclusion[kept.astype(int)] += 1
    frequency = inclusion / trials
    # Each value is kept with probability 1/2 whatever its batch; 4.5 binomial standard deviations.
    assert np.max(np.abs(frequency - 0.5)) < 4.5 * np.sqrt(0.25 / trials)
    per_batch = frequency.reshape(4, 25).mean(axis=1)
    assert np.max(np.abs(per_batch - 0.5)) < 0.05


def test_thresholds_from_clusters_are_midpoints_padded_with_minus_inf():
    values = np.array([0.9, 0.8, 0.1, 0.2, 0.5])
    labels = np.array([1, 1, 3, 3, 2])
    np.testing.assert_allclose(thresholds_from_clusters(values, labels, 3, 2), [(0.85 + 0.5) / 2, (0.5 + 0.15) / 2])
    np.testing.assert_array_equal(thresholds_from_clusters(values, np.array([1, 1, 2, 2, 2]), 2, 3)[1:], -np.inf)


def fit(model, data, callbacks, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "no trainable weights": the frozen identity model is intended
        return model.fit(data, verbose=0, callbacks=callbacks, shuffle=False, **kwargs)


def batches(relevance_blocks, d=4, seed=0):
    rng = np.random.default_rng(seed)
    b = relevance_blocks[0].shape[0]
    x, y = unit(rng, b, d).astype(np.float32), unit(rng, b, d).astype(np.float32)
    index = np.arange(b, dtype=np.int32)
    elements = [({"image": x, "tokens": y}, {"relevance": r.astype(np.float32), "image_index": index})
                for r in relevance_blocks]
    return tf.data.Dataset.from_tensor_slices(tf.nest.map_structure(lambda *t: np.stack(t), *elements))


@pytest.mark.parametrize("seed", [0, 1])
def test_callback_thresholds_match_the_brute_force_oracle(seed, tmp_path, identity_model):
    rng = np.random.default_rng(seed)
    b = 5
    blocks = [rng.uniform(-0.2, 1.0, size=(b, b)) for _ in range(4)]
    model = identity_model(4)
    loss = ReclusterableLadderLoss(thresholds=(0.6, 0.3), margins=(0.2, 0.01, 0.01), betas=(1.0, 0.25, 0.125),
                                   sample_size=256)
    model.compile("sgd", losses={"ladder": loss})
    # lloyd_runs=0: the exact k-means optimum, which the exhaustive oracle computes.
    callback = LadderReclusterCallback(every_batches=2, k_min=2, lloyd_runs=0, log_dir=str(tmp_path / "logs"))
    # Validation evaluates the loss too; its relevance must not reach the sample.
    validation = batches([np.full((b, b), 5.0)], seed=1)
    history = fit(model, batches(blocks), [callback], epochs=1, validation_data=validation).history
    off = ~np.eye(b, dtype=bool)
    for update, window in zip(callback.updates, (blocks[:2], blocks[2:])):
        values = np.concatenate([blk[off] for blk in window]).astype(np.float32).astype(np.float64)
        k, labels, means = kmeans_oracle(values, 2, 3)
        expected = np.full(2, -np.inf)
        expected[: k - 1] = (means[:-1] + means[1:]) / 2
        assert update["clusters"] == k and update["sampled"] == update["offered"] == values.size
        np.testing.assert_allclose([update["theta_1"], update["theta_2"]], expected, rtol=1e-6)
        counts = [int(np.sum(labels == l)) for l in (1, 2, 3)]
        assert [update[f"level_{l}_count"] for l in (1, 2, 3)] == counts
        # The new thresholds put every sampled value in its cluster's level.
        levels = threshold_levels(values[None, :].astype(np.float32), expected.astype(np.float32)).numpy()[0]
        levels[0] = 1 + np.sum(values[0] < expected)  # threshold_levels zeroes the [0, 0] "diagonal"
        np.testing.assert_array_equal(levels, labels)
    np.testing.assert_allclose(loss.threshold_variable.numpy(), [callback.updates[-1]["theta_1"],
                                                                 callback.updates[-1]["theta_2"]], rtol=1e-6)
    assert history["ladder/theta_1"] == [pytest.approx(callback.updates[-1]["theta_1"])]
    assert "ladder/level_1_count" in history and "ladder/silhouette" in history


def test_two_clear_groups_give_two_levels_and_an_empty_third(identity_model):
    b = 6
    block = np.where(np.arange(b)[:, None] % 2 == np.arange(b)[None, :] % 2, 0.9, 0.1)
    block = block + 0.01 * np.random.default_rng(2).normal(size=(b, b))
    model = identity_model(4)
    loss = ReclusterableLadderLoss(thresholds=(0.6, 0.3), margins=(0.2, 0.01, 0.01), betas=(1.0, 0.25, 0.125))
    model.compile("sgd", losses={"ladder": loss})
    callback = LadderReclusterCallback(every_batches=1)
    fit(model, batches([block]), [callback], epochs=1)
    update = callback.updates[0]
    assert update["clusters"] == 2 and update["theta_2"] == -np.inf and update["level_3_count"] == 0
    assert 0.3 < update["theta_1"] < 0.7


def test_constant_relevance_keeps_the_thresholds_and_q_is_respected(identity_model):
    b = 4
    model = identity_model(4)
    loss = ReclusterableLadderLoss()
    model.compile("sgd", losses={"ladder": loss})
    callback = LadderReclusterCallback(every_batches=3)
    fit(model, batches([np.full((b, b), 0.5)] * 4), [callback], epochs=1)
    assert [u["step"] for u in callback.updates] == [3]
    assert callback.updates[0]["clusters"] == 0
    np.testing.assert_allclose(loss.threshold_variable.numpy(), [0.4])
    assert loss.relevance_sample.offered_count() == 12  # the 4th batch, after the reset


def test_errors_and_config(identity_model):
    with pytest.raises(ValueError, match="threshold_variable"):
        LadderReclusterCallback(LadderLoss())
    with pytest.raises(ValueError, match="k_min"):
        LadderReclusterCallback(k_min=1)
    with pytest.raises(ValueError, match="at least one threshold"):
        ReclusterableLadderLoss(thresholds=(), margins=(0.2,), betas=(1.0,))
    with pytest.raises(ValueError, match="size"):
        RelevanceSample(size=1)
    model = identity_model(4)
    model.compile("sgd", losses={"ladder": ReclusterableLadderLoss()})
    with pytest.raises(ValueError, match="ladder levels"):
        fit(model, batches([np.eye(4)]), [LadderReclusterCallback(every_batches=1, k_max=3)], epochs=1)
    loss = ReclusterableLadderLoss(thresholds=(0.5, 0.2), margins=(0.2, 0.01, 0.01), betas=(1.0, 0.5, 0.25),
                                   sample_size=128, seed=5, name="l")
    config = loss.get_config()
    assert ReclusterableLadderLoss.from_config(config).get_config() == config
    assert keras.losses.deserialize(keras.losses.serialize(loss)).get_config() == config

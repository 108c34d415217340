"""Ladder loss against loop oracles from docs/methods.md ("Ladder"), the reference formula, and exhaustive k-means."""

import itertools

import numpy as np
import pytest
import tensorflow as tf
from sklearn.metrics import silhouette_score

import kitm  # noqa: F401  (selects the TensorFlow backend)
import keras
from kitm.losses.ladder import (AdaptiveLadderLoss, LadderLoss, adaptive_levels, ladder_levels, ladder_loss,
                                ladder_terms)


def levels_oracle(relevance, thresholds, image_index=None):
    b = relevance.shape[0]
    idx = np.arange(b) if image_index is None else np.asarray(image_index)
    levels = np.zeros((b, b), dtype=int)
    for p in range(b):
        for q in range(b):
            if p == q or idx[p] == idx[q]:
                continue
            level = 1
            for theta in thresholds:  # decreasing: count the thresholds the value falls below
                if relevance[p, q] < theta:
                    level += 1
            levels[p, q] = level
    return levels


def ladder_oracle(s, row_levels, column_levels, margins, betas, cumulative=False):
    """Per-level, per-row values [L, B] by explicit loops over queries, levels and candidate sets."""
    b, num_levels = s.shape[0], len(margins)
    out = np.zeros((num_levels, b))
    for p in range(b):
        for scores, lv in ((s[p, :], row_levels[p, :]), (s[:, p], column_levels[:, p])):
            positive = s[p, p]
            for l in range(1, num_levels + 1):
                farther = [scores[j] for j in range(b) if lv[j] >= l]
                closer = [scores[i] for i in range(b) if lv[i] < l]
                if not farther or not closer:
                    continue  # an empty set contributes nothing
                if l == 1:
                    hinge = margins[0] - positive + max(farther)
                elif cumulative:
                    hinge = sum(margins[:l]) - positive + max(farther)
                else:
                    hinge = margins[l - 1] - min(closer) + max(farther)
                out[l - 1, p] += betas[l - 1] * max(0.0, hinge)
    return out


def reference_formula(s, rd, thresholds, margins, betas, cumulative=False):
    """The reference LadderLoss.forward (Code/ladderloss.py) in numpy: masks by multiplication, first ladder
    with weight 1 (kitm's betas[0] must be 1), reference betas = kitm betas[1:]."""
    b = s.shape[0]
    diagonal = np.diag(s)[:, None]
    eye = np.eye(b, dtype=bool)
    cost_x2v = np.where(eye, 0, np.maximum(margins[0] + s - diagonal, 0))
    cost_v2x = np.where(eye, 0, np.maximum(margins[0] + s - diagonal.T, 0))
    total = cost_x2v.max(1).sum() + cost_v2x.max(0).sum()
    for l, thre in enumerate(thresholds):
        dismask = (rd < thre).astype(float)
        gt_dis = s * dismask
        if cumulative:
            xvld = np.maximum(np.sum(margins[:l + 2]) - diagonal.ravel() + gt_dis.max(1), 0)
            vxld = np.maximum(np.sum(margins[:l + 2]) - diagonal.ravel() + gt_dis.max(0), 0)
        else:
            simmask = (rd >= thre).astype(float)
            gt_sim = s * simmask + 1.0 * dismask
            xvld = np.maximum(margins[1 + l] - gt_sim.min(1) + gt_dis.max(1), 0)
            vxld = np.maximum(margins[1 + l] - gt_sim.min(0) + gt_dis.max(0), 0)
        total += betas[1 + l] * (xvld.sum() + vxld.sum())
    return total


def test_levels_with_ties_at_thresholds_and_same_image():
    # thresholds (0.6, 0.3): >= 0.6 -> 1, [0.3, 0.6) -> 2, < 0.3 -> 3; a value at a threshold goes up.
    r = np.array([[0.9, 0.6, 0.3], [0.59, 0.2, 0.61], [0.3, 0.29999, 0.6]])
    np.testing.assert_array_equal(ladder_levels(r, (0.6, 0.3)).numpy(), [[0, 1, 2], [2, 0, 1], [2, 3, 0]])
    for dtype in (np.float32, np.float64):  # the threshold is compared in the relevance's dtype
        np.testing.assert_array_equal(ladder_levels(r.astype(dtype), (0.6, 0.3)).numpy(),
                                      levels_oracle(r.astype(dtype), np.array((0.6, 0.3), dtype)))
    rng = np.random.default_rng(0)
    for b in (1, 2, 7):
        r = rng.choice([0.1, 0.3, 0.35, 0.4, 0.5, 0.9], size=(b, b))
        image_index = rng.integers(0, max(1, b - 2), size=b)
        for thresholds in ((), (0.4,), (0.4, 0.35)):
            np.testing.assert_array_equal(ladder_levels(r, thresholds).numpy(), levels_oracle(r, thresholds))
            np.testing.assert_array_equal(ladder_levels(r, thresholds, image_index=image_index).numpy(),
                                          levels_oracle(r, thresholds, image_index))


def test_hand_computed_example_of_the_docstring():
    # One image query (row 0): s = [0.05 (positive), 0.1, -0.2, -0.1], levels [0, 1, 2, 2],
    # alpha = (0.2, 0.1), beta = (1, 0.5): ladder 1 = [0.2 - 0.05 + 0.1]+ = 0.25,
    # ladder 2 = [0.1 - 0.05 + (-0.1)]+ = 0. Column levels all 0: caption queries have no candidates.
    s = np.array([[0.05, 0.1, -0.2, -0.1], [0.3, 0.5, 0.2, 0.1], [0.0, 0.1, 0.4, 0.2], [0.1, 0.2, 0.3, 0.6]])
    row_levels = np.zeros((4, 4), dtype=np.int32)
    row_levels[0] = [0, 1, 2, 2]
    zeros = np.zeros((4, 4), dtype=np.int32)
    terms = ladder_terms(s, row_levels, zeros, margins=(0.2, 0.1), betas=(1.0, 0.5))
    np.testing.assert_allclose(terms[0].numpy(), [0.25, 0, 0, 0], atol=1e-12)
    np.testing.assert_allclose(terms[1].numpy(), [0, 0, 0, 0], atol=1e-12)
    # The reference's ladder 2 on the same query: max over s * mask = 0, so [0.1 - 0.05 + 0]+ = 0.05 > 0.
    mask = row_levels[0] >= 2
    assert np.isclose(max(0.0, 0.1 - np.where(~mask, s[0], 1.0).min() + (s[0] * mask).max()), 0.05)
    # N_>=2 empty: kitm drops ladder 2, the reference would charge [0.1 - (-0.2) + 0]+ = 0.3.
    row_levels[0] = [0, 1, 1, 1]
    terms = ladder_terms(s, row_levels, zeros, margins=(0.2, 0.1), betas=(1.0, 0.5))
    np.testing.assert_allclose(terms[1].numpy(), 0.0, atol=1e-12)


@pytest.mark.parametrize("cumulative", [False, True])
def test_matches_oracle_on_random_levels_with_negative_similarities_and_empty_levels(cumulative):
    rng = np.random.default_rng(1)
    for b in (1, 2, 3, 8):
        for margins, betas in (((0.2,), (1.0,)), ((0.2, 0.05), (1.0, 0.25)), ((0.2, 0.1, 0.3), (0.7, 0.5, 2.0))):
            s = rng.uniform(-1, 1, size=(b, b))
            num_levels = len(margins)
            # Levels up to num_levels + 1 (beyond the last ladder) and some levels never used: empty sets.
            row_levels = rng.integers(1, num_levels + 2, size=(b, b))
            column_levels = rng.choice([1, num_levels], size=(b, b))
            np.fill_diagonal(row_levels, 0)
            np.fill_diagonal(column_levels, 0)
            if b > 2:
                row_levels[0, 1] = 0  # a second positive (another sample of the same image)
            want = ladder_oracle(s, row_levels, column_levels, margins, betas, cumulative)
            terms = ladder_terms(s, row_levels, column_levels, margins=margins, betas=betas, cumulative=cumulative)
            np.testing.assert_allclose(np.stack([t.numpy() for t in terms]), want, atol=1e-12)
            np.testing.assert_allclose(
                ladder_loss(s, row_levels, column_levels, margins=margins, betas=betas, cumulative=cumulative).numpy(),
                want.sum(axis=0), atol=1e-12)


@pytest.mark.parametrize("cumulative", [False, True])
@pytest.mark.parametrize("thresholds", [(0.5,), (0.6, 0.3)])
def test_equals_reference_formula_when_similarities_positive_and_sets_nonempty(thresholds, cumulative):
    rng = np.random.default_rng(2)
    margins = (0.2,) + (0.05,) * len(thresholds)
    betas = (1.0,) + tuple(0.5 ** (l + 1) for l in range(1, len(thresholds) + 1))
    checked = 0
    while checked < 5:
        b = 8
        s = rng.uniform(0.01, 0.99, size=(b, b))
        rd = rng.uniform(0, 1, size=(b, b))
        np.fill_diagonal(rd, 1.0)  # SBERT self-similarity: the positive is in every N_<l
        levels = levels_oracle(rd, thresholds)
        nonempty = all((levels[p] >= l).any() and (levels[:, p] >= l).any()
                       for p in range(b) for l in range(1, len(thresholds) + 2))
        if not nonempty:
            continue
        checked += 1
        got = ladder_loss(s, ladder_levels(rd, thresholds), ladder_levels(rd, thresholds), margins=margins,
                          betas=betas, cumulative=cumulative).numpy().sum()
        np.testing.assert_allclose(got, reference_formula(s, rd, thresholds, margins, betas, cumulative), rtol=1e-12)


def test_gradient_matches_finite_differences():
    rng = np.random.default_rng(3)
    s = tf.constant(rng.uniform(-1, 1, size=(5, 5)))
    levels = rng.integers(1, 4, size=(5, 5))
    np.fill_diagonal(levels, 0)
    for cumulative in (False, True):
        theoretical, numerical = tf.test.compute_gradient(
            lambda x: tf.reduce_sum(ladder_loss(x, levels, levels.T, margins=(0.2, 0.1, 0.05), betas=(1, 0.5, 0.25),
                                                cumulative=cumulative)), [s])
        np.testing.assert_allclose(theoretical[0], numerical[0], atol=1e-6)


def embeddings(rng, b, d=6):
    image = tf.math.l2_normalize(tf.constant(rng.normal(size=(b, d))), axis=1)
    text = tf.math.l2_normalize(tf.constant(rng.normal(size=(b, d))), axis=1)
    return image, text


def test_ladder_loss_class_matches_oracle_and_logs_levels():
    rng = np.random.default_rng(4)
    image, text = embeddings(rng, 9)
    s = (image @ tf.transpose(text)).numpy()
    r = rng.uniform(0, 1, size=(9, 9))
    image_index = np.array([0, 0, 1, 2, 3, 3, 4, 5, 6])
    loss = LadderLoss(thresholds=(0.4, 0.35), margins=(0.2, 0.01, 0.01), betas=(1.0, 0.25, 0.125))
    assert loss.term_names == ("level_1", "level_2", "level_3")
    levels = levels_oracle(r, (0.4, 0.35), image_index)
    want = ladder_oracle(s, levels, levels, (0.2, 0.01, 0.01), (1.0, 0.25, 0.125))
    y_true = {"relevance": r, "image_index": image_index}
    terms = loss.compute_terms(y_true, {"image": image, "text": text})
    np.testing.assert_allclose(np.stack([terms[name].numpy() for name in loss.term_names]), want, atol=1e-6)
    np.testing.assert_allclose(loss(y_true, {"image": image, "text": text}).numpy(), want.sum(), rtol=1e-5)
    # Defaults: L = 2 with theta = 0.40, alpha = (0.2, 0.01), beta = (1, 0.25).
    default = LadderLoss()
    want = ladder_oracle(s, levels_oracle(r, (0.4,)), levels_oracle(r, (0.4,)), (0.2, 0.01), (1.0, 0.25)).sum()
    np.testing.assert_allclose(default({"relevance": r}, {"image": image, "text": text}).numpy(), want, rtol=1e-5)


def exact_levels(values, k_min, k_max):
    """Oracle for one query's candidate values: for each k, the k-means optimum by exhaustive search over
    every assignment of the values to k non-empty clusters; keep the k with the best mean silhouette
    (scikit-learn's `silhouette_score`, first maximum); number clusters by decreasing centre."""
    x = np.asarray(values, dtype=float)
    n = len(x)
    best = None
    for k in range(k_min, min(k_max, len(np.unique(x))) + 1):
        labels = np.array(list(itertools.product(range(k), repeat=n)))  # [k^n, n]
        onehot = labels[:, :, None] == np.arange(k)[None, None, :]
        counts = onehot.sum(axis=1)
        sums = (onehot * x[None, :, None]).sum(axis=1)
        sse = (x ** 2).sum() - (sums ** 2 / np.maximum(counts, 1)).sum(axis=1)
        sse[(counts == 0).any(axis=1)] = np.inf
        chosen = labels[np.argmin(sse)]
        score = silhouette_score(x.reshape(-1, 1), chosen)
        if best is None or score > best[0] + 1e-12:
            centers = np.array([x[chosen == c].mean() for c in range(k)])
            rank = np.argsort(np.argsort(-centers))
            best = (score, rank[chosen] + 1)
    return best[1]


def clustered_relevance(rng, b, centers):
    r = rng.choice(centers, size=(b, b)) + rng.uniform(-0.01, 0.01, size=(b, b))
    np.fill_diagonal(r, 5.0)  # an extreme positive value that must not take part in the clustering
    return r


def test_adaptive_levels_cluster_only_the_candidates_of_each_row_and_column():
    rng = np.random.default_rng(5)
    b = 8
    r = clustered_relevance(rng, b, [0.9, 0.5, 0.1])
    image_index = np.array([0, 1, 1, 2, 3, 4, 5, 6])
    row_levels, column_levels = (t.numpy() for t in adaptive_levels(r, 2, 4, image_index=image_index))
    # The XLA-compiled clustering (the default) and the plain graph agree.
    for got, want in zip(adaptive_levels(r, 2, 4, image_index=image_index, jit_compile=False),
                         (row_levels, column_levels)):
        np.testing.assert_array_equal(got.numpy(), want)
    same = image_index[:, None] == image_index[None, :]
    assert (row_levels[same] == 0).all() and (column_levels[same] == 0).all()
    for p in range(b):
        candidates = ~same[p]
        np.testing.assert_array_equal(row_levels[p, candidates], exact_levels(r[p, candidates], 2, 4))
        np.testing.assert_array_equal(column_levels[candidates, p], exact_levels(r[candidates, p], 2, 4))


def test_adaptive_ladder_loss_matches_oracle_with_paper_defaults():
    rng = np.random.default_rng(6)
    b = 7
    image, text = embeddings(rng, b)
    s = (image @ tf.transpose(text)).numpy()
    r = clustered_relevance(rng, b, [0.8, 0.6, 0.35, 0.1])
    loss = AdaptiveLadderLoss(jit_compile=False)
    assert loss.term_names == ("level_1", "level_2", "level_3", "level_4")
    row_levels = np.zeros((b, b), dtype=int)
    column_levels = np.zeros((b, b), dtype=int)
    off = ~np.eye(b, dtype=bool)
    for p in range(b):
        row_levels[p, off[p]] = exact_levels(r[p, off[p]], 2, 4)
        column_levels[off[:, p], p] = exact_levels(r[off[:, p], p], 2, 4)
    margins, betas = (0.2, 0.01, 0.01, 0.01), (1.0, 1 / 4, 1 / 8, 1 / 16)
    want = ladder_oracle(s, row_levels, column_levels, margins, betas)
    terms = loss.compute_terms({"relevance": r}, {"image": image, "text": text})
    np.testing.assert_allclose(np.stack([terms[name].numpy() for name in loss.term_names]), want, atol=1e-6)
    # Levels supplied by the input pipeline are used as given (no clustering in the loss).
    given = {"relevance": r, "row_levels": row_levels, "column_levels": column_levels}
    terms = loss.compute_terms(given, {"image": image, "text": text})
    np.testing.assert_allclose(np.stack([terms[name].numpy() for name in loss.term_names]), want, atol=1e-6)
    # A constant row has one distinct value: one level, so only the triplet ladder applies to it.
    r_flat = np.full((b, b), 0.5)
    row_levels, column_levels = (t.numpy() for t in adaptive_levels(r_flat, 2, 4, jit_compile=False))
    np.testing.assert_array_equal(row_levels, off.astype(int))
    np.testing.assert_array_equal(column_levels, off.astype(int))


def test_adaptive_small_batches_and_graph_mode_with_dynamic_batch():
    # Without XLA: with jit_compile the clustering compiles once per batch shape (about 1 s each here).
    loss = AdaptiveLadderLoss(level_bounds=(2, 3), jit_compile=False)

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32), tf.TensorSpec([None, 4], tf.float32),
                                  tf.TensorSpec([None, None], tf.float32)])
    def step(image, text, relevance):
        return loss({"relevance": relevance}, {"image": image, "text": text})

    rng = np.random.default_rng(7)
    for b in (1, 2, 3, 6):  # fewer candidates than L_max: padded, never an error
        image, text = (tf.cast(t, tf.float32) for t in embeddings(rng, b, 4))
        r = rng.uniform(0, 1, size=(b, b)).astype(np.float32)
        eager = loss({"relevance": r}, {"image": image, "text": text}).numpy()
        np.testing.assert_allclose(step(image, text, r).numpy(), eager, rtol=1e-6)
        row_levels, column_levels = (t.numpy() for t in adaptive_levels(r, 2, 3, jit_compile=False))
        want = ladder_oracle((image @ tf.transpose(text)).numpy(), row_levels, column_levels, (0.2, 0.01, 0.01),
                             (1.0, 0.25, 0.125)).sum()
        np.testing.assert_allclose(eager, want, rtol=1e-5, atol=1e-6)


def test_get_config_round_trip_and_serialization():
    for loss in (LadderLoss(thresholds=(0.4, 0.35), margins=(0.2, 0.01, 0.01), betas=(1, 0.25, 0.125),
                            cumulative=True, name="lad3"),
                 AdaptiveLadderLoss(level_bounds=(2, 3), first_margin=0.1, margin=0.02, betas=(1, 0.5, 0.25),
                                    lloyd_runs=0, jit_compile=False),
                 AdaptiveLadderLoss()):
        clone = type(loss).from_config(loss.get_config())
        assert clone.get_config() == loss.get_config()
        restored = keras.losses.deserialize(keras.losses.serialize(loss))
        assert type(restored) is type(loss) and restored.get_config() == loss.get_config()
        assert restored.term_names == loss.term_names


def test_bad_arguments_raise_value_error_naming_them():
    with pytest.raises(ValueError, match="thresholds must be strictly decreasing"):
        LadderLoss(thresholds=(0.3, 0.4), margins=(0.2, 0.01, 0.01), betas=(1, 0.25, 0.125))
    with pytest.raises(ValueError, match="thresholds must be strictly decreasing"):
        ladder_levels(np.zeros((2, 2)), (0.4, 0.4))
    with pytest.raises(ValueError, match="margins and betas must have the same length"):
        ladder_loss(np.zeros((2, 2)), np.zeros((2, 2), int), np.zeros((2, 2), int), margins=(0.2, 0.1), betas=(1,))
    with pytest.raises(ValueError, match="len\\(thresholds\\) \\+ 1"):
        LadderLoss(thresholds=(0.4,), margins=(0.2,), betas=(1.0,))
    with pytest.raises(ValueError, match="margins must be >= 0"):
        LadderLoss(margins=(0.2, -0.01))
    with pytest.raises(ValueError, match="level_bounds"):
        AdaptiveLadderLoss(level_bounds=(1, 3))
    with pytest.raises(ValueError, match="level_bounds"):
        AdaptiveLadderLoss(level_bounds=(4, 2))
    with pytest.raises(ValueError, match="betas must have L_max = 4"):
        AdaptiveLadderLoss(betas=(1.0, 0.25))
    with pytest.raises(ValueError, match="row_levels"):
        ladder_loss(np.zeros((2, 2)), np.zeros((2, 2)), np.zeros((2, 2), int), margins=(0.2,), betas=(1,))
    image = tf.math.l2_normalize(tf.ones([3, 4]), axis=1)
    with pytest.raises(ValueError, match="relevance"):
        LadderLoss()(None, {"image": image, "text": image})

"""kitm.losses.samplers against loop oracles: hardest / easiest / random negatives and hard contrastive sets."""

import numpy as np
import pytest
import tensorflow as tf

import kitm  # noqa: F401  (selects the TensorFlow backend)
from kitm.losses.samplers import (easiest_negatives, hard_contrastive, hardest_negatives, masked_max, masked_min,
                                  random_negatives, sample_negatives)
from kitm.ops.similarity import negative_mask


def pick_oracle(scores, negative, axis, want):
    """Loop oracle: per anchor, the first index with the max (want='max') or min score among negatives."""
    scores, negative = np.asarray(scores), np.asarray(negative)
    if axis == 0:
        scores, negative = scores.T, negative.T
    indices, valid = [], []
    for row, allowed in zip(scores, negative):
        candidates = [j for j in range(len(row)) if allowed[j]]
        if not candidates:
            indices.append(-1)
            valid.append(False)
            continue
        best = candidates[0]
        for j in candidates[1:]:
            if (row[j] > row[best]) if want == "max" else (row[j] < row[best]):
                best = j
        indices.append(best)
        valid.append(True)
    return np.array(indices), np.array(valid)


def masked_extreme_oracle(values, mask, axis, want):
    values, mask = np.asarray(values), np.asarray(mask)
    if axis == 0:
        values, mask = values.T, mask.T
    out, nonempty = [], []
    for row, allowed in zip(values, mask):
        members = [row[j] for j in range(len(row)) if allowed[j]]
        out.append((max if want == "max" else min)(members) if members else 0.0)
        nonempty.append(bool(members))
    return np.array(out), np.array(nonempty)


def test_hand_computed_example():
    # s = [[0.9, 0.5, -0.3], [0.8, 0.6, 0.1], [-0.2, 0.4, 0.7]]; negatives are the off-diagonal entries.
    # Image anchors (rows): hardest = [1 (0.5), 0 (0.8), 1 (0.4)], easiest = [2 (-0.3), 2 (0.1), 0 (-0.2)].
    # Caption anchors (columns): hardest = [1 (0.8), 0 (0.5), 1 (0.1)], easiest = [2 (-0.2), 2 (0.4), 0 (-0.3)].
    s = tf.constant([[0.9, 0.5, -0.3], [0.8, 0.6, 0.1], [-0.2, 0.4, 0.7]])
    neg = negative_mask(s)
    assert hardest_negatives(s, neg, axis=1).indices.numpy().tolist() == [1, 0, 1]
    assert easiest_negatives(s, neg, axis=1).indices.numpy().tolist() == [2, 2, 0]
    assert hardest_negatives(s, neg, axis=0).indices.numpy().tolist() == [1, 0, 1]
    assert easiest_negatives(s, neg, axis=0).indices.numpy().tolist() == [2, 2, 0]


@pytest.mark.parametrize("axis", [0, 1])
def test_hardest_and_easiest_match_oracle_with_negative_scores_ties_and_same_image(axis):
    rng = np.random.default_rng(0)
    for b in (1, 2, 5, 9):
        for tie in (False, True):
            s = rng.uniform(-1, 1, size=(b, b))
            if tie:
                s = np.round(s * 2) / 2  # few distinct values: many ties, broken by the smallest index
            image_index = rng.integers(0, max(1, b // 2), size=b)
            for neg in (negative_mask(s).numpy(), negative_mask(s, image_index).numpy()):
                got = hardest_negatives(s, neg, axis)
                want = pick_oracle(s, neg, axis, "max")
                np.testing.assert_array_equal(got.indices.numpy(), want[0])
                np.testing.assert_array_equal(got.valid.numpy(), want[1])
                got = easiest_negatives(s, neg, axis)
                want = pick_oracle(s, neg, axis, "min")
                np.testing.assert_array_equal(got.indices.numpy(), want[0])
                np.testing.assert_array_equal(got.valid.numpy(), want[1])


def test_anchor_without_negative_gets_minus_one():
    s = np.array([[0.3]])
    for sampling in ("hardest", "easiest", "random"):
        sample = sample_negatives(s, negative_mask(s), sampling)
        assert sample.indices.numpy().tolist() == [-1] and sample.valid.numpy().tolist() == [False]
    # Two samples of one image: neither is a negative of the other.
    s = np.array([[0.3, 0.9], [0.1, 0.2]])
    sample = hardest_negatives(s, negative_mask(s, [4, 4]), axis=0)
    assert sample.indices.numpy().tolist() == [-1, -1]


def test_random_is_uniform_over_each_anchors_negatives_only():
    # 6000 independent anchors sharing one pattern of allowed negatives {1, 3, 4}.
    pattern = np.array([False, True, False, True, True, False])
    mask = np.tile(pattern, (6000, 1))
    picks = random_negatives(mask, axis=1, seed=tf.constant([1, 2])).indices.numpy()
    assert set(np.unique(picks)) == {1, 3, 4}
    counts = np.array([(picks == j).sum() for j in (1, 3, 4)])
    # Each share is 1/3; 6000 draws give a standard deviation of about 0.006 per share.
    np.testing.assert_allclose(counts / 6000, 1 / 3, atol=0.03)
    # Caption anchors (axis 0) of the transposed mask: the same distribution.
    picks0 = random_negatives(mask.T, axis=0, seed=tf.constant([5, 6])).indices.numpy()
    assert set(np.unique(picks0)) == {1, 3, 4}
    np.testing.assert_allclose([(picks0 == j).mean() for j in (1, 3, 4)], 1 / 3, atol=0.03)


def test_random_seeds():
    mask = negative_mask(tf.zeros([7, 7]), [0, 0, 1, 2, 3, 3, 4]).numpy()
    a = random_negatives(mask, seed=tf.constant([3, 4])).indices.numpy()
    b = random_negatives(mask, seed=tf.constant([3, 4])).indices.numpy()
    np.testing.assert_array_equal(a, b)  # stateless: same seed, same draw
    for seed in (None, 5, tf.constant([9, 9])):
        for axis in (0, 1):
            sample = random_negatives(mask, axis=axis, seed=seed)
            idx = sample.indices.numpy()
            m = mask if axis == 1 else mask.T
            assert all(m[i, j] for i, j in enumerate(idx))
    with pytest.raises(ValueError, match="seed"):
        random_negatives(mask, seed=tf.constant([1, 2, 3]))


@pytest.mark.parametrize("axis", [0, 1])
def test_masked_max_min_match_oracle_including_negative_values_and_empty_sets(axis):
    rng = np.random.default_rng(1)
    for b in (1, 2, 6):
        values = rng.uniform(-2, -0.5, size=(b, b + 1))  # all negative: a 0 fill would be wrong
        mask = rng.uniform(size=(b, b + 1)) < 0.4
        mask[0] = False  # an empty set on both axes
        mask[:, 0] = False
        for fn, want in ((masked_max, "max"), (masked_min, "min")):
            got, nonempty = fn(values, mask, axis)
            expected, expected_nonempty = masked_extreme_oracle(values, mask, axis, want)
            np.testing.assert_allclose(got.numpy(), expected, atol=1e-12)
            np.testing.assert_array_equal(nonempty.numpy(), expected_nonempty)


def test_hard_contrastive_pairs_the_furthest_closer_with_the_closest_farther():
    values = np.array([[0.9, 0.2, -0.1, -0.4], [0.5, 0.7, 0.1, 0.3]])
    closer = np.array([[True, True, False, False], [True, True, True, True]])
    farther = np.array([[False, False, True, True], [False, False, False, False]])
    low, high, valid = hard_contrastive(values, closer, farther)
    np.testing.assert_allclose(low.numpy(), [0.2, 0.1])
    np.testing.assert_allclose(high.numpy(), [-0.1, 0.0])
    assert valid.numpy().tolist() == [True, False]


def test_masked_max_gradient_reaches_only_the_chosen_member():
    values = tf.constant([[-0.3, -0.1, -0.2], [0.4, 0.2, 0.9]])
    mask = tf.constant([[True, False, True], [False, False, False]])
    with tf.GradientTape() as tape:
        tape.watch(values)
        best, _ = masked_max(values, mask)
        total = tf.reduce_sum(best)
    # Row 0's set is {-0.3, -0.2}: the max is -0.2 (column 2); row 1's set is empty.
    np.testing.assert_allclose(tape.gradient(total, values).numpy(), [[0, 0, 1], [0, 0, 0]])


def test_graph_mode_with_dynamic_batch():
    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.float32)])
    def picks(s):
        neg = negative_mask(s)
        return (hardest_negatives(s, neg).indices, easiest_negatives(s, neg, axis=0).indices,
                random_negatives(neg, seed=3).indices)

    rng = np.random.default_rng(2)
    for b in (1, 3, 6):
        s = rng.uniform(-1, 1, size=(b, b)).astype(np.float32)
        hard, easy, rand = (t.numpy() for t in picks(s))
        neg = negative_mask(s).numpy()
        np.testing.assert_array_equal(hard, pick_oracle(s, neg, 1, "max")[0])
        np.testing.assert_array_equal(easy, pick_oracle(s, neg, 0, "min")[0])
        assert all(neg[i, j] for i, j in enumerate(rand)) if b > 1 else rand.tolist() == [-1]


def test_bad_arguments_raise_value_error_naming_them():
    s = np.zeros((3, 3))
    neg = negative_mask(s)
    with pytest.raises(ValueError, match="sampling"):
        sample_negatives(s, neg, "semi-hard")
    with pytest.raises(ValueError, match="axis"):
        hardest_negatives(s, neg, axis=2)
    with pytest.raises(ValueError, match="negative must be a bool"):
        hardest_negatives(s, np.ones((3, 3)))
    with pytest.raises(ValueError, match=r"scores must be a \[B, B\]"):
        easiest_negatives(np.zeros(3), neg)

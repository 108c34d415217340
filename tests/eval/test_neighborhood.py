"""Neighbourhood preservation (Thomas & Kovashka, Table 3) against a per-item oracle."""

from __future__ import annotations

import numpy as np
import pytest

import kitm.eval as keval


def oracle_neighbors(points: np.ndarray, k: int, metric: str) -> list[set[int]]:
    out = []
    for i in range(points.shape[0]):
        if metric == "cosine":
            unit = points / np.linalg.norm(points, axis=1, keepdims=True)
            closeness = unit @ unit[i]
        else:
            closeness = -np.linalg.norm(points - points[i], axis=1)
        closeness[i] = -np.inf
        out.append(set(np.argsort(-closeness, kind="stable")[:k].tolist()))
    return out


def oracle_preservation(reference, learned, k, metric):
    before = oracle_neighbors(reference, k, metric)
    after = oracle_neighbors(learned, k, metric)
    return float(np.mean([len(a & b) / k for a, b in zip(before, after)]))


def test_hand_computed_euclidean():
    # Points on a line, k=1. Reference 0, 1, 3, 7: nearest of each -> items 1, 0, 1, 2.
    # Learned 0, 2, 3, 7: nearest -> 1, 2, 1, 2. Items 0, 2, 3 keep their neighbour: 3/4.
    reference = np.array([[0.0], [1.0], [3.0], [7.0]])
    learned = np.array([[0.0], [2.0], [3.0], [7.0]])
    assert keval.neighborhood_preservation(reference, learned, k=1, metric="euclidean") == pytest.approx(0.75)
    np.testing.assert_array_equal(
        keval.nearest_neighbor_indices(reference, 1, metric="euclidean")[:, 0], [1, 0, 1, 2]
    )


def test_identical_spaces_preserve_everything():
    rng = np.random.default_rng(0)
    points = rng.standard_normal((30, 5))
    assert keval.neighborhood_preservation(points, 3.0 * points, k=7) == pytest.approx(1.0)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
@pytest.mark.parametrize("k", [1, 5, 20])
def test_random_against_oracle(metric, k):
    rng = np.random.default_rng(k)
    reference = rng.standard_normal((41, 6))
    learned = reference @ rng.standard_normal((6, 4)) + 0.5 * rng.standard_normal((41, 4))
    expected = oracle_preservation(reference, learned, k, metric)
    for chunk in (None, 6):
        ours = keval.neighborhood_preservation(reference, learned, k, metric=metric, chunk_size=chunk)
        assert ours == pytest.approx(expected, abs=1e-12)


def test_ties_go_to_lower_index():
    # Item 0 at the origin has items 1 and 2 at equal distance; with k=1 it takes item 1.
    points = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [5.0, 5.0]])
    assert keval.nearest_neighbor_indices(points, 1, metric="euclidean")[0, 0] == 1


def test_bad_input():
    points = np.ones((5, 3))
    with pytest.raises(ValueError, match="same N items"):
        keval.neighborhood_preservation(points, np.ones((4, 3)), k=2)
    with pytest.raises(ValueError, match="exceeds the 4 other items"):
        keval.neighborhood_preservation(points, points, k=5)
    with pytest.raises(ValueError, match="metric"):
        keval.neighborhood_preservation(points, points, k=2, metric="manhattan")
    zero_row = np.vstack([np.zeros((1, 3)), np.ones((4, 3))])
    with pytest.raises(ValueError, match="row 0 is zero"):
        keval.neighborhood_preservation(zero_row, points, k=2)

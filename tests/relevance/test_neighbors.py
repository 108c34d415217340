"""kitm.relevance.neighbors: k nearest neighbours by cosine, self excluded by index, ties by index.

Oracle: brute force in float64 numpy, one row at a time: every other row's cosine, then the rows
ordered by (decreasing score, increasing index) with ``np.lexsort``. Exact ties come from vectors
with entries +-1/4 in 16 dimensions (unit norm, every product and sum exact in float32), many of
them duplicates.
"""

from __future__ import annotations

import logging
import sys
import warnings

import numpy as np
import pytest

from kitm.relevance.neighbors import (approximate_nearest_neighbors, approximate_recall, exact_nearest_neighbors,
                                      nearest_neighbors)


def oracle(embeddings: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    unit = np.asarray(embeddings, dtype=np.float64)
    unit = unit / np.linalg.norm(unit, axis=1, keepdims=True)
    num_rows = len(unit)
    indices = np.empty((num_rows, k), dtype=np.int64)
    scores = np.empty((num_rows, k))
    for i in range(num_rows):
        others = np.array([j for j in range(num_rows) if j != i])
        similarity = unit[others] @ unit[i]
        order = np.lexsort((others, -similarity))[:k]
        indices[i], scores[i] = others[order], similarity[order]
    return indices, scores


def quarter_vectors(num_rows: int, num_patterns: int, seed: int) -> np.ndarray:
    """Rows drawn from a few +-1/4 patterns in 16-d: unit norm, exact float32 products, many ties."""
    rng = np.random.default_rng(seed)
    patterns = rng.choice([-0.25, 0.25], size=(num_patterns, 16))
    return patterns[rng.integers(num_patterns, size=num_rows)].astype(np.float32)


def cosine64(embeddings: np.ndarray) -> np.ndarray:
    unit = np.asarray(embeddings, dtype=np.float64)
    unit = unit / np.linalg.norm(unit, axis=1, keepdims=True)
    return unit @ unit.T


@pytest.mark.parametrize("k", [1, 3, 17, 59])
def test_exact_equals_oracle_with_ties_and_duplicates(k):
    embeddings = quarter_vectors(60, 9, seed=k)
    indices, scores = nearest_neighbors(embeddings, k)
    expected_indices, expected_scores = oracle(embeddings, k)
    assert indices.dtype == np.int64 and scores.dtype == np.float32
    assert indices.shape == scores.shape == (60, k)
    np.testing.assert_array_equal(indices, expected_indices)
    np.testing.assert_array_equal(scores, expected_scores)


def test_hand_computed_example():
    # Rows 0 and 3 are the same direction; row 2 is at 45 degrees to rows 0, 1 and 3.
    embeddings = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
    indices, scores = nearest_neighbors(embeddings, 2)
    np.testing.assert_array_equal(indices, [[3, 2], [2, 0], [0, 1], [0, 2]])
    half_root = np.sqrt(0.5)
    np.testing.assert_allclose(scores, [[1, half_root], [half_root, 0], [half_root, half_root], [1, half_root]],
                               atol=1e-7)


def test_all_rows_identical_excludes_self_by_index():
    embeddings = np.tile(np.array([[0.6, 0.8]], dtype=np.float32), (7, 1))
    indices, scores = nearest_neighbors(embeddings, 6)
    expected = np.array([[j for j in range(7) if j != i] for i in range(7)])
    np.testing.assert_array_equal(indices, expected)
    np.testing.assert_allclose(scores, 1.0, atol=1e-7)


def test_random_data_matches_oracle():
    rng = np.random.default_rng(3)
    embeddings = rng.standard_normal((300, 24))
    k = 25
    indices, scores = nearest_neighbors(embeddings, k)
    expected_indices, expected_scores = oracle(embeddings, k)
    np.testing.assert_allclose(scores, expected_scores, atol=2e-6)
    # The float32 and float64 orders may differ only where scores are within rounding of each other.
    cosine = cosine64(embeddings)
    np.testing.assert_allclose(np.take_along_axis(cosine, indices, axis=1), expected_scores, atol=2e-6)
    gaps = np.diff(-np.sort(-np.where(np.eye(300, dtype=bool), -np.inf, cosine), axis=1)[:, :k + 1], axis=1)
    clear = (np.abs(gaps) > 1e-5).all(axis=1)
    assert clear.mean() > 0.9
    np.testing.assert_array_equal(indices[clear], expected_indices[clear])


def test_chunking_and_row_subsets_do_not_change_the_result():
    embeddings = quarter_vectors(80, 12, seed=5)
    full = nearest_neighbors(embeddings, 10)
    one_row_chunks = exact_nearest_neighbors(embeddings, 10, memory_bytes=1)
    for got, expected in zip(one_row_chunks, full):
        np.testing.assert_array_equal(got, expected)
    rows = np.array([41, 3, 3, 79])
    subset = exact_nearest_neighbors(embeddings, 10, rows=rows, memory_bytes=16 * 80 * 3)
    for got, expected in zip(subset, full):
        np.testing.assert_array_equal(got, expected[rows])


def test_rows_are_normalised_so_scale_does_not_matter():
    rng = np.random.default_rng(8)
    embeddings = rng.standard_normal((50, 8))
    scaled = embeddings * rng.uniform(0.1, 30.0, size=(50, 1))
    a_indices, a_scores = nearest_neighbors(embeddings, 7)
    b_indices, b_scores = nearest_neighbors(scaled, 7)
    np.testing.assert_array_equal(a_indices, b_indices)
    np.testing.assert_allclose(a_scores, b_scores, atol=1e-6)
    int_indices, _ = nearest_neighbors(np.array([[1, 0], [0, 2], [3, 3]]), 1)
    np.testing.assert_array_equal(int_indices, [[2], [2], [0]])


@pytest.mark.parametrize("k, message", [(5, "k must be < N"), (9, "k must be < N"), (0, "positive integer"),
                                        (True, "positive integer"), (2.0, "positive integer")])
def test_bad_k(k, message):
    with pytest.raises(ValueError, match=message):
        nearest_neighbors(np.eye(5), k)


def test_bad_embeddings():
    with pytest.raises(ValueError, match="2-D"):
        nearest_neighbors(np.ones(5), 1)
    with pytest.raises(ValueError, match="2-D"):
        nearest_neighbors(np.ones((2, 3, 4)), 1)
    with pytest.raises(ValueError, match=r"embeddings\[1\] holds a NaN"):
        nearest_neighbors(np.array([[1.0, 0.0], [np.nan, 1.0], [0.0, 1.0]]), 1)
    with pytest.raises(ValueError, match=r"embeddings\[2\] is a zero vector"):
        nearest_neighbors(np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]), 1)
    with pytest.raises(TypeError, match="numeric"):
        nearest_neighbors(np.array([["a", "b"], ["c", "d"]]), 1)
    with pytest.raises(ValueError, match="rows must index"):
        exact_nearest_neighbors(np.eye(4), 1, rows=[0, 4])
    with pytest.raises(ValueError, match="memory_bytes"):
        exact_nearest_neighbors(np.eye(4), 1, memory_bytes=0)


def test_recall_hand_computed():
    rng = np.random.default_rng(11)
    embeddings = rng.standard_normal((40, 6))
    k = 5
    exact, _ = oracle(embeddings, k)
    assert approximate_recall(embeddings, exact, sample=None) == 1.0
    tenth, _ = oracle(embeddings, 10)
    # One of the five replaced by the row's 10th neighbour, by a repeat, by itself, by -1: 4/5 each.
    for replacement in (tenth[:, 9], exact[:, 0], np.arange(40), np.full(40, -1)):
        corrupted = exact.copy()
        corrupted[:, 4] = replacement
        assert approximate_recall(embeddings, corrupted, sample=None) == pytest.approx(0.8)
    # Half the rows lose two entries: (20 * 5 + 20 * 3) / (40 * 5).
    corrupted = exact.copy()
    corrupted[::2, 3:] = tenth[::2, 8:10]
    assert approximate_recall(embeddings, corrupted, sample=None) == pytest.approx(0.8)
    sampled = approximate_recall(embeddings, corrupted, sample=10, seed=1)
    assert sampled in {(5 * m + 3 * (10 - m)) / 50 for m in range(11)}


def test_recall_accepts_any_tied_choice():
    embeddings = quarter_vectors(60, 5, seed=2)
    exact, _ = oracle(embeddings, 4)
    cosine = cosine64(embeddings)
    np.fill_diagonal(cosine, -np.inf)
    # Swap the last neighbour for the highest-index row with the same score: still an exact top-4.
    swapped = exact.copy()
    for i in range(60):
        tied = np.flatnonzero(cosine[i] == cosine[i, exact[i, 3]])
        swapped[i, 3] = tied[-1] if tied[-1] not in exact[i] else exact[i, 3]
    assert (swapped != exact).any()
    assert approximate_recall(embeddings, swapped, sample=None) == 1.0


def test_recall_bad_shapes():
    with pytest.raises(ValueError, match="indices must be an integer array"):
        approximate_recall(np.eye(4), np.zeros((3, 1), dtype=np.int64))
    with pytest.raises(ValueError, match="indices must be an integer array"):
        approximate_recall(np.eye(4), np.zeros((4, 1)))


def check_lists(embeddings: np.ndarray, indices: np.ndarray, scores: np.ndarray, k: int) -> float:
    """Contract checks shared by the approximate tests; returns the oracle recall over all rows."""
    num_rows = len(embeddings)
    assert indices.shape == scores.shape == (num_rows, k)
    assert indices.dtype == np.int64 and scores.dtype == np.float32
    assert ((indices >= 0) & (indices < num_rows)).all()
    assert not (indices == np.arange(num_rows)[:, None]).any()
    assert (np.diff(np.sort(indices, axis=1), axis=1) > 0).all()
    cosine = cosine64(embeddings)
    np.testing.assert_allclose(np.take_along_axis(cosine, indices, axis=1), scores, atol=1e-5)
    assert (np.diff(scores, axis=1) <= 0).all()
    np.fill_diagonal(cosine, -np.inf)
    kth = -np.partition(-cosine, k - 1, axis=1)[:, k - 1]
    return float((np.take_along_axis(cosine, indices, axis=1) >= kth[:, None] - 1e-6).mean())


def test_approximate_recall_on_random_data():
    rng = np.random.default_rng(0)
    embeddings = rng.standard_normal((4000, 16)).astype(np.float32)
    k = 30
    indices, scores = approximate_nearest_neighbors(embeddings, k, exact_fallback=False, recall_sample=500)
    recall = check_lists(embeddings, indices, scores, k)
    assert recall >= 0.95
    assert approximate_recall(embeddings, indices, sample=None) == pytest.approx(recall, abs=1e-9)


def test_approximate_with_duplicates_excludes_self_by_index():
    embeddings = quarter_vectors(3000, 300, seed=4)
    k = 20
    indices, scores = approximate_nearest_neighbors(embeddings, k, exact_fallback=False, ef_search=256)
    assert check_lists(embeddings, indices, scores, k) >= 0.95
    # Every duplicate of a row (score 1) comes before anything else, whatever faiss returned first.
    copies = (cosine64(embeddings) > 1 - 1e-9).sum(axis=1) - 1
    leading = np.take_along_axis(scores, np.minimum(copies, k)[:, None] - 1, axis=1)[:, 0]
    np.testing.assert_allclose(leading[copies > 0], 1.0, atol=1e-6)


def test_nearest_neighbors_uses_the_index_above_the_threshold(caplog):
    rng = np.random.default_rng(1)
    embeddings = rng.standard_normal((2500, 12))
    with caplog.at_level(logging.INFO, logger="kitm.relevance.neighbors"), warnings.catch_warnings():
        # Whether HNSW or exact search is cheaper at this size depends on the machine's load.
        warnings.simplefilter("ignore", UserWarning)
        indices, scores = nearest_neighbors(embeddings, 10, exact_threshold=1000, recall_sample=300)
    assert "HNSW index over 2500 rows" in caplog.text
    assert check_lists(embeddings, indices, scores, 10) >= 0.95


def test_approximate_falls_back_to_exact_when_the_target_is_out_of_reach():
    # A 2-link graph searched with the narrowest beam cannot find all 40 neighbours of 64-d noise.
    embeddings = np.random.default_rng(6).standard_normal((600, 64))
    with pytest.warns(UserWarning, match="searching all 600 rows exactly"):
        indices, scores = approximate_nearest_neighbors(embeddings, 40, target_recall=1.0, max_ef_search=41,
                                                        hnsw_m=2, ef_construction=4)
    expected_indices, expected_scores = oracle(embeddings, 40)
    np.testing.assert_allclose(scores, expected_scores, atol=2e-6)
    assert (indices == expected_indices).mean() > 0.99


def test_approximate_argument_errors(monkeypatch):
    embeddings = np.random.default_rng(0).standard_normal((50, 4))
    with pytest.raises(ValueError, match="ef_search must exceed k=10"):
        approximate_nearest_neighbors(embeddings, 10, ef_search=10)
    with pytest.raises(ValueError, match="target_recall"):
        approximate_nearest_neighbors(embeddings, 10, target_recall=0.0)
    monkeypatch.setitem(sys.modules, "faiss", None)
    with pytest.raises(ImportError, match="pip install faiss-cpu"):
        approximate_nearest_neighbors(embeddings, 10)


def test_tuning_widens_the_search_until_the_target_recall(caplog):
    # A sparse graph (4 links per node) misses neighbours at the first efSearch; doubling fixes it.
    embeddings = np.random.default_rng(2).standard_normal((2000, 24)).astype(np.float32)
    with caplog.at_level(logging.INFO, logger="kitm.relevance.neighbors"):
        indices, scores = approximate_nearest_neighbors(embeddings, 20, exact_fallback=False, recall_sample=400,
                                                        hnsw_m=4, ef_construction=16)
    tried = [record.getMessage() for record in caplog.records if record.getMessage().startswith("efSearch=")]
    assert len(tried) >= 2, tried
    assert check_lists(embeddings, indices, scores, 20) >= 0.95

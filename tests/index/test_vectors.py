"""The faiss index under kitm.index: exact search up to the threshold, HNSW with its measured recall above."""

import numpy as np
import pytest

from kitm.index.vectors import build_vector_index, exact_index, recall_at_k


def _clustered(n, dim=32, clusters=40, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(clusters, dim))
    points = centres[rng.integers(0, clusters, n)] + 0.3 * rng.normal(size=(n, dim))
    return (points / np.linalg.norm(points, axis=1, keepdims=True)).astype(np.float32)


def test_exact_up_to_the_threshold_and_hnsw_with_its_recall_above():
    rows, queries = _clustered(3000), _clustered(400, seed=1)
    exact = build_vector_index(rows, queries, exact_threshold=3000)
    assert exact.kind == "exact" and exact.recall == 1.0 and exact.index.ntotal == 3000

    approximate = build_vector_index(rows, queries, exact_threshold=2999, target_recall=0.95)
    assert approximate.kind == "hnsw" and approximate.index.ntotal == 3000
    assert approximate.recall >= 0.9 and approximate.ef_search >= 20 and approximate.recall_queries == 400
    # The stated recall is what a search gives: measured here again against exact search on fresh queries.
    fresh = _clustered(200, seed=2)
    truth, _ = exact_index(rows).search(fresh, 10)
    found_scores, found = approximate.index.search(fresh, 10)
    assert recall_at_k(found, truth, found_scores) >= 0.9
    assert approximate.describe()["kind"] == "hnsw"


def test_bad_embeddings_are_refused_with_their_shape():
    with pytest.raises(ValueError, match=r"\[N, D\]; got shape \(3,\)"):
        build_vector_index(np.ones(3, np.float32))
    with pytest.raises(ValueError, match="NaN"):
        build_vector_index(np.full((2, 2), np.nan, np.float32))

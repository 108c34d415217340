"""mAP@R and R-Precision: hand-computed cases, an oracle written from the definition, edge cases."""

import numpy as np
import pytest

from kitm.eval import map_at_r, r_precision
from kitm.eval.map_at_r import map_at_r_from_ranks, map_at_r_per_query
from kitm.eval.retrieval import ground_truth_ranks


def _oracle(scores, relevant):
    """Per query, from the definition: rank by descending score, ties by ascending index (a Python loop)."""
    maps, precisions = [], []
    for row, rel in zip(np.asarray(scores, float), np.asarray(relevant, bool)):
        r = int(rel.sum())
        if r == 0:
            maps.append(np.nan)
            precisions.append(np.nan)
            continue
        ranking = sorted(range(len(row)), key=lambda j: (-row[j], j))
        hits, total = 0, 0.0
        for i, j in enumerate(ranking[:r], start=1):
            if rel[j]:
                hits += 1
                total += hits / i
        maps.append(100.0 * total / r)
        precisions.append(100.0 * hits / r)
    return np.array(maps), np.array(precisions)


def test_hand_computed():
    # Ranking: c0 (rel), c1, c2 (rel), c3 (rel), c4. R = 3.
    scores = [[0.9, 0.8, 0.7, 0.6, 0.1]]
    relevant = [[True, False, True, True, False]]
    # Ranks 1..3: rel, not, rel -> P@1 = 1, P@3 = 2/3; mAP@R = (1 + 2/3) / 3; RP = 2/3.
    assert map_at_r(scores, relevant) == pytest.approx(100 * (1 + 2 / 3) / 3)
    assert r_precision(scores, relevant) == pytest.approx(100 * 2 / 3)


def test_two_queries_mean_and_all_relevant():
    scores = np.array([[0.1, 0.5, 0.3], [-1.0, -2.0, -3.0]])  # negative scores rank the same way
    relevant = np.array([[True, False, False], [True, True, True]])
    # Query 0: R = 1, best is c1 (irrelevant): 0. Query 1: everything relevant: 100.
    assert map_at_r(scores, relevant) == pytest.approx(50.0)
    assert r_precision(scores, relevant) == pytest.approx(50.0)


def test_query_without_relevant_items_is_left_out():
    scores = np.array([[0.9, 0.1], [0.9, 0.1]])
    relevant = np.array([[True, False], [False, False]])
    maps, precisions = map_at_r_per_query(scores, relevant)
    assert maps[0] == 100.0 and np.isnan(maps[1]) and np.isnan(precisions[1])
    assert map_at_r(scores, relevant) == 100.0  # not 50: the second query is excluded
    with pytest.raises(ValueError, match="no query has a relevant item"):
        map_at_r(scores, np.zeros_like(relevant))


def test_ties_are_broken_by_ascending_index():
    # All tied: the ranking is c0, c1, c2, c3. Relevant c1, c3 (R = 2): rank 2 only -> (1/2)(1/2).
    scores = np.zeros((1, 4))
    assert map_at_r(scores, [[False, True, False, True]]) == pytest.approx(25.0)
    assert r_precision(scores, [[False, True, False, True]]) == pytest.approx(50.0)
    # Relevant first among ties: perfect.
    assert map_at_r(scores, [[True, True, False, False]]) == 100.0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_against_the_definition(seed):
    rng = np.random.default_rng(seed)
    scores = np.round(rng.normal(size=(37, 23)), 1)  # rounding makes ties
    relevant = rng.random((37, 23)) < rng.random((37, 1)) * 0.6
    relevant[3] = False
    relevant[5] = True
    expected_map, expected_rp = _oracle(scores, relevant)
    maps, precisions = map_at_r_per_query(scores, relevant, chunk_size=4)  # several chunks
    np.testing.assert_allclose(maps, expected_map, rtol=0, atol=1e-12)
    np.testing.assert_allclose(precisions, expected_rp, rtol=0, atol=1e-12)
    assert map_at_r(scores, relevant) == pytest.approx(np.nanmean(expected_map), abs=1e-12)
    assert r_precision(scores, relevant) == pytest.approx(np.nanmean(expected_rp), abs=1e-12)


def test_agrees_with_eccv_caption_scorer():
    pytest.importorskip("eccv_caption")
    from eccv_caption._metrics import compute_eccv_metrics

    rng = np.random.default_rng(7)
    scores = rng.normal(size=(40, 60))
    relevant = rng.random((40, 60)) < 0.1
    relevant[np.arange(40), rng.integers(0, 60, 40)] = True  # every query has a positive, as in ECCV Caption
    ranked = {q: list(np.argsort(-scores[q], kind="stable")) for q in range(40)}
    positives = {q: list(np.flatnonzero(relevant[q])) for q in range(40)}
    theirs = compute_eccv_metrics(ranked, positives)
    assert map_at_r(scores, relevant) == pytest.approx(100 * theirs["eccv_map_at_r"], abs=1e-10)
    assert r_precision(scores, relevant) == pytest.approx(100 * theirs["eccv_rprecision"], abs=1e-10)


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="`relevant` must be a bool"):
        map_at_r(np.zeros((2, 3)), np.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"`relevant` has shape \(3, 2\); expected \(2, 3\)"):
        r_precision(np.zeros((2, 3)), np.zeros((3, 2), bool))
    with pytest.raises(ValueError, match="`scores` must be finite"):
        map_at_r([[np.nan, 1.0]], [[True, False]])


def test_from_ground_truth_ranks_equals_ranking_again():
    rng = np.random.default_rng(4)
    sims = np.round(rng.normal(size=(12, 36)), 1)  # 3 captions per image, ties included
    truth = np.zeros((12, 36), bool)
    truth[np.repeat(np.arange(12), 3), np.arange(36)] = True
    for direction, scores, relevant in (("i2t", sims, truth), ("t2i", sims.T, truth.T)):
        ranks = ground_truth_ranks(sims, captions_per_image=3, direction=direction).ranks
        expected = _oracle(scores, relevant)
        for got, want in zip(map_at_r_from_ranks(ranks), expected):
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    # By hand: positives at 0-based ranks 2 and 0 (R = 2): rank 1 hit (1/1), rank 3 beyond R -> 50; RP 50.
    maps, precisions = map_at_r_from_ranks(np.array([[2, 0]]))
    assert maps[0] == 50.0 and precisions[0] == 50.0

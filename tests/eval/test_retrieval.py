"""R@K, R^V@K, medr, meanr and mAP against per-query oracles written from docs/methods.md / VSE++."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import average_precision_score

import kitm.eval as keval
from kitm.eval.ranking import top_k_indices, top_k_values


def ranking(row: np.ndarray) -> np.ndarray:
    """Descending score, ties by ascending index."""
    return np.argsort(-row, kind="stable")


def oracle_direction(sims: np.ndarray, cpi: int, direction: str, ks) -> dict:
    """Per-query loop: R (Eq. 1), R^V (Eq. 2), VSE++ medr/meanr, sklearn AP."""
    if direction == "i2t":
        rows = [(sims[i], list(range(i * cpi, i * cpi + cpi))) for i in range(sims.shape[0])]
    else:
        rows = [(sims[:, c], [c // cpi]) for c in range(sims.shape[1])]
    recall = {k: [] for k in ks}
    recall_vse = {k: [] for k in ks}
    best_ranks, aps = [], []
    for scores, truth in rows:
        order = list(ranking(scores))
        positions = [order.index(g) for g in truth]
        for k in ks:
            recall[k].append(sum(p < k for p in positions) / len(truth))
            recall_vse[k].append(float(min(positions) < k))
        best_ranks.append(min(positions))
        labels = np.zeros(scores.size, dtype=int)
        labels[truth] = 1
        aps.append(average_precision_score(labels, scores))
    best_ranks = np.array(best_ranks)
    return {
        "recall": {k: 100 * np.mean(v) for k, v in recall.items()},
        "recall_vse": {k: 100 * np.mean(v) for k, v in recall_vse.items()},
        "medr": np.floor(np.median(best_ranks)) + 1,
        "meanr": best_ranks.mean() + 1,
        "map": 100 * np.mean(aps),
    }


def assert_block_close(ours: dict, expected: dict, tol: float = 1e-9) -> None:
    for key, value in expected.items():
        if isinstance(value, dict):
            assert set(ours[key]) == set(value), key
            for k in value:
                assert ours[key][k] == pytest.approx(value[k], abs=tol), (key, k)
        else:
            assert ours[key] == pytest.approx(value, abs=tol), key


def test_hand_computed_three_images():
    # One caption per image. i2t: image 2's row [.3, .6, .4] ranks its caption 2nd -> ranks
    # (0, 0, 1): R@1 = 2/3, medr = floor(median)+1 = 1, meanr = 1/3 + 1.
    # t2i: caption 2's column [.5, .7, .4] ranks image 2 3rd -> ranks (0, 0, 2): meanr = 5/3.
    sims = np.array([[0.9, 0.1, 0.5], [0.2, 0.8, 0.7], [0.3, 0.6, 0.4]])
    out = keval.evaluate(sims, captions_per_image=1, ks=(1, 2))
    assert out["i2t"]["recall"] == pytest.approx({1: 200 / 3, 2: 100.0})
    assert out["i2t"]["recall_vse"] == pytest.approx({1: 200 / 3, 2: 100.0})
    assert out["i2t"]["medr"] == 1.0
    assert out["i2t"]["meanr"] == pytest.approx(4 / 3)
    assert out["t2i"]["recall"] == pytest.approx({1: 200 / 3, 2: 200 / 3})
    assert out["t2i"]["meanr"] == pytest.approx(5 / 3)
    # AP i2t: 1, 1, 1/2 -> 5/6; t2i: 1, 1, 1/3 -> 7/9.
    assert out["i2t"]["map"] == pytest.approx(100 * 5 / 6)
    assert out["t2i"]["map"] == pytest.approx(100 * 7 / 9)


def test_hand_computed_two_captions_per_image():
    # Image 0 row [.9, .1, .5, .3]: its captions 0, 1 sit at ranks 1 and 4 (1-based):
    # R@1 = 1/2, R@2 = 1/2, R^V@1 = 1, AP = (1/1 + 2/4) / 2 = 0.75.
    # Image 1 row [.2, .4, .8, .1]: captions 2, 3 at ranks 1 and 4: the same figures.
    sims = np.array([[0.9, 0.1, 0.5, 0.3], [0.2, 0.4, 0.8, 0.1]])
    out = keval.evaluate(sims, captions_per_image=2, ks=(1, 2))
    assert out["i2t"]["recall"] == pytest.approx({1: 50.0, 2: 50.0})
    assert out["i2t"]["recall_vse"] == pytest.approx({1: 100.0, 2: 100.0})
    assert out["i2t"]["map"] == pytest.approx(75.0)
    assert keval.recall_at_k(sims, (3, 4), captions_per_image=2) == pytest.approx({3: 50.0, 4: 100.0})
    assert keval.mean_average_precision(sims, captions_per_image=2) == pytest.approx(75.0)


@pytest.mark.parametrize("cpi", [1, 2, 5])
@pytest.mark.parametrize("levels", [None, 4])
def test_random_against_oracle(cpi, levels):
    rng = np.random.default_rng(10 * cpi + (levels or 0))
    num_images = 23
    sims = rng.standard_normal((num_images, num_images * cpi))
    if levels:  # heavy ties
        sims = rng.integers(0, levels, size=sims.shape).astype(np.float32)
    ks = (1, 3, 10)
    out = keval.evaluate(sims, captions_per_image=cpi, ks=ks, chunk_size=4)
    for direction in ("i2t", "t2i"):
        assert_block_close(out[direction], oracle_direction(np.asarray(sims, float), cpi, direction, ks))


def test_chunking_does_not_change_results():
    rng = np.random.default_rng(3)
    sims = rng.integers(0, 5, size=(17, 85)).astype(np.float64)
    reference = keval.evaluate(sims, ks=(1, 5))
    for chunk in (1, 2, 16, 1000):
        assert keval.evaluate(sims, ks=(1, 5), chunk_size=chunk) == reference


def test_standalone_functions_match_evaluate():
    rng = np.random.default_rng(4)
    sims = rng.standard_normal((12, 36))
    full = keval.evaluate(sims, captions_per_image=3, ks=(1, 5))
    for direction in ("i2t", "t2i"):
        assert keval.recall_at_k(sims, (1, 5), captions_per_image=3, direction=direction) == full[direction]["recall"]
        assert keval.recall_vse_at_k(sims, (1, 5), captions_per_image=3, direction=direction) == full[direction]["recall_vse"]
        assert keval.mean_average_precision(sims, captions_per_image=3, direction=direction) == pytest.approx(full[direction]["map"], abs=1e-12)
    ranks = keval.ground_truth_ranks(sims, captions_per_image=3, direction="i2t")
    assert ranks.ranks.shape == (12, 3) and ranks.average_precision.shape == (12,)


def test_all_tied_scores_rank_by_index():
    # Constant scores: ranks follow candidate index, so image i's captions sit at i*cpi...
    sims = np.zeros((3, 6))
    ranks = keval.ground_truth_ranks(sims, captions_per_image=2).ranks
    np.testing.assert_array_equal(ranks, [[0, 1], [2, 3], [4, 5]])
    # ...and AP treats the tie as one threshold (sklearn): 2 positives among 6 -> 1/3.
    assert keval.mean_average_precision(sims, captions_per_image=2) == pytest.approx(100 / 3)


def test_negative_similarities():
    sims = -np.array([[0.1, 0.9, 0.5], [0.3, 0.2, 0.8], [0.7, 0.6, 0.4]])
    out = keval.evaluate(sims, captions_per_image=1, ks=(1,))
    # i2t best: image 0 -> caption 0, image 1 -> caption 1, image 2 -> caption 2: all correct.
    assert out["i2t"]["recall"][1] == pytest.approx(100.0)
    assert_block_close(out["t2i"], oracle_direction(sims, 1, "t2i", (1,)))


@pytest.mark.parametrize("k", [1, 3, 7, 12, 40])
def test_top_k_matches_stable_sort(k):
    rng = np.random.default_rng(k)
    scores = rng.integers(0, 6, size=(30, 40)).astype(np.float64)
    scores[rng.random(scores.shape) < 0.1] = -np.inf
    expected = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    np.testing.assert_array_equal(top_k_indices(scores, k), expected)
    np.testing.assert_array_equal(top_k_values(scores, k), -np.sort(-scores, axis=1)[:, :k])

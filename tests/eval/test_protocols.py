"""COCO 1K (five-fold mean) and 5K protocols."""

from __future__ import annotations

import numpy as np
import pytest

import kitm.eval as keval


def make(num_images=20, cpi=5, seed=0):
    rng = np.random.default_rng(seed)
    sims = rng.standard_normal((num_images, num_images * cpi))
    relevance = rng.random((num_images * cpi, num_images))
    return sims, relevance


def test_folds_are_diagonal_blocks_and_mean_averages_every_figure():
    sims, relevance = make()
    out = keval.evaluate_folds(sims, folds=5, relevance=relevance, ks=(1, 3))
    assert len(out["folds"]) == 5
    manual = [
        keval.evaluate(
            sims[f * 4 : (f + 1) * 4, f * 20 : (f + 1) * 20],
            relevance=relevance[f * 20 : (f + 1) * 20, f * 4 : (f + 1) * 4],
            ks=(1, 3),
        )
        for f in range(5)
    ]
    assert out["folds"] == manual
    for direction in ("i2t", "t2i"):
        for key in ("medr", "meanr", "map"):
            assert out["mean"][direction][key] == pytest.approx(np.mean([m[direction][key] for m in manual]))
        for key in ("recall", "recall_vse", "ncs", "semantic_recall"):
            for k in (1, 3):
                expected = np.mean([m[direction][key][k] for m in manual])
                assert out["mean"][direction][key][k] == pytest.approx(expected)


def test_relevance_folds_are_used_as_given():
    sims, relevance = make()
    blocks = [relevance[f * 20 : (f + 1) * 20, f * 4 : (f + 1) * 4] for f in range(5)]
    a = keval.evaluate_folds(sims, relevance=relevance, ks=(1,))
    b = keval.evaluate_folds(sims, relevance_folds=blocks, ks=(1,))
    assert a == b
    with pytest.raises(ValueError, match="one per fold"):
        keval.evaluate_folds(sims, relevance_folds=blocks[:2], ks=(1,))
    with pytest.raises(ValueError, match="not both"):
        keval.evaluate_folds(sims, relevance=relevance, relevance_folds=blocks, ks=(1,))


def test_coco_protocols():
    sims, relevance = make()
    out = keval.evaluate_coco_protocols(sims, relevance=relevance, fold_size=4, ks=(1, 2), include_gt=True)
    assert out["5k"] == keval.evaluate(sims, relevance=relevance, ks=(1, 2), include_gt=True)
    assert out["1k"] == keval.evaluate_folds(sims, relevance=relevance, ks=(1, 2), include_gt=True)["mean"]
    with pytest.raises(ValueError, match="5 folds of fold_size=5"):
        keval.evaluate_coco_protocols(sims, fold_size=5)


def test_uneven_folds_rejected():
    sims, _ = make(num_images=12)
    with pytest.raises(ValueError, match="12 images cannot be split into 5"):
        keval.evaluate_folds(sims, folds=5, ks=(1,))

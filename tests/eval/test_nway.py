"""N-way R@1 (Thomas & Kovashka, Section 4.2) and its without-replacement sampler."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import kitm.eval as keval
from kitm.eval.nway import sample_without_replacement


@pytest.mark.parametrize("k", [2, 5])  # Floyd's sampler (k=2) and the random-key sampler (k=5)
def test_sampler_is_uniform_over_subsets(k):
    population, size = 6, 30000
    draws = sample_without_replacement(np.random.default_rng(0), population, k, size)
    assert draws.min() >= 0 and draws.max() < population
    assert all(len(set(row)) == k for row in draws[:2000].tolist())
    counts = {}
    for row in np.sort(draws, axis=1).tolist():
        counts[tuple(row)] = counts.get(tuple(row), 0) + 1
    subsets = list(itertools.combinations(range(population), k))
    assert set(counts) == set(subsets)
    expected = size / len(subsets)
    chi2 = sum((counts[s] - expected) ** 2 / expected for s in subsets)
    # df = 14 or 5; these bounds sit beyond the 99.9th percentile.
    assert chi2 < (36.1 if len(subsets) == 15 else 20.5)


def oracle_n_way(sims, cpi, other_captions, other_images):
    """Loop over queries (one per caption): does the partner beat every distractor strictly?"""
    i2t, t2i = [], []
    for c in range(sims.shape[1]):
        i = c // cpi
        assert all(j // cpi != i for j in other_captions[c])
        assert i not in set(other_images[c])
        i2t.append(all(sims[i, j] < sims[i, c] for j in other_captions[c]))
        t2i.append(all(sims[j, c] < sims[i, c] for j in other_images[c]))
    return 100 * np.mean(i2t), 100 * np.mean(t2i)


@pytest.mark.parametrize("cpi", [1, 3])
def test_matches_oracle_on_the_same_draws(cpi):
    rng = np.random.default_rng(cpi)
    num_images, n = 15, 6
    sims = rng.integers(0, 4, size=(num_images, num_images * cpi)).astype(float)
    result = keval.n_way_recall(sims, n=n, captions_per_image=cpi, seed=5)
    # Replay the draws in the documented order: captions first, then images.
    draw = np.random.default_rng(5)
    num_captions = num_images * cpi
    owners = np.arange(num_captions) // cpi
    raw = sample_without_replacement(draw, num_captions - cpi, n - 1, num_captions)
    other_captions = raw + cpi * (raw >= (owners * cpi)[:, None])
    raw = sample_without_replacement(draw, num_images - 1, n - 1, num_captions)
    other_images = raw + (raw >= owners[:, None])
    i2t, t2i = oracle_n_way(sims, cpi, other_captions, other_images)
    assert result == pytest.approx({"i2t": i2t, "t2i": t2i}, abs=1e-12)


def test_own_captions_are_never_distractors():
    # Each image's other own captions score above its partner; they must not compete, so a
    # model that scores every foreign pair 0 still wins every i2t query.
    cpi, num_images = 2, 10
    sims = np.zeros((num_images, num_images * cpi))
    for i in range(num_images):
        sims[i, i * cpi : i * cpi + cpi] = 1.0
    out = keval.n_way_recall(sims, n=10, captions_per_image=cpi, seed=1)
    assert out == {"i2t": 100.0, "t2i": 100.0}


def test_embeddings_equal_sims_and_seed_is_deterministic():
    rng = np.random.default_rng(2)
    images, texts = rng.standard_normal((20, 8)), rng.standard_normal((40, 8))
    from_sims = keval.n_way_recall(images @ texts.T, n=5, captions_per_image=2, seed=3, repeats=3)
    from_embeddings = keval.n_way_recall(
        None, 5, image_embeddings=images, text_embeddings=texts, captions_per_image=2, seed=3, repeats=3
    )
    assert from_sims == pytest.approx(from_embeddings)
    assert from_sims == keval.n_way_recall(images @ texts.T, n=5, captions_per_image=2, seed=3, repeats=3)


def test_chance_level_on_random_scores():
    rng = np.random.default_rng(4)
    sims = rng.standard_normal((400, 400))
    out = keval.n_way_recall(sims, n=5, seed=0, repeats=5)
    assert out["i2t"] == pytest.approx(20.0, abs=2.5)
    assert out["t2i"] == pytest.approx(20.0, abs=2.5)


def test_bad_input():
    sims = np.zeros((4, 4))
    with pytest.raises(ValueError, match="needs 4 distractors"):
        keval.n_way_recall(sims, n=5)
    with pytest.raises(ValueError, match="not both"):
        keval.n_way_recall(sims, n=2, image_embeddings=sims, text_embeddings=sims)
    with pytest.raises(ValueError, match="give `sims`"):
        keval.n_way_recall(None, 2, image_embeddings=sims)
    with pytest.raises(ValueError, match="positive integer"):
        keval.n_way_recall(sims, 0)

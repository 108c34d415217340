"""NCS@K and SR@K against per-query oracles written from docs/methods.md "Metrics" (Biten et al.
Eqs. 4-5 as the ncs_metric reference computes them)."""

from __future__ import annotations

import numpy as np
import pytest

import kitm.eval as keval


def ranking(row: np.ndarray) -> list[int]:
    return list(np.argsort(-row, kind="stable"))


def queries(sims, relevance, cpi, direction):
    """(model scores, N values, own ground truth, own image) for every query."""
    if direction == "i2t":
        for i in range(sims.shape[0]):
            yield sims[i], relevance[:, i], set(range(i * cpi, i * cpi + cpi)), i
    else:
        for c in range(sims.shape[1]):
            yield sims[:, c], relevance[c, :], {c // cpi}, c // cpi


def oracle_ncs(sims, relevance, cpi, ks, include_gt, direction):
    """NCS_q@K = mean(N of the model's top K) / (mean(N of the top K by N) + 1e-10)."""
    ratios = {k: [] for k in ks}
    for scores, values, truth, _ in queries(sims, relevance, cpi, direction):
        keep = lambda j: include_gt or j not in truth  # noqa: E731
        retrieved = [j for j in ranking(scores) if keep(j)]
        ideal = sorted((values[j] for j in range(values.size) if keep(j)), reverse=True)
        for k in ks:
            got = np.mean([values[j] for j in retrieved[:k]])
            ratios[k].append(got / (np.mean(ideal[:k]) + 1e-10))
    return {k: 100 * np.mean(v) for k, v in ratios.items()}


def oracle_relevant_images(relevance, cpi, m, depth, include_gt):
    """Per image: sum N over its captions' top-`depth` lists, rank, drop self, keep m."""
    num_images = relevance.shape[1]
    out = []
    for i in range(num_images):
        total: dict[int, float] = {}
        for c in range(i * cpi, i * cpi + cpi):
            for j in ranking(relevance[c])[:depth]:
                total[j] = total.get(j, 0.0) + relevance[c, j]
        ordered = sorted(total, key=lambda j: (-total[j], j))
        if not include_gt:
            ordered = [j for j in ordered if j != i]
        out.append(ordered[:m])
    return out


def oracle_sr(sims, relevance, cpi, ks, include_gt, direction, m, depth):
    """SR_q@K = |relevant ∩ top K| / |relevant| (nominal size m*cpi for i2t, m for t2i)."""
    relevant_images = oracle_relevant_images(relevance, cpi, m, depth, include_gt)
    shares = {k: [] for k in ks}
    for scores, _, truth, image in queries(sims, relevance, cpi, direction):
        retrieved = [j for j in ranking(scores) if include_gt or j not in truth]
        if direction == "i2t":
            wanted = {c for j in relevant_images[image] for c in range(j * cpi, j * cpi + cpi)}
            size = m * cpi
        else:
            wanted = set(relevant_images[image])
            size = m
        for k in ks:
            shares[k].append(len(wanted & set(retrieved[:k])) / size)
    return {k: 100 * np.mean(v) for k, v in shares.items()}


# Three images, one caption each. Rows of N are captions, columns images.
SIMS = np.array([[0.9, 0.1, 0.5], [0.2, 0.8, 0.7], [0.3, 0.6, 0.4]])
N = np.array([[1.0, 0.2, 0.6], [0.1, 1.0, 0.3], [0.5, 0.4, 1.0]])


def test_hand_computed_ncs():
    # i2t, own caption removed, K=1. Image 0 ranks captions (2, 1): N[2,0] = .5, ideal
    # max(N[1,0], N[2,0]) = .5 -> 1. Image 1 ranks (2, 0): N[2,1] = .4 = ideal -> 1. Image 2
    # ranks (1, 0): N[1,2] = .3, ideal .6 -> .5. NCS@1 = 100 * 2.5 / 3. At K=2 every list is
    # complete -> 100.
    # t2i, K=1: caption 0 ranks images (2, 1): N[0,2] = .6 = ideal -> 1; caption 1 ranks (2, 0):
    # .3 = ideal -> 1; caption 2 ranks (1, 0): N[2,1] = .4, ideal .5 -> .8. NCS@1 = 100 * 2.8 / 3.
    out = keval.evaluate(SIMS, captions_per_image=1, relevance=N, ks=(1, 2))
    assert out["i2t"]["ncs"] == pytest.approx({1: 250 / 3, 2: 100.0}, rel=1e-8)
    assert out["t2i"]["ncs"] == pytest.approx({1: 280 / 3, 2: 100.0}, rel=1e-8)


def test_hand_computed_semantic_recall():
    # depth = max(ks) = 2. Image 0's caption row N[0] = (1, .2, .6): top 2 = images 0, 2; drop
    # itself -> {2}. Image 1: (.1, 1, .3) -> {2}. Image 2: (.5, .4, 1) -> {0}.
    # i2t K=1: image 0's first caption (gt removed) is caption 2 -> image 2: hit; image 1 ->
    # caption 2: hit; image 2 -> caption 1, wanted image 0: miss. SR@1 = 200/3.
    # t2i K=1: caption 0 -> image 2 (hit), caption 1 -> image 2 (hit), caption 2 -> image 1 (miss).
    out = keval.evaluate(SIMS, captions_per_image=1, relevance=N, ks=(1, 2))
    assert out["i2t"]["semantic_recall"] == pytest.approx({1: 200 / 3, 2: 100.0})
    assert out["t2i"]["semantic_recall"] == pytest.approx({1: 200 / 3, 2: 100.0})
    np.testing.assert_array_equal(
        keval.semantic_relevant_images(N, captions_per_image=1, threshold=1, depth=2), [[2], [2], [0]]
    )


def test_include_gt_keeps_the_ground_truth():
    # With include_gt the perfect model (own caption first) scores NCS@1 = N[i,i]/max = 1 and
    # each image's most relevant image is itself.
    out = keval.evaluate(np.eye(3), captions_per_image=1, relevance=N, ks=(1,), include_gt=True)
    assert out["i2t"]["ncs"][1] == pytest.approx(100.0)
    assert out["i2t"]["semantic_recall"][1] == pytest.approx(100.0)


@pytest.mark.parametrize("include_gt", [False, True])
@pytest.mark.parametrize("cpi", [1, 3, 5])
@pytest.mark.parametrize("m", [1, 2])
def test_random_against_oracle(include_gt, cpi, m):
    rng = np.random.default_rng(100 * cpi + 10 * m + include_gt)
    num_images = 14
    sims = rng.standard_normal((num_images, num_images * cpi))
    relevance = rng.random((num_images * cpi, num_images)) ** 2
    ks = (1, 4, 9)
    out = keval.evaluate(
        sims, captions_per_image=cpi, relevance=relevance, ks=ks, include_gt=include_gt,
        semantic_threshold=m, chunk_size=5,
    )
    for direction in ("i2t", "t2i"):
        expected_ncs = oracle_ncs(sims, relevance, cpi, ks, include_gt, direction)
        expected_sr = oracle_sr(sims, relevance, cpi, ks, include_gt, direction, m, max(ks))
        for k in ks:
            assert out[direction]["ncs"][k] == pytest.approx(expected_ncs[k], rel=1e-9, abs=1e-9)
            assert out[direction]["semantic_recall"][k] == pytest.approx(expected_sr[k], rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("include_gt", [False, True])
def test_ties_and_negative_values_against_oracle(include_gt):
    # Quantised scores and relevance (CIDEr has many exact zeros), some relevance negative.
    rng = np.random.default_rng(7 + include_gt)
    cpi, num_images = 2, 11
    sims = rng.integers(-2, 3, size=(num_images, num_images * cpi)).astype(np.float64)
    relevance = rng.integers(-1, 4, size=(num_images * cpi, num_images)) / 4.0
    ks = (1, 3, 6)
    for depth in (1, 3, 6):
        for m in (1, 3):
            out_sr = {
                d: keval.semantic_recall(
                    sims, relevance, ks, captions_per_image=cpi, threshold=m, depth=depth,
                    include_gt=include_gt, direction=d,
                )
                for d in ("i2t", "t2i")
            }
            for d in ("i2t", "t2i"):
                expected = oracle_sr(sims, relevance, cpi, ks, include_gt, d, m, depth)
                assert out_sr[d] == pytest.approx(expected, abs=1e-9)
    for d in ("i2t", "t2i"):
        ours = keval.ncs_score(sims, relevance, ks, captions_per_image=cpi, include_gt=include_gt, direction=d)
        assert ours == pytest.approx(oracle_ncs(sims, relevance, cpi, ks, include_gt, d), rel=1e-9, abs=1e-9)


def test_short_relevant_list_counts_against_nominal_size():
    # depth=1 and one caption per image: each caption's top-1 image is its own, so with the
    # ground truth removed no image qualifies (-1) and SR is 0, as in the reference.
    relevant = keval.semantic_relevant_images(N, captions_per_image=1, threshold=1, depth=1)
    np.testing.assert_array_equal(relevant, [[-1], [-1], [-1]])
    assert keval.semantic_recall(SIMS, N, (1,), captions_per_image=1, depth=1) == {1: 0.0}


def test_all_zero_relevance_gives_zero_ncs():
    out = keval.ncs_score(SIMS, np.zeros((3, 3)), (1, 2), captions_per_image=1)
    assert out == {1: 0.0, 2: 0.0}


def test_float32_inputs_and_chunking():
    rng = np.random.default_rng(11)
    sims = rng.standard_normal((9, 27)).astype(np.float32)
    relevance = rng.random((27, 9)).astype(np.float32)
    a = keval.evaluate(sims, captions_per_image=3, relevance=relevance, ks=(1, 5))
    b = keval.evaluate(sims, captions_per_image=3, relevance=relevance, ks=(1, 5), chunk_size=1)
    assert a == b
    expected = oracle_ncs(sims.astype(np.float64), relevance.astype(np.float64), 3, (1, 5), False, "t2i")
    assert a["t2i"]["ncs"] == pytest.approx(expected, rel=1e-9)

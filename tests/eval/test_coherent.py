"""Kendall tau-b and CS@K against scipy.stats.kendalltau (variant "b"), ties included."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import kendalltau

import kitm.eval as keval
from kitm.eval.kendall import count_inversions, dense_ranks


def scipy_rows(x, y):
    return np.array([kendalltau(a, b, variant="b").statistic for a, b in zip(x, y)])


def oracle_cs(scores, relevance, k):
    """Per query: the model's top K (descending score, ties by index), scipy tau-b."""
    taus = []
    for s, r in zip(scores, relevance):
        top = np.argsort(-s, kind="stable")[:k]
        taus.append(kendalltau(s[top], r[top], variant="b").statistic)
    return np.array(taus)


def test_paper_examples():
    # Ladder-loss paper, Sec. III-D: relevance order h1 > ... > h5. A ranking h1, h5, h4, h3, h2
    # has CS@5 = -0.2 (4 concordant pairs with h1, 6 discordant among h2..h5: (4-6)/10);
    # h2, h1, h3, h4, h5 and h1, h3, h2, h4, h5 have one swapped pair: (9-1)/10 = 0.8.
    relevance = np.array([[5.0, 4.0, 3.0, 2.0, 1.0]] * 3)
    ranked = [[0, 4, 3, 2, 1], [1, 0, 2, 3, 4], [0, 2, 1, 3, 4]]
    scores = np.zeros((3, 5))
    for q, order in enumerate(ranked):
        scores[q, order] = [5, 4, 3, 2, 1]
    per_query = keval.coherent_score_per_query(scores, relevance, (5,))[5]
    np.testing.assert_allclose(per_query, [-0.2, 0.8, 0.8], atol=1e-12)


def test_hand_computed_ties():
    # Items (score, relevance): a(3,.4) b(2,.4) c(2,.1) d(1,.2). Pairs: ab tied in relevance
    # only, bc tied in score only, ac ad bd concordant, cd discordant: P=3, Q=1, T=U=1,
    # tau = (3-1) / sqrt((3+1+1)(3+1+1)) = 0.4.
    tau = keval.kendall_tau_b(np.array([[3.0, 2.0, 2.0, 1.0]]), np.array([[0.4, 0.4, 0.1, 0.2]]))
    assert tau[0] == pytest.approx(0.4, abs=1e-12)
    assert keval.coherent_score([[3.0, 2.0, 2.0, 1.0]], [[0.4, 0.4, 0.1, 0.2]], (4,)) == pytest.approx({4: 0.4})


@pytest.mark.parametrize("n", [2, 3, 5, 16, 17, 33, 150])
@pytest.mark.parametrize("levels", [2, 3, 7, None])
@pytest.mark.parametrize("layout", ["unsorted", "descending", "ascending"])
def test_tau_b_matches_scipy(n, levels, layout):
    rng = np.random.default_rng(n * 31 + (levels or 0))
    draw = (lambda: rng.integers(0, levels, size=(25, n)).astype(float)) if levels else (lambda: rng.standard_normal((25, n)))
    x, y = draw(), draw()
    if layout == "descending":
        x = -np.sort(-x, axis=1)
    elif layout == "ascending":
        x = np.sort(x, axis=1)
    np.testing.assert_allclose(keval.kendall_tau_b(x, y), scipy_rows(x, y), atol=1e-12, equal_nan=True)


def test_tau_b_undefined_rows_are_nan():
    x = np.array([[1.0, 1.0, 1.0], [1.0, 2.0, 3.0], [1.0, 2.0, 3.0]])
    y = np.array([[1.0, 2.0, 3.0], [5.0, 5.0, 5.0], [3.0, 1.0, 2.0]])
    tau = keval.kendall_tau_b(x, y)
    assert np.isnan(tau[0]) and np.isnan(tau[1])
    assert tau[2] == pytest.approx(kendalltau(x[2], y[2]).statistic)
    assert np.isnan(keval.kendall_tau_b(np.ones((2, 1)), np.ones((2, 1)))).all()
    with pytest.raises(ValueError, match="finite"):
        keval.kendall_tau_b(np.array([[1.0, np.nan]]), np.ones((1, 2)))
    with pytest.raises(ValueError, match="same shape"):
        keval.kendall_tau_b(np.ones((2, 3)), np.ones((3, 2)))


@pytest.mark.parametrize("n", [1, 2, 9, 16, 17, 40, 257])
def test_count_inversions_brute_force(n):
    rng = np.random.default_rng(n)
    for high in (1, 2, max(1, n // 3), n):
        seq = rng.integers(0, high, size=(6, n))
        expected = [sum(int(np.sum(row[:j] > row[j])) for j in range(n)) for row in seq]
        np.testing.assert_array_equal(count_inversions(seq), expected)


def test_dense_ranks():
    ranks, ties = dense_ranks(np.array([[0.5, -1.0, 0.5, 2.0, 0.5], [3.0, 2.0, 1.0, 0.0, -1.0]]))
    np.testing.assert_array_equal(ranks, [[1, 0, 1, 2, 1], [4, 3, 2, 1, 0]])
    np.testing.assert_array_equal(ties, [3, 0])


@pytest.mark.parametrize("levels", [3, 10, None])
def test_coherent_score_matches_scipy_oracle(levels):
    rng = np.random.default_rng(levels or 0)
    shape = (40, 60)
    if levels:
        scores = rng.integers(0, levels, size=shape).astype(float)
        relevance = rng.integers(0, levels, size=shape).astype(float)
    else:
        scores, relevance = rng.standard_normal(shape), rng.random(shape)
    ks = (2, 10, 37, 60)
    for chunk in (None, 7):
        per_query = keval.coherent_score_per_query(scores, relevance, ks, chunk_size=chunk)
        means = keval.coherent_score(scores, relevance, ks, chunk_size=chunk)
        for k in ks:
            expected = oracle_cs(scores, relevance, k)
            np.testing.assert_allclose(per_query[k], expected, atol=1e-9, equal_nan=True)
            defined = expected[~np.isnan(expected)]
            expected_mean = defined.mean() if defined.size else np.nan
            assert means[k] == pytest.approx(expected_mean, abs=1e-9, nan_ok=True)


def test_nan_policy():
    # Query 1 has constant relevance among its top 3 -> undefined.
    scores = np.array([[3.0, 2.0, 1.0, 0.0], [3.0, 2.0, 1.0, 0.0]])
    relevance = np.array([[1.0, 3.0, 2.0, 0.0], [0.5, 0.5, 0.5, 0.9]])
    omit = keval.coherent_score(scores, relevance, (3,))
    assert omit[3] == pytest.approx(kendalltau([3, 2, 1], [1, 3, 2]).statistic)
    assert np.isnan(keval.coherent_score(scores, relevance, (3,), nan_policy="propagate")[3])
    with pytest.raises(ValueError, match="undefined for 1 of 2"):
        keval.coherent_score(scores, relevance, (3,), nan_policy="raise")
    assert np.isnan(keval.coherent_score(scores[1:], relevance[1:], (3,))[3])


def test_coherent_score_bad_input():
    scores = np.zeros((3, 4))
    with pytest.raises(ValueError, match=r"expected \(3, 4\)"):
        keval.coherent_score(scores, np.zeros((4, 3)), (2,))
    with pytest.raises(ValueError, match="larger than the 4 candidates"):
        keval.coherent_score(scores, scores, (5,))
    with pytest.raises(ValueError, match=">= 2"):
        keval.coherent_score(scores, scores, (1, 2))
    with pytest.raises(ValueError, match="nan_policy"):
        keval.coherent_score(scores, scores, (2,), nan_policy="ignore")
    with pytest.raises(ValueError, match="finite"):
        keval.coherent_score(np.full((3, 4), np.nan), scores, (2,))

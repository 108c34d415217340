"""kitm.ops.kmeans1d: exact batched 1-D k-means with silhouette selection.

Oracles: scikit-learn (KMeans objective, silhouette_score), brute force over every partition of tiny
rows, and a plain-numpy silhouette written from seed 001 Eqs. 10-12.  XLA compiles once per input
shape (seconds), so the tests reuse a handful of shapes and run most checks in graph mode.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import tensorflow as tf
from sklearn.cluster import KMeans
from sklearn.metrics import silhouette_score
from threadpoolctl import threadpool_limits

from kitm.ops.kmeans1d import auto_kmeans_1d, kmeans_1d_candidates

K_MIN, K_MAX = 2, 5
COLS = 24


# ----------------------------------------------------------------------------------------------
# Oracles (numpy, from the equations)


def np_sse(x: np.ndarray, labels: np.ndarray) -> float:
    return float(sum(((x[labels == c] - x[labels == c].mean()) ** 2).sum() for c in np.unique(labels)))


def np_silhouette(x: np.ndarray, labels: np.ndarray) -> float:
    """Mean of Eq. 12 over the points: a = Eq. 10, b = Eq. 11, 0 for a singleton's point."""
    dist = np.abs(x[:, None] - x[None, :])
    scores = []
    for i in range(len(x)):
        own = labels == labels[i]
        if own.sum() == 1:
            scores.append(0.0)
            continue
        a = dist[i, own].sum() / (own.sum() - 1)
        b = min(dist[i, labels == c].mean() for c in np.unique(labels) if c != labels[i])
        scores.append((b - a) / max(a, b))
    return float(np.mean(scores))


def brute_force_sse(x: np.ndarray, k: int, contiguous: bool) -> float:
    """Minimum SSE over every partition into exactly k non-empty clusters: all k^n labellings, or
    (contiguous) all choices of k-1 cuts of the sorted row."""
    if contiguous:
        xs = np.sort(x)
        best = np.inf
        for cuts in itertools.combinations(range(1, len(x)), k - 1):
            bounds = (0, *cuts, len(x))
            best = min(best, sum(((xs[s:e] - xs[s:e].mean()) ** 2).sum() for s, e in zip(bounds[:-1], bounds[1:])))
        return best
    labellings = np.array(list(itertools.product(range(k), repeat=len(x))))  # [m, n]
    onehot = labellings[:, :, None] == np.arange(k)  # [m, n, k]
    counts = onehot.sum(axis=1)
    full = (counts > 0).all(axis=1)
    sums = (onehot * x[None, :, None]).sum(axis=1)
    sse = (x**2).sum() - (sums**2 / np.maximum(counts, 1)).sum(axis=1)
    return float(sse[full].min())


def check_ordering(x: np.ndarray, labels: np.ndarray) -> None:
    """1 = highest centre, consecutive labels, runs of the sorted row, ties never split."""
    present = np.unique(labels)
    np.testing.assert_array_equal(present, np.arange(1, len(present) + 1))
    for level in present[:-1]:
        assert x[labels == level].min() > x[labels == level + 1].max()
    centres = [x[labels == level].mean() for level in present]
    assert all(np.diff(centres) < 0)


# ----------------------------------------------------------------------------------------------
# Data


def make_rows(seed: int = 0) -> np.ndarray:
    """[12, COLS]: gaussian (negative values too), heavy ties, well-separated clusters."""
    rng = np.random.default_rng(seed)
    gaussian = rng.normal(size=(4, COLS)) * 0.3 - 0.1
    ties = np.round(rng.normal(size=(4, COLS)), 1)
    ties[3] = rng.choice([0.2, 0.5, 0.9], size=COLS)  # exactly 3 distinct values
    centres = np.array([-0.6, 0.0, 0.3, 0.9])
    separated = centres[rng.integers(0, 4, size=(4, COLS))] + rng.normal(scale=0.01, size=(4, COLS))
    return np.concatenate([gaussian, ties, separated])


@pytest.fixture(scope="module")
def rows() -> np.ndarray:
    return make_rows()


@pytest.fixture(scope="module")
def candidates(rows):
    result = kmeans_1d_candidates(rows, K_MIN, K_MAX, jit_compile=False)
    return {name: value.numpy() for name, value in result._asdict().items()}


@pytest.fixture(scope="module")
def chosen(rows):
    return tuple(t.numpy() for t in auto_kmeans_1d(rows, K_MIN, K_MAX, jit_compile=False))


# ----------------------------------------------------------------------------------------------
# Against scikit-learn


def test_sse_is_at_most_sklearn_kmeans(rows, candidates):
    for r, x in enumerate(rows):
        distinct = len(np.unique(x))
        for j, k in enumerate(range(K_MIN, K_MAX + 1)):
            assert candidates["eligible"][r, j] == (k <= distinct)
            if k > distinct:
                assert candidates["sse"][r, j] == np.inf
                continue
            labels = candidates["labels"][r, j]
            mine = np_sse(x, labels)
            assert abs(candidates["sse"][r, j] - mine) < 1e-9
            # One OpenMP thread: on tiny inputs extra threads only add synchronisation (4x slower).
            with threadpool_limits(1):
                sklearn = KMeans(n_clusters=k, n_init=10, random_state=r).fit(x[:, None]).inertia_
            assert mine <= sklearn + 1e-9, (r, k, mine, sklearn)


def test_silhouette_equals_sklearn_and_the_equation(rows, candidates):
    for r, x in enumerate(rows):
        for j, k in enumerate(range(K_MIN, K_MAX + 1)):
            if not candidates["eligible"][r, j]:
                continue
            labels = candidates["labels"][r, j]
            assert len(np.unique(labels)) == k
            expected = silhouette_score(x[:, None], labels)
            assert abs(candidates["silhouette"][r, j] - expected) < 1e-6
            assert abs(candidates["silhouette"][r, j] - np_silhouette(x, labels)) < 1e-9


def test_chosen_k_is_the_silhouette_argmax(rows, candidates, chosen):
    labels, k, silhouette = chosen
    scores = np.where(candidates["eligible"], candidates["silhouette"], -np.inf)
    best = np.argmax(scores, axis=1)  # first maximum: smallest k on exact ties
    np.testing.assert_array_equal(k, K_MIN + best)
    np.testing.assert_array_equal(silhouette, scores[np.arange(len(rows)), best])
    np.testing.assert_array_equal(labels, candidates["labels"][np.arange(len(rows)), best])
    for r, x in enumerate(rows):
        assert abs(silhouette[r] - silhouette_score(x[:, None], labels[r])) < 1e-6


def test_labels_ordered_by_decreasing_centre(rows, candidates, chosen):
    for r, x in enumerate(rows):
        check_ordering(x, chosen[0][r])
        for j in range(K_MAX - K_MIN + 1):
            if candidates["eligible"][r, j]:
                check_ordering(x, candidates["labels"][r, j])


def test_well_separated_clusters_are_recovered(rows, chosen):
    labels, k, silhouette = chosen
    assert list(k[8:]) == [4, 4, 4, 4]
    assert (silhouette[8:] > 0.9).all()
    rounded = np.round(rows[8:], 1)  # the true centres
    for r in range(4):
        for level in range(1, 5):
            assert len(np.unique(rounded[r][labels[8 + r] == level])) == 1


# ----------------------------------------------------------------------------------------------
# Brute force on tiny rows


def test_optimal_against_all_labellings():
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.normal(size=(5, 7)), np.round(rng.normal(size=(3, 7)), 0) + 0.5], axis=0)
    x[-1] = [0.0, 0.0, 1.0, 1.0, 1.0, 3.0, 7.0]
    result = kmeans_1d_candidates(x, 2, 3, jit_compile=False)
    for r in range(len(x)):
        for j, k in enumerate((2, 3)):
            if not result.eligible[r, j]:
                continue
            mine = np_sse(x[r], result.labels[r, j].numpy())
            assert mine <= brute_force_sse(x[r], k, contiguous=False) + 1e-12


def test_optimal_against_all_contiguous_partitions():
    rng = np.random.default_rng(2)
    x = np.concatenate([rng.normal(size=(6, 8)), rng.integers(0, 4, size=(2, 8)).astype(float)])
    result = kmeans_1d_candidates(x, 2, 5, jit_compile=False)
    for r in range(len(x)):
        for j, k in enumerate(range(2, 6)):
            if not result.eligible[r, j]:
                continue
            mine = np_sse(x[r], result.labels[r, j].numpy())
            assert abs(mine - brute_force_sse(x[r], k, contiguous=True)) < 1e-12


def numpy_dp_sse(x: np.ndarray, k: int) -> float:
    """Optimal k-run SSE of the sorted row by the textbook O(k n^2) recursion, in plain numpy with
    direct (two-pass) segment SSEs; ties may be split here, which cannot lower the optimum."""
    xs = np.sort(x)
    n = len(xs)
    cost = np.full((n + 1, n + 1), np.inf)  # cost[i, j] = SSE of xs[i:j]
    for i in range(n):
        for j in range(i + 1, n + 1):
            cost[i, j] = ((xs[i:j] - xs[i:j].mean()) ** 2).sum()
    best = cost[0].copy()
    for _ in range(k - 1):
        best = np.array([np.min(best[:j] + cost[:j, j]) if j > 0 else np.inf for j in range(n + 1)])
    return float(best[n])


@pytest.mark.parametrize("cols", [37, 128])
def test_optimal_against_a_numpy_dp_on_long_rows(cols):
    rng = np.random.default_rng(cols)
    x = np.concatenate([rng.normal(size=(2, cols)), rng.beta(2, 5, size=(1, cols)),
                        np.round(rng.random(size=(1, cols)), 2)])
    result = kmeans_1d_candidates(x, 2, 5, jit_compile=False)
    for r in range(len(x)):
        for j, k in enumerate(range(2, 6)):
            expected = numpy_dp_sse(x[r], k)
            assert abs(result.sse.numpy()[r, j] - expected) < 1e-9
            assert abs(np_sse(x[r], result.labels.numpy()[r, j]) - expected) < 1e-9


def test_hand_computed_example():
    # {1, 2} vs {10, 11}: every a = 1; b = 9.5 for 1 and 11, 8.5 for 2 and 10.
    labels, k, silhouette = auto_kmeans_1d([[10.0, 1.0, 11.0, 2.0]], 2, 3, jit_compile=False)
    np.testing.assert_array_equal(labels.numpy(), [[1, 2, 1, 2]])
    assert k.numpy().tolist() == [2]
    expected = (8.5 / 9.5 + 7.5 / 8.5) / 2
    assert abs(silhouette.numpy()[0] - expected) < 1e-12
    cands = kmeans_1d_candidates([[10.0, 1.0, 11.0, 2.0]], 2, 3, jit_compile=False)
    np.testing.assert_allclose(cands.sse.numpy(), [[1.0, 0.5]], atol=1e-12)
    # k = 3: two optimal splits ({1, 2} | {10} | {11} or {1} | {2} | {10, 11}); both score
    # ((1 - 1/9) + (1 - 1/8)) / 4 because the singletons count 0.
    assert abs(cands.silhouette.numpy()[0, 1] - (8 / 9 + 7 / 8) / 4) < 1e-12


def test_shift_invariance_and_negative_values():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(6, COLS))
    base = auto_kmeans_1d(x, K_MIN, K_MAX, jit_compile=False)
    for shift in (-5.0, 1000.0):
        moved = auto_kmeans_1d(x + shift, K_MIN, K_MAX, jit_compile=False)
        np.testing.assert_array_equal(moved[0].numpy(), base[0].numpy())
        np.testing.assert_allclose(moved[2].numpy(), base[2].numpy(), atol=1e-9)


# ----------------------------------------------------------------------------------------------
# Ties and degenerate rows


def test_ties_and_fewer_distinct_values_than_k():
    x = np.array([
        [0.3] * 6,                          # one distinct value
        [0.1, 0.1, 0.1, 0.7, 0.7, 0.1],     # two distinct values < k_min = 3
        [0.1, 0.4, 0.1, 0.7, 0.7, 0.2],     # four distinct values: k in {3, 4}
        [0.0, 0.5, 1.0, 0.0, 0.5, 1.0],     # three distinct values: k = 3 only
        [0.2, 0.9, 0.2, 0.2, 0.2, 0.2],     # two distinct values, one a singleton (it scores 0)
    ])
    labels, k, silhouette = (t.numpy() for t in auto_kmeans_1d(x, 3, 5, jit_compile=False))
    assert not np.isnan(silhouette).any()
    np.testing.assert_array_equal(labels[0], [1] * 6)
    assert k[0] == 1 and silhouette[0] == 0.0
    np.testing.assert_array_equal(labels[1], [2, 2, 2, 1, 1, 2])
    assert k[1] == 2
    assert silhouette[1] == 1.0  # every point has a twin: a = 0 < b
    assert k[2] in (3, 4)
    np.testing.assert_array_equal(labels[3], [3, 2, 1, 3, 2, 1])
    assert k[3] == 3 and silhouette[3] == 1.0
    np.testing.assert_array_equal(labels[4], [2, 1, 2, 2, 2, 2])
    assert k[4] == 2 and abs(silhouette[4] - 5 / 6) < 1e-12
    for r in (1, 2, 3, 4):
        assert abs(silhouette[r] - silhouette_score(x[r][:, None], labels[r])) < 1e-12
        assert abs(silhouette[r] - np_silhouette(x[r], labels[r])) < 1e-12
        check_ordering(x[r], labels[r])

    cands = kmeans_1d_candidates(x, 3, 5, jit_compile=False)
    np.testing.assert_array_equal(
        cands.eligible.numpy(),
        [[False] * 3, [False] * 3, [True, True, False], [True, False, False], [False] * 3])
    assert np.isinf(cands.sse.numpy()[~cands.eligible.numpy()]).all()


def test_duplicates_never_split(rows, candidates):
    for r, x in enumerate(rows):
        for j in range(K_MAX - K_MIN + 1):
            labels = candidates["labels"][r, j]
            for value in np.unique(x):
                assert len(np.unique(labels[x == value])) == 1


# ----------------------------------------------------------------------------------------------
# Mask


def test_mask_equals_clustering_the_valid_entries(rows):
    rng = np.random.default_rng(4)
    mask = rng.random(rows.shape) < 0.7
    mask[0] = True
    mask[1] = False  # nothing valid
    mask[2] = False
    mask[2, 5] = True  # a single valid entry
    mask[3, :] = np.arange(COLS) < 6
    labels, k, silhouette = (t.numpy() for t in auto_kmeans_1d(rows, K_MIN, K_MAX, mask=mask, jit_compile=False))
    assert (labels[~mask] == 0).all()
    assert k[1] == 0 and silhouette[1] == 0 and (labels[1] == 0).all()
    assert k[2] == 1 and silhouette[2] == 0 and labels[2, 5] == 1
    for r in [0, *range(3, len(rows))]:
        alone = auto_kmeans_1d(rows[r][mask[r]][None, :], K_MIN, K_MAX, jit_compile=False)
        np.testing.assert_array_equal(labels[r][mask[r]], alone[0].numpy()[0])
        assert k[r] == alone[1].numpy()[0]
        assert abs(silhouette[r] - alone[2].numpy()[0]) < 1e-12
        if k[r] >= 2 and k[r] < mask[r].sum():
            assert abs(silhouette[r] - silhouette_score(rows[r][mask[r]][:, None], labels[r][mask[r]])) < 1e-6


def test_masked_values_may_be_non_finite():
    x = np.array([[0.1, np.nan, 0.9, 0.8, np.inf, 0.2]])
    mask = np.isfinite(x)
    labels, k, _ = auto_kmeans_1d(x, 2, 3, mask=mask, jit_compile=False)
    np.testing.assert_array_equal(labels.numpy(), [[2, 0, 1, 1, 0, 2]])


# ----------------------------------------------------------------------------------------------
# dtypes, graph mode, XLA, chunking


def test_float32_and_float64_agree(rows):
    rows32 = rows.astype(np.float32)
    out32 = auto_kmeans_1d(rows32, K_MIN, K_MAX, jit_compile=False)
    out64 = auto_kmeans_1d(rows32.astype(np.float64), K_MIN, K_MAX, jit_compile=False)
    assert out32[2].dtype == tf.float32 and out64[2].dtype == tf.float64
    assert out32[0].dtype == tf.int32 and out32[1].dtype == tf.int32
    np.testing.assert_array_equal(out32[0].numpy(), out64[0].numpy())
    np.testing.assert_array_equal(out32[1].numpy(), out64[1].numpy())
    np.testing.assert_allclose(out32[2].numpy(), out64[2].numpy(), atol=1e-6)
    out16 = auto_kmeans_1d(tf.constant(rows32, tf.bfloat16), K_MIN, K_MAX, jit_compile=False)
    assert out16[2].dtype == tf.bfloat16


@pytest.mark.parametrize("jit_compile", [False, True])
def test_graph_mode_with_unknown_shapes(rows, chosen, jit_compile):
    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.float64)], autograph=False)
    def cluster(values):
        return auto_kmeans_1d(values, K_MIN, K_MAX, jit_compile=jit_compile)

    labels, k, silhouette = cluster(tf.constant(rows))
    np.testing.assert_array_equal(labels.numpy(), chosen[0])
    np.testing.assert_array_equal(k.numpy(), chosen[1])
    # XLA may reorder floating-point operations.
    np.testing.assert_allclose(silhouette.numpy(), chosen[2], rtol=0, atol=1e-12)
    if not jit_compile:  # (XLA would compile again for the new shape: seconds, same code)
        # Another row count through the same trace.
        half = cluster(tf.constant(rows[:5]))
        np.testing.assert_array_equal(half[0].numpy(), chosen[0][:5])


def test_xla_matches_graph_with_static_shapes(rows, chosen):
    @tf.function(jit_compile=True, autograph=False)
    def cluster(values):
        return auto_kmeans_1d(values, K_MIN, K_MAX)

    labels, k, silhouette = cluster(tf.constant(rows))
    np.testing.assert_array_equal(labels.numpy(), chosen[0])
    np.testing.assert_array_equal(k.numpy(), chosen[1])
    np.testing.assert_allclose(silhouette.numpy(), chosen[2], rtol=0, atol=1e-12)


def test_chunking_gives_the_same_result(rows, chosen, candidates):
    budget = 3 * (COLS + 1) ** 2  # 3 rows per chunk: 12 rows in 4 chunks
    out = auto_kmeans_1d(rows, K_MIN, K_MAX, max_table_elements=budget, jit_compile=False)
    for got, expected in zip(out, chosen):
        np.testing.assert_array_equal(got.numpy(), expected)
    cands = kmeans_1d_candidates(rows[:7], K_MIN, K_MAX, max_table_elements=budget, jit_compile=False)
    np.testing.assert_array_equal(cands.labels.numpy(), candidates["labels"][:7])
    np.testing.assert_array_equal(cands.silhouette.numpy(), candidates["silhouette"][:7])


def test_empty_batch():
    labels, k, silhouette = auto_kmeans_1d(np.zeros((0, 6)), 2, 3, jit_compile=False)
    assert labels.shape == (0, 6) and k.shape == (0,) and silhouette.shape == (0,)


def test_no_gradient_flows():
    values = tf.Variable(make_rows()[:2])
    with tf.GradientTape() as tape:
        _, _, silhouette = auto_kmeans_1d(values, K_MIN, K_MAX, jit_compile=False)
        total = tf.reduce_sum(silhouette)
    assert tape.gradient(total, values) is None


# ----------------------------------------------------------------------------------------------
# Errors


def test_argument_errors():
    x = np.zeros((3, 4))
    with pytest.raises(ValueError, match="k_min"):
        auto_kmeans_1d(x, 1, 3)
    with pytest.raises(ValueError, match="k_max must be >= k_min"):
        auto_kmeans_1d(x, 3, 2)
    with pytest.raises(ValueError, match="k_max must be <= cols"):
        auto_kmeans_1d(x, 2, 5)
    with pytest.raises(ValueError, match="2-D"):
        auto_kmeans_1d(np.zeros(4), 2, 3)
    with pytest.raises(ValueError, match="2-D"):
        auto_kmeans_1d(np.zeros((2, 3, 4)), 2, 3)
    with pytest.raises(TypeError, match="k_min"):
        auto_kmeans_1d(x, 2.0, 3)
    with pytest.raises(TypeError, match="float"):
        auto_kmeans_1d(np.zeros((3, 4), np.int32), 2, 3)
    with pytest.raises(TypeError, match="mask"):
        auto_kmeans_1d(x, 2, 3, mask=np.ones((3, 4)))
    with pytest.raises(ValueError, match="mask"):
        auto_kmeans_1d(x, 2, 3, mask=np.ones((3, 5), bool))
    with pytest.raises(tf.errors.InvalidArgumentError, match="finite"):
        auto_kmeans_1d(np.array([[0.0, np.nan, 1.0]]), 2, 2, jit_compile=False)


def test_runtime_errors_with_unknown_shapes():
    @tf.function(input_signature=[tf.TensorSpec(None, tf.float64)], autograph=False)
    def cluster(values):
        return auto_kmeans_1d(values, 2, 4, jit_compile=False)

    with pytest.raises(tf.errors.InvalidArgumentError, match="k_max=4 exceeds cols"):
        cluster(tf.zeros((2, 3), tf.float64))
    with pytest.raises(tf.errors.InvalidArgumentError):
        cluster(tf.zeros((2, 3, 4), tf.float64))


def test_static_shapes_are_kept_in_graphs():
    @tf.function(autograph=False)
    def cluster(values):
        labels, k, silhouette = auto_kmeans_1d(values, 2, 3, jit_compile=False)
        cands = kmeans_1d_candidates(values, 2, 3, jit_compile=False)
        assert labels.shape == (3, 6) and k.shape == (3,) and silhouette.shape == (3,)
        assert cands.labels.shape == (3, 2, 6) and cands.sse.shape == (3, 2)
        return labels

    cluster(tf.zeros((3, 6), tf.float32))

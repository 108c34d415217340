"""The entry points of 1-D k-means: check the input, draw the Lloyd runs' random numbers, cut the rows into
chunks that bound memory, and run the solver (kitm.ops.kmeans1d.solve), compiled once per setting
(kitm.ops.kmeans1d.backend)."""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import keras
from keras import ops

from kitm.distribute.backend import static_rank
from kitm.ops.kmeans1d import backend as _backend
from kitm.ops.kmeans1d.seeding import _uniform_draws, seed_word
from kitm.ops.kmeans1d.solve import _solve

# Rows per chunk are chosen so that one [rows, n, n] float64 cost table stays below this many
# elements (64 MB); a 256 x 128 problem (both directions of a B = 128 batch) fits in one chunk.
DEFAULT_MAX_TABLE_ELEMENTS = 1 << 23
# Runs of Lloyd's algorithm from k-means++ seeds considered beside the exact optimum, per row and k
# (scikit-learn's KMeans default is one run).
DEFAULT_LLOYD_RUNS = 1


class KMeans1DCandidates(NamedTuple):
    """Optimal clustering of every row for each k in [k_min, k_max] (axis 1 indexes k - k_min).

    labels:      int32 [rows, K, cols], 1 = cluster with the highest centre, 0 = masked entry.
    sse:         [rows, K] within-cluster sum of squared deviations (the k-means objective) of labels.
    silhouette:  [rows, K] mean silhouette of those labels over the row's valid entries.
    eligible:    bool [rows, K], False where k exceeds the row's number of distinct values; the
                 other outputs are meaningless there (sse and optimal_sse are +inf).
    optimal_sse: [rows, K] the global minimum of the k-means objective (the exact DP's); equal to
                 sse where the exact optimum was kept, below it where a Lloyd run scored a higher
                 silhouette.
    """

    labels: Any
    sse: Any
    silhouette: Any
    eligible: Any
    optimal_sse: Any


def auto_kmeans_1d(
    values,
    k_min: int,
    k_max: int,
    *,
    mask=None,
    lloyd_runs: int = DEFAULT_LLOYD_RUNS,
    seed: int = 0,
    max_table_elements: int = DEFAULT_MAX_TABLE_ELEMENTS,
    jit_compile: bool = True,
) -> tuple:
    """Cluster each row of `values` with 1-D k-means, k chosen by the mean silhouette.

    `L* = argmax_{k_min <= k <= k_max} mean_i Sil(x_i; C_1..C_k)` (Zhou et al., Eq. 9), each C the
    globally optimal k-means partition of the row (exact DP), or the result of a Lloyd run from
    k-means++ seeds where that scores a higher silhouette (kitm.ops.kmeans1d, "Why Lloyd runs too").

    Works on every Keras backend, eagerly and compiled: on TensorFlow inside `tf.function` (also with
    `jit_compile=True` and unknown shapes), on JAX inside `jax.jit`.  The clustering runs in float64 (on
    JAX that needs `jax_enable_x64`; without it JAX computes in float32).

    Args:
      values: float [rows, cols] (any float dtype; rows and cols may be unknown when tracing);
        each row is clustered on its own.  Entries where `mask` is True must be finite.
      k_min, k_max: Python ints, 2 <= k_min <= k_max <= cols.
      mask: optional bool [rows, cols]; only True entries are clustered (e.g. the non-positive
        candidates of each query, the paper's N^{-q}); False entries get label 0.
      lloyd_runs: runs of Lloyd's algorithm from greedy k-means++ seeds (scikit-learn's default
        KMeans) per row and k, kept instead of the exact optimum where their silhouette is higher
        (kitm.ops.kmeans1d, "Why Lloyd runs too").  0 returns the exact optima only.
      seed: Python int seeding those runs (stateless: the same input and seed give the same output).
      max_table_elements: memory bound, see `DEFAULT_MAX_TABLE_ELEMENTS`.
      jit_compile: run the clustering as one XLA computation, compiled once per input shape
        (on TensorFlow, 2-core CPU: a 3 s trace once per setting, then 6 s of compilation per shape at
        k in [2, 5]).  XLA fuses the DP's table passes: about 3x faster than the op-by-op graph at
        256 x 128.  Pass False where XLA is unavailable or shapes keep changing.
        (Inside a caller's own XLA computation the two are the same; PyTorch ignores it.)

    Returns:
      labels: int32 [rows, cols], 1 for the cluster with the highest centre, 2 the next, ..., 0 for
        masked entries.
      k: int32 [rows], the number of clusters used; below k_min only for rows with fewer than
        k_min distinct values (kitm.ops.kmeans1d, "Ties").
      silhouette: [rows] mean silhouette of the returned labels, in `values`' dtype.
    """
    x, valid, out_dtype = _check_inputs(values, k_min, k_max, mask, max_table_elements, lloyd_runs, seed)
    labels, k, silhouette = _runner(k_min, k_max, max_table_elements, lloyd_runs,
                                    bool(jit_compile))(x, valid, seed_word(seed))[:3]
    _backend.set_shape(labels, x.shape)  # the runner is traced for any shape; keep what is known
    _backend.set_shape(k, x.shape[:1])
    _backend.set_shape(silhouette, x.shape[:1])
    return labels, k, ops.cast(silhouette, out_dtype)


def kmeans_1d_candidates(
    values,
    k_min: int,
    k_max: int,
    *,
    mask=None,
    lloyd_runs: int = DEFAULT_LLOYD_RUNS,
    seed: int = 0,
    max_table_elements: int = DEFAULT_MAX_TABLE_ELEMENTS,
    jit_compile: bool = True,
) -> KMeans1DCandidates:
    """The k-means clustering of every row for every k in [k_min, k_max] (the exact optimum, or a
    Lloyd run's result where its silhouette is higher), with its SSE, the optimal SSE and the mean
    silhouette: what `auto_kmeans_1d` chooses from.  Arguments as in `auto_kmeans_1d`; with
    `lloyd_runs=0` every clustering is the exact optimum."""
    x, valid, out_dtype = _check_inputs(values, k_min, k_max, mask, max_table_elements, lloyd_runs, seed)
    labels, sse, silhouette, eligible, optimal_sse = _runner(
        k_min, k_max, max_table_elements, lloyd_runs, bool(jit_compile))(x, valid, seed_word(seed))[3:]
    num_k = k_max - k_min + 1
    _backend.set_shape(labels, [x.shape[0], num_k, x.shape[1]])
    for t in (sse, silhouette, eligible, optimal_sse):
        _backend.set_shape(t, [x.shape[0], num_k])
    return KMeans1DCandidates(labels, ops.cast(sse, out_dtype), ops.cast(silhouette, out_dtype), eligible,
                              ops.cast(optimal_sse, out_dtype))


@functools.lru_cache(maxsize=None)
def _runner(k_min: int, k_max: int, max_table_elements: int, lloyd_runs: int, jit_compile: bool):
    """One compiled function per setting (kitm.ops.kmeans1d.backend.compiled); the seed is one of its inputs, so
    that clustering with another seed does not trace it again. It returns the choice (labels, k, silhouette) and
    the candidates it was chosen from (`_solve`'s eight outputs): the solver computes both either way, and one
    function serves `auto_kmeans_1d` and `kmeans_1d_candidates` (a trace costs seconds; the candidates' outputs
    are small, [rows, K, cols] labels at most)."""
    fn = lambda xc, vc, dc: _solve(xc, vc, dc, k_min, k_max, lloyd_runs)  # noqa: E731
    out_dtypes = ("int32", "int32", "float64", "int32", "float64", "float64", "bool", "float64")
    out_ranks = (2, 1, 1, 3, 2, 2, 2, 2)

    def run(x, valid, word):
        # Every random number a row's Lloyd runs use is drawn here, per row, before chunking: a
        # row's clusters depend on (seed, its row index) and not on the chunk size.
        draws = _uniform_draws(ops.shape(x)[0], k_min, k_max, lloyd_runs, word)
        return _backend.map_chunks(fn, (x, valid, draws), max_table_elements, out_dtypes, out_ranks)

    return _backend.compiled(run, jit_compile)


def _check_inputs(values, k_min, k_max, mask, max_table_elements, lloyd_runs, seed):
    for name, k in (("k_min", k_min), ("k_max", k_max), ("lloyd_runs", lloyd_runs), ("seed", seed)):
        if isinstance(k, bool) or not isinstance(k, int):
            raise TypeError(f"{name} must be a Python int, got {k!r} ({type(k).__name__})")
    if lloyd_runs < 0:
        raise ValueError(f"lloyd_runs must be >= 0, got {lloyd_runs}")
    if k_min < 2:
        raise ValueError(f"k_min must be >= 2 (a silhouette needs two clusters), got k_min={k_min}")
    if k_max < k_min:
        raise ValueError(f"k_max must be >= k_min, got k_min={k_min}, k_max={k_max}")
    if isinstance(max_table_elements, bool) or not isinstance(max_table_elements, int) or max_table_elements < 1:
        raise ValueError(f"max_table_elements must be a positive int, got {max_table_elements!r}")

    values = ops.convert_to_tensor(values)
    dtype = keras.backend.standardize_dtype(values.dtype)
    if "float" not in dtype:
        raise TypeError(f"values must be a float tensor, got dtype {dtype}")
    rank = static_rank(values)
    if rank is not None and rank != 2:
        raise ValueError(f"values must be 2-D [rows, cols], got shape {tuple(values.shape)}")
    cols = values.shape[1] if rank is not None else None
    if cols is not None and k_max > cols:
        raise ValueError(
            f"k_max must be <= cols (the values per row), got k_max={k_max}, values shape {tuple(values.shape)}")

    if mask is None:
        valid = ops.ones_like(values, dtype="bool")
    else:
        valid = ops.convert_to_tensor(mask)
        if keras.backend.standardize_dtype(valid.dtype) != "bool":
            raise TypeError(f"mask must be a bool tensor, got dtype {keras.backend.standardize_dtype(valid.dtype)}")
        if rank is not None and (len(valid.shape) != rank or any(
                a is not None and b is not None and a != b for a, b in zip(valid.shape, values.shape))):
            raise ValueError(f"mask must have the shape of values, got mask {tuple(valid.shape)} and values "
                             f"{tuple(values.shape)}")
    # Labels are discrete and the silhouette only selects k, so nothing here is differentiable.
    x = ops.cast(ops.stop_gradient(values), "float64")
    x = _backend.checked(x, valid, k_max, cols is not None, mask is not None)
    return x, valid, dtype

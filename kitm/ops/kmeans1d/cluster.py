"""The entry points of 1-D k-means: check the input, draw the Lloyd runs' random numbers, cut the rows into
chunks that bound memory, and run the solver (kitm.ops.kmeans1d.solve) as one tf.function per setting."""

from __future__ import annotations

import functools
from typing import NamedTuple

import tensorflow as tf

from kitm.ops.kmeans1d.seeding import _draws_per_run, _trial_groups
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

    labels: tf.Tensor
    sse: tf.Tensor
    silhouette: tf.Tensor
    eligible: tf.Tensor
    optimal_sse: tf.Tensor


def auto_kmeans_1d(
    values: tf.Tensor,
    k_min: int,
    k_max: int,
    *,
    mask: tf.Tensor | None = None,
    lloyd_runs: int = DEFAULT_LLOYD_RUNS,
    seed: int = 0,
    max_table_elements: int = DEFAULT_MAX_TABLE_ELEMENTS,
    jit_compile: bool = True,
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Cluster each row of `values` with 1-D k-means, k chosen by the mean silhouette.

    `L* = argmax_{k_min <= k <= k_max} mean_i Sil(x_i; C_1..C_k)` (Zhou et al., Eq. 9), each C the
    globally optimal k-means partition of the row (exact DP), or the result of a Lloyd run from
    k-means++ seeds where that scores a higher silhouette (kitm.ops.kmeans1d, "Why Lloyd runs too").

    Works eagerly and inside `tf.function` (also with `jit_compile=True` and unknown shapes).

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
        (about 1-3 s on first use).  XLA fuses the DP's table passes: about 4x faster than the
        op-by-op graph at 256 x 128.  Pass False where XLA is unavailable or shapes keep changing.
        (Inside a caller's own XLA computation the two are the same.)

    Returns:
      labels: int32 [rows, cols], 1 for the cluster with the highest centre, 2 the next, ..., 0 for
        masked entries.
      k: int32 [rows], the number of clusters used; below k_min only for rows with fewer than
        k_min distinct values (kitm.ops.kmeans1d, "Ties").
      silhouette: [rows] mean silhouette of the returned labels, in `values`' dtype.
    """
    x, valid, out_dtype = _check_inputs(values, k_min, k_max, mask, max_table_elements, lloyd_runs, seed)
    labels, k, silhouette = _runner(k_min, k_max, max_table_elements, lloyd_runs, seed, False,
                                    bool(jit_compile))(x, valid)
    labels.set_shape(x.shape)  # the runner is traced for any shape; keep what is known
    k.set_shape(x.shape[:1])
    silhouette.set_shape(x.shape[:1])
    return labels, k, tf.cast(silhouette, out_dtype)


def kmeans_1d_candidates(
    values: tf.Tensor,
    k_min: int,
    k_max: int,
    *,
    mask: tf.Tensor | None = None,
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
        k_min, k_max, max_table_elements, lloyd_runs, seed, True, bool(jit_compile))(x, valid)
    num_k = k_max - k_min + 1
    labels.set_shape([x.shape[0], num_k, x.shape[1]])
    for t in (sse, silhouette, eligible, optimal_sse):
        t.set_shape([x.shape[0], num_k])
    return KMeans1DCandidates(labels, tf.cast(sse, out_dtype), tf.cast(silhouette, out_dtype), eligible,
                              tf.cast(optimal_sse, out_dtype))


@functools.lru_cache(maxsize=None)
def _runner(k_min: int, k_max: int, max_table_elements: int, lloyd_runs: int, seed: int, candidates: bool,
            jit_compile: bool):
    """One tf.function per setting, traced once for any [rows, cols] (XLA still compiles per shape)."""
    if candidates:
        fn = lambda xc, vc, dc: _solve(xc, vc, dc, k_min, k_max, lloyd_runs)[3:]  # noqa: E731
        signature = (tf.TensorSpec([None, None, None], tf.int32), tf.TensorSpec([None, None], tf.float64),
                     tf.TensorSpec([None, None], tf.float64), tf.TensorSpec([None, None], tf.bool),
                     tf.TensorSpec([None, None], tf.float64))
    else:
        fn = lambda xc, vc, dc: _solve(xc, vc, dc, k_min, k_max, lloyd_runs)[:3]  # noqa: E731
        signature = (tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None], tf.int32),
                     tf.TensorSpec([None], tf.float64))

    def run(x, valid):
        # Every random number a row's Lloyd runs use is drawn here, per row, before chunking: a
        # row's clusters depend on (seed, its row index) and not on the chunk size.
        draws = tf.random.stateless_uniform(
            [tf.shape(x)[0], len(_trial_groups(k_min, k_max)), lloyd_runs, _draws_per_run(k_min, k_max)],
            tf.constant([seed, 0], tf.int64), dtype=tf.float64, alg="philox")
        return _chunked(fn, (x, valid, draws), max_table_elements, signature)

    return tf.function(
        run,
        input_signature=[tf.TensorSpec([None, None], tf.float64), tf.TensorSpec([None, None], tf.bool)],
        jit_compile=jit_compile,
        autograph=False,
    )


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

    values = tf.convert_to_tensor(values)
    if not values.dtype.is_floating:
        raise TypeError(f"values must be a float tensor, got dtype {values.dtype.name}")
    if values.shape.rank is not None and values.shape.rank != 2:
        raise ValueError(f"values must be 2-D [rows, cols], got shape {values.shape}")
    values = tf.ensure_shape(values, [None, None])  # checks the rank at run time when unknown now
    cols = values.shape[1]
    checks = []
    if cols is not None:
        if k_max > cols:
            raise ValueError(
                f"k_max must be <= cols (the values per row), got k_max={k_max}, values shape {values.shape}")
    else:
        checks.append(tf.debugging.assert_less_equal(
            tf.constant(k_max, tf.int32), tf.shape(values)[1],
            message=f"auto_kmeans_1d: k_max={k_max} exceeds cols, the number of values per row"))

    if mask is None:
        valid = tf.ones_like(values, dtype=tf.bool)
    else:
        valid = tf.convert_to_tensor(mask)
        if valid.dtype != tf.bool:
            raise TypeError(f"mask must be a bool tensor, got dtype {valid.dtype.name}")
        if not valid.shape.is_compatible_with(values.shape):
            raise ValueError(f"mask must have the shape of values, got mask {valid.shape} and values {values.shape}")
        checks.append(tf.debugging.assert_equal(
            tf.shape(valid), tf.shape(values),
            message="auto_kmeans_1d: mask must have the shape of values"))
    # Labels are discrete and the silhouette only selects k, so nothing here is differentiable.
    x = tf.cast(tf.stop_gradient(values), tf.float64)
    checks.append(tf.debugging.assert_all_finite(
        tf.where(valid, x, tf.zeros_like(x)), "auto_kmeans_1d: values must be finite where clustered"))
    with tf.control_dependencies(checks):
        x = tf.identity(x)
    out_dtype = values.dtype
    return x, valid, out_dtype


def _chunked(fn, inputs, max_table_elements, signature):
    """Apply `fn(x_chunk, valid_chunk, ...)` to row blocks small enough for one [rows, n, n] table."""
    x = inputs[0]
    rows = tf.shape(x)[0]
    cols = tf.shape(x)[1]
    rows_per_chunk = tf.maximum(1, max_table_elements // tf.maximum(cols * cols, 1))
    # At least one chunk: map_fn cannot stack the outputs of zero iterations.
    num_chunks = tf.maximum((rows + rows_per_chunk - 1) // rows_per_chunk, 1)
    # Even chunks, so that the padding (rows with nothing valid) is less than one row per chunk.
    chunk = (rows + num_chunks - 1) // num_chunks
    pad = num_chunks * chunk - rows

    # Shapes are unknown when this is traced (one trace serves every shape), so even a single chunk
    # goes through map_fn: one iteration costs little, and a tf.cond around a direct call would
    # trace the whole solver twice.
    def chunked(t):
        t = tf.pad(t, tf.concat([[[0, pad]], tf.zeros([tf.rank(t) - 1, 2], tf.int32)], axis=0))
        return tf.reshape(t, tf.concat([[num_chunks, chunk], tf.shape(t)[1:]], axis=0))

    out = tf.map_fn(lambda parts: fn(*parts), tuple(chunked(t) for t in inputs), fn_output_signature=signature)

    def unchunk(t):
        t = tf.reshape(t, tf.concat([[num_chunks * chunk], tf.shape(t)[2:]], axis=0))
        return t[:rows]

    return tuple(unchunk(t) for t in out)



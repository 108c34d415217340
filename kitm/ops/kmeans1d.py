"""1-D k-means of every row of a matrix (exact optimum, and Lloyd runs scored by silhouette), with the
number of clusters chosen by silhouette.

This is the clustering step of the adaptive ladder loss (Zhou et al., Eqs. 9-12; docs/methods.md#adaptive-ladder):
each query's relevance values are split into k ladder levels, k in [k_min, k_max] being the
one with the highest mean silhouette, and levels are numbered by decreasing cluster centre.

The exact optimum: a dynamic programme
--------------------------------------
In one dimension an optimal k-means partition consists of runs of consecutive values in sorted
order, so the optimum is the best way to cut the sorted row into k runs:

    D_0(0) = 0,   D_0(j > 0) = inf
    D_k(j) = min_{i < j} D_{k-1}(i) + SSE(i, j)                                           (DP)
    SSE(i, j) = sum_{t=i}^{j-1} x_t^2 - (sum_{t=i}^{j-1} x_t)^2 / (j - i)

(Bellman's classic segmentation recursion; it is what Ckmeans.1d.dp [Wang & Song, R Journal 2011]
solves).  D_k(n) is the global minimum of the k-means objective, so it is never worse than Lloyd's
algorithm from any seeding (k-means++ included), and it is deterministic: no restarts, no random
state inside a training graph.  Every SSE(i, j) comes from two prefix sums, so a row's whole
[n, n] table of segment costs is a few broadcast ops, and one DP step is an add plus an argmin
over the table's last axis, batched over all rows.  The last step (k = k_max) only needs the
table row j = n, and the all-infinite triangle i >= j is skipped in bands.  At n = 128 the naive
O(k n^2) work is about 10^5 cell updates per row, cheaper in TensorFlow/XLA than the
data-dependent control flow of the O(k n log n) or SMAWK variants.  Memory is bounded by
processing rows in chunks of at most `max_table_elements / n^2` rows.

The computation runs in float64 whatever the input dtype: SSE from prefix sums subtracts two
nearly equal numbers, and float32 would make near-tied partitions come out in the wrong order.
(Values are also centred per row first, which keeps the cancellation small.)

Why Lloyd runs too
------------------
The number of clusters is chosen by silhouette, and the partition with the lowest SSE is not always
the one with the highest silhouette: Lloyd's algorithm from k-means++ seeds (scikit-learn's default
KMeans, what the reference code runs) sometimes stops in a local optimum that scores higher, e.g.
a singleton cluster for an outlying value.  So for every row and k, `lloyd_runs` runs of that very
algorithm (greedy k-means++ seeding, then Lloyd's iterations with scikit-learn's stopping rule; see
`_kmeans_plus_plus` and `_lloyd`) are scored too, and the exact optimum is replaced by a run's
result only where that scores a strictly higher silhouette.  Hence, for every k, the kept
clustering is a k-means solution whose SSE is either the global minimum or that of a Lloyd run from
k-means++ seeds, and whose silhouette is at least the higher of the two; its expectation is at least
that of scikit-learn's KMeans (same algorithm, same distribution), and never below the exact
optimum's.  `lloyd_runs=0` keeps the exact optima only.  The seeds are stateless draws from `seed`:
the same input and seed always give the same clusters.

Ties
----
Cuts are only allowed between two *different* values, so equal values always share a cluster.
This loses nothing: if an optimal partition put copies of a value v in two adjacent clusters, each
copy is (by optimality) equidistant from both centres, and moving all copies to one side keeps the
assignment cost and can only lower the cost after re-centring (it cannot empty a cluster when
k <= d: splitting another cluster that holds two distinct values would then beat the optimum).
Hence, for every k up to the number d of distinct values in the row, the restricted optimum
equals the unrestricted one.  A k
greater than d cannot form k non-empty clusters without splitting equal values, so it is not
eligible.  When d < k_min (e.g. a constant row), the row gets d clusters, one per distinct value
(its exact optimum with zero SSE), and the reported k is d, which is then below k_min; a row with
a single distinct value gets k = 1, label 1 everywhere and silhouette 0; a row with no valid
entry (see `mask`) gets k = 0, label 0 everywhere and silhouette 0.  Outputs never contain NaN.

Silhouette (Rousseeuw 1987; Zhou et al., Eqs. 10-12; scikit-learn's ``silhouette_score``)
-------------------------------------------------------------------------------------
For point i in cluster C_i:  a(i) = sum_{j in C_i} |x_i - x_j| / (|C_i| - 1),
b(i) = min_{C != C_i} sum_{j in C} |x_i - x_j| / |C|,  s(i) = (b - a) / max(a, b), and s(i) = 0 when
|C_i| = 1.  The row score is the mean of s(i) over the row's points.  Because clusters are runs of
the sorted row, the distance sum from x_t to a run [s, e) is, with p = clip(t, s, e),
x_t (p - s) - (S(p) - S(s)) + (S(e) - S(p)) - x_t (e - p) for the prefix sum S, so all sums cost
O(n k) per row instead of O(n^2).  k is chosen as the first (smallest) k with the highest score,
like ``numpy.argmax`` in the reference implementation.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import tensorflow as tf

__all__ = ["auto_kmeans_1d", "kmeans_1d_candidates", "KMeans1DCandidates"]

# Rows per chunk are chosen so that one [rows, n, n] float64 cost table stays below this many
# elements (64 MB); a 256 x 128 problem (both directions of a B = 128 batch) fits in one chunk.
DEFAULT_MAX_TABLE_ELEMENTS = 1 << 23
# Bands of run ends that skip the all-infinite upper triangle of the DP table (see `_solve`).
_BANDS = 4
# Runs of Lloyd's algorithm from k-means++ seeds considered beside the exact optimum, per row and k
# (scikit-learn's KMeans default is one run), and their iteration cap (scikit-learn's max_iter).
DEFAULT_LLOYD_RUNS = 1
_LLOYD_MAX_ITER = 300
_LLOYD_UNROLL = 4


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
    k-means++ seeds where that scores a higher silhouette (module docstring, "Why Lloyd runs too").

    Works eagerly and inside `tf.function` (also with `jit_compile=True` and unknown shapes).

    Args:
      values: float [rows, cols] (any float dtype; rows and cols may be unknown when tracing);
        each row is clustered on its own.  Entries where `mask` is True must be finite.
      k_min, k_max: Python ints, 2 <= k_min <= k_max <= cols.
      mask: optional bool [rows, cols]; only True entries are clustered (e.g. the non-positive
        candidates of each query, the paper's N^{-q}); False entries get label 0.
      lloyd_runs: runs of Lloyd's algorithm from greedy k-means++ seeds (scikit-learn's default
        KMeans) per row and k, kept instead of the exact optimum where their silhouette is higher
        (module docstring, "Why Lloyd runs too").  0 returns the exact optima only.
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
        k_min distinct values (module docstring, "Ties").
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


def _solve(x, valid, draws, k_min, k_max, lloyd_runs):
    """All the work for one block of rows; x float64 [r, n], valid bool [r, n], draws float64
    [r, groups, lloyd_runs, _draws_per_run] uniform numbers for the Lloyd runs' seeds.

    Returns (labels, k, silhouette, cand_labels, cand_sse, cand_silhouette, cand_eligible, optimal_sse).
    """
    r = tf.shape(x)[0]
    n = tf.shape(x)[1]
    n_valid = tf.reduce_sum(tf.cast(valid, tf.int32), axis=1)  # [r]
    inf = tf.constant(float("inf"), tf.float64)

    # Sort each row's valid values ascending; masked entries go last and are then ignored because
    # every segment is cut off at n_valid.
    order = tf.argsort(tf.where(valid, x, inf), axis=1, stable=True)
    xs = tf.gather(x, order, batch_dims=1)
    pos = tf.range(n)
    in_range = pos[None, :] < n_valid[:, None]  # [r, n]
    row_mean = tf.reduce_sum(tf.where(in_range, xs, 0.0), axis=1) / tf.cast(tf.maximum(n_valid, 1), tf.float64)
    xs = tf.where(in_range, xs - row_mean[:, None], 0.0)

    zero = tf.zeros([r, 1], tf.float64)
    s1 = tf.concat([zero, tf.cumsum(xs, axis=1)], axis=1)  # [r, n+1], s1[:, j] = sum of the first j
    s2 = tf.concat([zero, tf.cumsum(xs * xs, axis=1)], axis=1)

    # A cut before sorted position i is allowed only between two different values (ties stay
    # together, module docstring).
    idx = tf.range(n + 1)
    differs = tf.concat(
        [tf.zeros([r, 1], tf.bool), xs[:, 1:] > xs[:, :-1], tf.zeros([r, 1], tf.bool)], axis=1)  # [r, n+1]
    cut_ok = tf.logical_and(differs, idx[None, :] < n_valid[:, None])
    distinct = tf.where(n_valid > 0, 1 + tf.reduce_sum(tf.cast(cut_ok, tf.int32), axis=1), 0)

    # SSE(i, j) = s2[j] - s2[i] + q[b, j-1, i] with q = -(s1[j] - s1[i])^2 / (j - i) for i < j and
    # +inf otherwise, for run ends j = 1..n and starts i = 0..n-1.  s2[j] does not depend on the
    # cut i, so the DP adds it after the minimum:
    #   D_k(j) = s2[j] + min_i (E(i) + q[j-1, i]),   E(i) = D_{k-1}(i) - s2[i]  (+inf where no cut).
    # The table q is never materialised: each band computes its block from the prefix sums where it
    # is reduced (XLA fuses it into the argmin; a stored [r, n, n] float64 table would make every DP
    # step a pass over memory).  The minimised axis i is last (contiguous).
    ends_, starts_ = tf.range(1, n + 1), tf.range(n)

    def q_block(lo, hi):  # q[:, lo:hi, :hi]: ends j = lo+1..hi, starts i = 0..hi-1
        length = ends_[lo:hi, None] - starts_[None, :hi]
        seg_sum = s1[:, lo + 1:hi + 1, None] - s1[:, None, :hi]
        return tf.where(length > 0, seg_sum * seg_sum * (-1.0 / tf.cast(tf.maximum(length, 1), tf.float64)), inf)

    def q_at(j, i):  # q at run ends j (1-based) and starts i, same shapes [r, ...]
        seg_sum = tf.gather(s1, j, batch_dims=1) - tf.gather(s1, i, batch_dims=1)
        length = j - i
        return tf.where(length > 0, seg_sum * seg_sum * (-1.0 / tf.cast(tf.maximum(length, 1), tf.float64)), inf)

    # Half of q is +inf (i >= j).  Band g holds the table rows j-1 in [lo, hi), i.e. ends j <= hi,
    # which only need starts i < hi: each band reads a [r, hi - lo, hi] block, 5/8 of the table
    # for 4 bands.  (Every hi >= 1, so no argmin runs over an empty axis.)
    bands = _BANDS
    band_hi = [(n * g + bands - 1) // bands for g in range(1, bands + 1)]
    band_lo = [tf.constant(0)] + band_hi[:-1]

    def gather_rows(table, at):
        return tf.gather(table, at, batch_dims=1)

    last = tf.maximum(n_valid - 1, 0)  # index of the end j = n_valid (any index when n_valid = 0)
    all_ends = tf.broadcast_to(ends_[None, :], [r, n])
    d = s2[:, 1:] + q_at(all_ends, tf.zeros_like(all_ends))  # D_1(j) for j = 1..n: one run [0, j)
    sse = [gather_rows(d, last)]
    # best_cut[k-1][b, j-1] = start of the last run in the best k-run split of [0, j); for k = k_max
    # only j = n_valid is ever read back, so that step scores one row of q instead of the table.
    best_cut = [None]
    for k in range(2, k_max + 1):
        # E(0) = +inf: D_{k-1}(0) is infinite for k - 1 >= 1 runs.
        e = tf.concat([tf.fill([r, 1], inf), tf.where(cut_ok[:, 1:n], d[:, :-1], inf) - s2[:, 1:n]], axis=1)
        if k < k_max:
            args = []
            for lo, hi in zip(band_lo, band_hi):
                args.append(tf.argmin(q_block(lo, hi) + e[:, None, :hi], axis=2, output_type=tf.int32))
            arg = tf.concat(args, axis=1)
            # The minimum, recomputed at the argmin (cheaper than gathering from a block).
            d = s2[:, 1:] + q_at(all_ends, arg) + gather_rows(e, arg)
            sse.append(gather_rows(d, last))
        else:
            end = tf.broadcast_to(n_valid[:, None], [r, n])
            total = q_at(end, tf.broadcast_to(starts_[None, :], [r, n])) + e  # [r, n]: the row j = n_valid
            arg = tf.argmin(total, axis=1, output_type=tf.int32)
            sse.append(gather_rows(s2, n_valid) + gather_rows(total, arg))
        best_cut.append(arg)

    # Backtrack every candidate k at once (axis 1 = k - k_min).  For a k-run split of the sorted row,
    # run c (0-based, ascending) is [start_c, start_{c+1}) with start_0 = 0 and start_k = n_valid;
    # runs c >= k of a smaller k are empty, starting and ending at n_valid.
    ks_list = list(range(k_min, k_max + 1))
    full = tf.tile(n_valid[:, None], [1, len(ks_list)])  # [r, K]
    end = full
    run_start = {}
    for c in range(k_max, 1, -1):
        active = tf.constant([k >= c for k in ks_list])[None, :]  # k-splits that have a run c - 1
        if c == k_max:
            found = tf.tile(best_cut[c - 1][:, None], [1, len(ks_list)])
        else:
            # end >= c on every chain of an eligible k; the clamp only keeps the others in range.
            found = tf.gather(best_cut[c - 1], tf.maximum(end - 1, 0), batch_dims=1)
        end = tf.where(active, found, end)
        run_start[c - 1] = tf.where(active, found, full)
    # Stack Python lists rather than slicing one stacked tensor: TF 2.20's grappler rewrites a
    # one-element strided slice of a Pack wrongly (it drops the new axis).
    starts = tf.stack([tf.zeros_like(full)] + [run_start[c] for c in range(1, k_max)], axis=2)  # [r, K, k_max]
    ends = tf.stack([run_start[c] for c in range(1, k_max)] + [full], axis=2)
    ks = tf.range(k_min, k_max + 1)
    num_k = k_max - k_min + 1
    # Rounding can leave a zero SSE a hair below 0.
    optimal_sse = tf.maximum(tf.stack(sse[k_min - 1:], axis=1), 0.0)  # [r, K]
    cand_eligible = ks[None, :] <= distinct[:, None]

    # Every candidate clustering of a row is a set of runs of the sorted row: the exact optimum, then
    # `lloyd_runs` Lloyd's results; the one with the highest silhouette is kept per k (the exact one
    # on ties), so the kept SSE is the optimum or that of a Lloyd run (module docstring).
    if lloyd_runs > 0:
        l_starts, l_ends, l_ok = _lloyd_candidates(xs, s1, s2, in_range, n_valid, draws, k_min, k_max)
        starts = tf.concat([starts[:, :, None, :], l_starts], axis=2)  # [r, K, 1 + runs, k_max]
        ends = tf.concat([ends[:, :, None, :], l_ends], axis=2)
        usable = tf.concat([tf.ones_like(l_ok[:, :, :1]), l_ok], axis=2)
    else:
        starts, ends = starts[:, :, None, :], ends[:, :, None, :]
        usable = tf.ones([r, num_k, 1], tf.bool)
    per_k = 1 + lloyd_runs
    flat_starts = tf.reshape(starts, [r, num_k * per_k, k_max])
    flat_ends = tf.reshape(ends, [r, num_k * per_k, k_max])
    flat_runs = tf.add_n([tf.cast(pos[None, None, :] >= flat_starts[:, :, c, None], tf.int32)
                          for c in range(1, k_max)])  # [r, K * per_k, n]
    all_sil = tf.reshape(_silhouette(xs, s1, flat_runs, flat_starts, flat_ends, in_range, n_valid),
                         [r, num_k, per_k])
    pick = tf.argmax(tf.where(usable, all_sil, -inf), axis=2, output_type=tf.int32)  # first: exact on ties
    cand_sil = tf.gather(all_sil, pick, batch_dims=2)  # [r, K]
    cand_runs = tf.gather(tf.reshape(flat_runs, [r, num_k, per_k, n]), pick, batch_dims=2)  # [r, K, n]
    kept_starts = tf.gather(starts, pick, batch_dims=2)  # [r, K, k_max]
    kept_ends = tf.gather(ends, pick, batch_dims=2)
    cand_sse = tf.where(pick == 0, optimal_sse, tf.maximum(_runs_sse(s1, s2, kept_starts, kept_ends), 0.0))
    cand_sse = tf.where(cand_eligible, cand_sse, inf)

    # Rows with fewer than k_min distinct values: one cluster per distinct value.  Points of a run
    # of equal values have a = 0 < b, so s = 1, and singletons have s = 0.
    few = distinct < k_min
    same_as_prev = tf.logical_and(tf.logical_not(differs[:, :-1]), pos[None, :] > 0)
    same_as_next = tf.logical_and(tf.logical_not(differs[:, 1:]), pos[None, :] + 1 < n_valid[:, None])
    has_twin = tf.logical_and(tf.logical_or(same_as_prev, same_as_next), in_range)
    twin_fraction = tf.reduce_sum(tf.cast(has_twin, tf.float64), axis=1) / tf.cast(tf.maximum(n_valid, 1), tf.float64)
    few_sil = tf.where(distinct >= 2, twin_fraction, 0.0)
    few_run = tf.cumsum(tf.cast(differs[:, :-1], tf.int32), axis=1)  # index of the distinct value

    scored = tf.where(cand_eligible, cand_sil, -inf)
    choice = tf.argmax(scored, axis=1, output_type=tf.int32)  # first maximum: smallest k on ties
    k = tf.where(few, distinct, k_min + choice)
    silhouette = tf.where(few, few_sil, tf.gather(cand_sil, choice, batch_dims=1))
    run = tf.where(few[:, None], few_run, tf.gather(cand_runs, choice, batch_dims=1))

    # Back to the caller's column order; label 1 is the run with the largest values.
    # inverse[b, order[b, t]] = t, by a scatter (cheaper than sorting `order` again).
    rows_ids = tf.broadcast_to(tf.range(r)[:, None], [r, n])
    inverse = tf.scatter_nd(tf.stack([rows_ids, order], axis=2), tf.broadcast_to(pos[None, :], [r, n]), [r, n])
    labels = tf.gather(tf.where(in_range, k[:, None] - run, 0), inverse, batch_dims=1)
    cand_labels = tf.where(in_range[:, None, :], ks[None, :, None] - cand_runs, 0)
    cand_labels = tf.gather(cand_labels, tf.tile(inverse[:, None, :], [1, k_max - k_min + 1, 1]), batch_dims=2)
    return labels, k, silhouette, cand_labels, cand_sse, cand_sil, cand_eligible, optimal_sse


def _at(table, index):
    """table [r, m] read at index [r, ...] (each row of index into its own row of table)."""
    return tf.reshape(tf.gather(table, tf.reshape(index, [tf.shape(table)[0], -1]), batch_dims=1), tf.shape(index))


def _runs_sse(s1, s2, starts, ends):
    """Within-cluster sum of squares of runs [start, end) of the sorted row (prefix sums s1, s2)."""
    size = tf.cast(tf.maximum(ends - starts, 1), tf.float64)
    total = _at(s1, ends) - _at(s1, starts)
    return tf.reduce_sum(_at(s2, ends) - _at(s2, starts) - total * total / size, axis=-1)


def _lloyd_candidates(xs, s1, s2, in_range, n_valid, draws, k_min, k_max):
    """Lloyd's algorithm from greedy k-means++ seeds, `runs` times per row and k (module docstring).

    xs [r, n] sorted (centred) values, s1/s2 [r, n+1] prefix sums of xs and xs^2.  Returns run
    starts/ends [r, K, runs, k_max] (as for the exact candidates: run c is [start_c, end_c), runs
    c >= k empty at n_valid) and ok [r, K, runs], False where a cluster ended empty (then the
    result is not a k-cluster partition and is not used).
    """
    centers = _kmeans_plus_plus(xs, s1, s2, in_range, n_valid, draws, k_min, k_max)
    return _lloyd(xs, s1, in_range, n_valid, centers, k_min, k_max)


def _counter(xs, in_range, n_valid):
    """`count(values [r, ...], side)`: per row, the number of valid sorted x <= values ("right") or
    < values ("left"), i.e. the sorted position where a cut at that value falls."""
    r = tf.shape(xs)[0]
    searchable = tf.where(in_range, xs, tf.constant(float("inf"), tf.float64))  # sorted, +inf past n_valid

    def count(values, side):
        found = tf.searchsorted(searchable, tf.reshape(values, [r, -1]), side=side, out_type=tf.int32)
        limit = tf.reshape(n_valid, [-1] + [1] * (values.shape.rank - 1))
        return tf.minimum(tf.reshape(found, tf.shape(values)), limit)

    return count


def _trial_groups(k_min: int, k_max: int) -> list[tuple[int, int]]:
    """(local trials, largest k) per group of the k in [k_min, k_max] that k-means++ seeds alike.

    Greedy k-means++ picks centre c from the first c - 1 alone, with 2 + floor(ln k) trials, so the
    first k centres of a seeding with that many trials are distributed exactly as a k-centre
    seeding: one seeding per trial count serves every k of its group (k = 3..20 share 3 trials).
    """
    largest: dict[int, int] = {}
    for k in range(k_min, k_max + 1):
        trials = 2 + int(math.log(k))
        largest[trials] = max(largest.get(trials, 0), k)
    return sorted(largest.items())


def _draws_per_run(k_min: int, k_max: int) -> int:
    """Uniform numbers one k-means++ seeding uses: the first centre, then the trials of each next one."""
    return 1 + (k_max - 1) * max(trials for trials, _ in _trial_groups(k_min, k_max))


def _kmeans_plus_plus(xs, s1, s2, in_range, n_valid, draws, k_min, k_max):
    """Greedy k-means++ seeds for each row, k and run: centres [r, K, runs, k_max], ascending, +inf
    for the clusters c >= k (which then own no value, so every k is handled in the same tensors).

    As scikit-learn's `_kmeans_plusplus` (Arthur & Vassilvitskii 2007, with 2 + floor(ln k) local
    trials per new centre): the first centre uniform over the values, each next one the best (lowest
    potential, sum of D^2) of the trials drawn with probability proportional to D^2, the squared
    distance to the nearest centre so far.  The k of one trial count share a seeding
    (`_trial_groups`).  `draws` [r, groups, runs, _draws_per_run] holds the uniform numbers:
    draws[..., 0] picks the first centre, the next trials' worth centre 1, and so on.
    """
    inf = tf.constant(float("inf"), tf.float64)
    groups = _trial_groups(k_min, k_max)
    ordered = {}  # trial count -> centres in the order drawn [r, runs, largest k of the group]
    for g, (trials, largest) in enumerate(groups):
        ordered[trials] = _seed_sequence(xs, s1, s2, in_range, n_valid, draws[:, g], trials, largest)
    per_k = []
    for k in range(k_min, k_max + 1):
        first_k = ordered[2 + int(math.log(k))][..., :k]
        padding = tf.fill(tf.concat([tf.shape(first_k)[:2], [k_max - k]], axis=0), inf)
        per_k.append(tf.sort(tf.concat([first_k, padding], axis=2), axis=2))  # +inf last
    return tf.stack(per_k, axis=1)


def _seed_sequence(xs, s1, s2, in_range, n_valid, draws, trials, num_centers):
    """One greedy k-means++ seeding of `num_centres` centres with `trials` local trials per centre, for
    every row and run; draws [r, runs, D] uniform numbers.  Returns the centres in the order drawn
    [r, runs, num_centres]."""
    inf = tf.constant(float("inf"), tf.float64)
    x = xs[:, None, :]  # [r, 1, n]
    valid = in_range[:, None, :]
    r, n = tf.shape(xs)[0], tf.shape(xs)[1]
    count = _counter(xs, in_range, n_valid)
    prefix_moments = tf.stack([s1, s2], axis=2)  # [r, n + 1, 2]

    first = tf.floor(draws[..., 0] * tf.cast(n_valid, tf.float64)[:, None])
    first = tf.minimum(tf.cast(first, tf.int32), tf.maximum(n_valid, 1)[:, None] - 1)
    centers = [_at(xs, first)]
    closest = tf.where(valid, tf.square(x - centers[0][..., None]), 0.0)  # D^2 [r, runs, n]
    for c in range(1, num_centers):
        cumulative = tf.cumsum(closest, axis=2)
        potential = cumulative[..., -1]
        u = draws[..., 1 + (c - 1) * trials:1 + c * trials]  # [r, runs, T]
        # Inverse-CDF draw, as numpy.searchsorted(cumsum(D^2), u * potential) does.
        index = tf.searchsorted(tf.reshape(cumulative, [-1, n]), tf.reshape(u * potential[..., None], [-1, trials]),
                                side="left", out_type=tf.int32)
        index = tf.minimum(tf.reshape(index, tf.shape(u)), tf.maximum(n_valid, 1)[:, None, None] - 1)
        value = _at(xs, index)  # [r, runs, T]
        # A trial v only captures the values of its own Voronoi cell: a run of the sorted row
        # between the midpoints to the nearest centres below and above it.  Its potential is the
        # old one minus, over that run, D^2 - (x - v)^2, all from prefix sums (no [.., T, n] table).
        chosen = tf.stack(centers, axis=2)[..., None, :]  # [r, runs, 1, c]
        v = value[..., None]
        below = tf.reduce_max(tf.where(chosen < v, chosen, -inf), axis=3)
        above = tf.reduce_min(tf.where(chosen > v, chosen, inf), axis=3)
        duplicate = tf.reduce_any(tf.equal(chosen, v), axis=3)  # a centre already there: no change
        # The cell's ends in sorted positions (values on a midpoint are as near v as their centre:
        # either side gives the same potential), then the three prefix sums at both ends at once.
        ends = count(0.5 * (tf.stack([below, above], axis=-1) + v), "right")  # [r, runs, T, 2]
        ends = tf.stack([ends[..., 0], tf.maximum(ends[..., 1], ends[..., 0])], axis=-1)
        moments = tf.reshape(tf.gather(prefix_moments, tf.reshape(ends, [r, -1]), batch_dims=1),
                             tf.concat([tf.shape(ends), [2]], axis=0))  # [.., T, 2 ends, (S1, S2)]
        prefix_closest = tf.reshape(tf.concat([tf.zeros_like(cumulative[..., :1]), cumulative], axis=2), [-1, n + 1])
        closest_at = tf.reshape(_at(prefix_closest, tf.reshape(ends, [-1, 2 * trials])), tf.shape(ends))
        cell = tf.cast(ends[..., 1] - ends[..., 0], tf.float64)
        sum_x = moments[..., 1, 0] - moments[..., 0, 0]
        sum_x2 = moments[..., 1, 1] - moments[..., 0, 1]
        gain = closest_at[..., 1] - closest_at[..., 0] - (sum_x2 - 2.0 * value * sum_x + value * value * cell)
        trial_potential = potential[..., None] - tf.where(tf.logical_not(duplicate), gain, 0.0)
        best_value = tf.gather(value, tf.argmin(trial_potential, axis=2, output_type=tf.int32), batch_dims=2)
        closest = tf.minimum(closest, tf.where(valid, tf.square(x - best_value[..., None]), 0.0))
        centers.append(best_value)
    return tf.stack(centers, axis=2)


def _lloyd(xs, s1, in_range, n_valid, centers, k_min, k_max):
    """Lloyd's algorithm from `centres` [r, K, runs, k_max] (ascending, +inf for unused clusters);
    returns (starts, ends, ok) as `_lloyd_candidates`.

    As scikit-learn's `_kmeans_single_lloyd`: assign every value to its nearest centre, move each
    centre to its cluster's mean; stop when the assignment repeats or the centres moved less than
    tol = 1e-4 * var(row) in total (squared), then assign once more.  In 1-D the nearest centre is
    found by binary search of the midpoints between sorted centres (a value on a midpoint joins the
    lower cluster), and a cluster's mean comes from two prefix sums.  Finished problems are frozen.
    Unlike scikit-learn, a cluster that empties is not relocated: the result is marked not ok.
    """
    ks = list(range(k_min, k_max + 1))
    inf = tf.constant(float("inf"), tf.float64)
    n_end = n_valid[:, None, None, None]
    count = _counter(xs, in_range, n_valid)
    used = tf.constant([[c < k for c in range(k_max)] for k in ks])[None, :, None, :]  # cluster c of k

    def assign(centers):  # -> cuts [r, K, runs, k_max - 1]: start of each cluster c >= 1
        return count(0.5 * (centers[..., :-1] + centers[..., 1:]), "right")  # +inf midpoints: n_valid

    def bounds(cuts):
        zero = tf.zeros_like(cuts[..., :1])
        return tf.concat([zero, cuts], axis=3), tf.concat([cuts, tf.broadcast_to(n_end, tf.shape(zero))], axis=3)

    def means(cuts):  # -> cluster means (+inf for clusters c >= k) and sizes [r, K, runs, k_max]
        every = tf.concat([tf.zeros_like(cuts[..., :1]), cuts, tf.broadcast_to(n_end, tf.shape(cuts[..., :1]))], 3)
        sums = _at(s1, every)
        size = every[..., 1:] - every[..., :-1]
        mean = (sums[..., 1:] - sums[..., :-1]) / tf.cast(tf.maximum(size, 1), tf.float64)
        return tf.where(used, mean, inf), size

    variance = tf.reduce_sum(tf.square(xs), axis=1) / tf.cast(tf.maximum(n_valid, 1), tf.float64)  # xs is centred
    tol = 1e-4 * variance[:, None, None]

    def body(i, centers, previous, active, emptied):
        cuts = assign(centers)
        new, size = means(cuts)
        empty = tf.reduce_any(tf.logical_and(used, size == 0), axis=3)
        shift = tf.reduce_sum(tf.where(used, tf.square(new - centers), 0.0), axis=3)
        same = tf.reduce_all(tf.equal(cuts, previous), axis=3)
        done = tf.logical_or(tf.logical_or(same, shift <= tol), empty)
        centers = tf.where(active[..., None], new, centers)
        previous = tf.where(active[..., None], cuts, previous)
        emptied = tf.logical_or(emptied, tf.logical_and(active, empty))
        return i + 1, centers, previous, tf.logical_and(active, tf.logical_not(done)), emptied

    def unrolled(*state):
        # Several iterations per trip of the loop: an XLA loop trip costs more than one iteration's
        # few small kernels (frozen problems just stay put, so extra iterations change nothing).
        for _ in range(_LLOYD_UNROLL):
            state = body(*state)
        return state

    start = tf.fill(tf.shape(centers[..., 1:]), -1)  # no previous assignment
    everything = tf.ones(tf.shape(centers)[:3], tf.bool)
    _, centers, _, _, emptied = tf.while_loop(
        lambda i, c, p, active, e: tf.logical_and(i < _LLOYD_MAX_ITER, tf.reduce_any(active)),
        unrolled, (tf.constant(0), centers, start, everything, tf.logical_not(everything)))
    starts, ends = bounds(assign(centers))
    ok = tf.logical_and(tf.logical_not(emptied),
                        tf.reduce_all(tf.logical_or(tf.logical_not(used), ends > starts), axis=3))
    return starts, ends, ok


def _silhouette(xs, s1, run, starts, ends, in_range, n_valid):
    """Mean silhouette per row and candidate for runs of the sorted row (formula: module docstring).

    xs [r, n] sorted values, s1 [r, n+1] their prefix sums, run [r, K, n] each point's run index
    per candidate, starts/ends [r, K, C] run bounds (empty runs allowed and ignored).  Returns [r, K].
    """
    n = tf.shape(xs)[1]
    num_runs = tf.shape(starts)[2]
    t = tf.range(n)[None, None, :, None]
    s, e = starts[:, :, None, :], ends[:, :, None, :]  # [r, K, 1, C]
    p = tf.minimum(tf.maximum(t, s), e)  # points of the run before p are <= x_t, from p on >= x_t

    # S(p) without a gather per (point, run): p is s before the run, e after it, t inside it.
    s1_s, s1_e = _at(s1, s), _at(s1, e)
    s1_t = s1[:, None, :-1, None]
    s1_p = tf.where(t < s, s1_s, tf.where(t > e, s1_e, s1_t))
    x = xs[:, None, :, None]
    pf, sf, ef = (tf.cast(v, tf.float64) for v in (p, s, e))
    dist_sum = x * (pf - sf) - (s1_p - s1_s) + (s1_e - s1_p) - x * (ef - pf)  # [r, K, n, C]

    size = ef - sf  # [r, K, 1, C]
    own = tf.equal(tf.range(num_runs)[None, None, None, :], run[:, :, :, None])
    own_size = tf.reduce_sum(tf.where(own, size, 0.0), axis=3)  # [r, K, n]
    a = tf.reduce_sum(tf.where(own, dist_sum, 0.0), axis=3) / tf.maximum(own_size - 1.0, 1.0)
    inf = tf.constant(float("inf"), tf.float64)
    b = tf.reduce_min(tf.where(tf.logical_or(own, size <= 0.0), inf, dist_sum / tf.maximum(size, 1.0)), axis=3)
    denom = tf.maximum(a, b)
    ok = tf.logical_and(tf.logical_and(own_size > 1.0, denom > 0.0), tf.math.is_finite(b))
    # The clip only removes rounding (XLA may turn b / b into 1 + 1 ulp).
    sil = tf.clip_by_value(tf.where(ok, (b - a) / tf.where(ok, denom, 1.0), 0.0), -1.0, 1.0)
    return tf.reduce_sum(tf.where(in_range[:, None, :], sil, 0.0), axis=2) / tf.cast(
        tf.maximum(n_valid, 1), tf.float64)[:, None]

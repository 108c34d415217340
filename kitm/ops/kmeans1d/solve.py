"""All the work of 1-D k-means for one block of rows: sort, the exact optimum per k, the Lloyd runs kept where
their silhouette is higher, the choice of k by silhouette, and the labels in the caller's column order."""

from __future__ import annotations

import tensorflow as tf

from kitm.ops.kmeans1d.exact import _backtrack, _exact_dp
from kitm.ops.kmeans1d.lloyd import _lloyd_candidates
from kitm.ops.kmeans1d.silhouette import _silhouette
from kitm.ops.kmeans1d.sorted_rows import SortedRows, _runs_sse, _sorted_rows


def _solve(x, valid, draws, k_min, k_max, lloyd_runs):
    """All the work for one block of rows; x float64 [r, n], valid bool [r, n], draws float64
    [r, groups, lloyd_runs, _draws_per_run] uniform numbers for the Lloyd runs' seeds.

    Returns (labels, k, silhouette, cand_labels, cand_sse, cand_silhouette, cand_eligible, optimal_sse).
    """
    rows = _sorted_rows(x, valid)
    sse, best_cut = _exact_dp(rows, k_max)
    starts, ends = _backtrack(best_cut, rows.n_valid, k_min, k_max)
    ks = tf.range(k_min, k_max + 1)
    # Rounding can leave a zero SSE a hair below 0.
    optimal_sse = tf.maximum(tf.stack(sse[k_min - 1:], axis=1), 0.0)  # [r, K]
    cand_eligible = ks[None, :] <= rows.distinct[:, None]
    cand_sil, cand_runs, cand_sse = _best_candidates(rows, starts, ends, optimal_sse, cand_eligible, draws,
                                                     k_min, k_max, lloyd_runs)
    few, few_sil, few_run = _one_cluster_per_value(rows, k_min)

    inf = tf.constant(float("inf"), tf.float64)
    scored = tf.where(cand_eligible, cand_sil, -inf)
    choice = tf.argmax(scored, axis=1, output_type=tf.int32)  # first maximum: smallest k on ties
    k = tf.where(few, rows.distinct, k_min + choice)
    silhouette = tf.where(few, few_sil, tf.gather(cand_sil, choice, batch_dims=1))
    run = tf.where(few[:, None], few_run, tf.gather(cand_runs, choice, batch_dims=1))
    labels, cand_labels = _labels_in_column_order(rows, k, run, ks, cand_runs, k_min, k_max)
    return labels, k, silhouette, cand_labels, cand_sse, cand_sil, cand_eligible, optimal_sse


def _best_candidates(rows: SortedRows, starts, ends, optimal_sse, cand_eligible, draws, k_min, k_max, lloyd_runs):
    """Per row and k, the candidate clustering with the highest silhouette: (silhouette [r, K], each sorted
    point's run [r, K, n], SSE [r, K], +inf where k is not eligible).

    Every candidate clustering of a row is a set of runs of the sorted row: the exact optimum (starts, ends
    [r, K, k_max]), then `lloyd_runs` Lloyd's results; the one with the highest silhouette is kept per k (the
    exact one on ties), so the kept SSE is the optimum or that of a Lloyd run (kitm.ops.kmeans1d, "Why Lloyd
    runs too").
    """
    xs, s1, s2, in_range, n_valid, pos = rows.xs, rows.s1, rows.s2, rows.in_range, rows.n_valid, rows.pos
    r = tf.shape(xs)[0]
    n = tf.shape(xs)[1]
    num_k = k_max - k_min + 1
    inf = tf.constant(float("inf"), tf.float64)
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
    return cand_sil, cand_runs, cand_sse


def _one_cluster_per_value(rows: SortedRows, k_min):
    """The clustering of rows with fewer than k_min distinct values: one cluster per distinct value.

    Returns (few bool [r], such a row; its silhouette [r]; each sorted point's run [r, n]).  Points of a run
    of equal values have a = 0 < b, so s = 1, and singletons have s = 0.
    """
    differs, pos, n_valid, distinct = rows.differs, rows.pos, rows.n_valid, rows.distinct
    few = distinct < k_min
    same_as_prev = tf.logical_and(tf.logical_not(differs[:, :-1]), pos[None, :] > 0)
    same_as_next = tf.logical_and(tf.logical_not(differs[:, 1:]), pos[None, :] + 1 < n_valid[:, None])
    has_twin = tf.logical_and(tf.logical_or(same_as_prev, same_as_next), rows.in_range)
    twin_fraction = tf.reduce_sum(tf.cast(has_twin, tf.float64), axis=1) / tf.cast(tf.maximum(n_valid, 1), tf.float64)
    few_sil = tf.where(distinct >= 2, twin_fraction, 0.0)
    few_run = tf.cumsum(tf.cast(differs[:, :-1], tf.int32), axis=1)  # index of the distinct value
    return few, few_sil, few_run


def _labels_in_column_order(rows: SortedRows, k, run, ks, cand_runs, k_min, k_max):
    """The chosen labels [r, n] and every candidate's [r, K, n], back in the caller's column order; label 1
    is the run with the largest values, 0 a masked entry."""
    order, pos, in_range = rows.order, rows.pos, rows.in_range
    r = tf.shape(order)[0]
    n = tf.shape(order)[1]
    # inverse[b, order[b, t]] = t, by a scatter (cheaper than sorting `order` again).
    rows_ids = tf.broadcast_to(tf.range(r)[:, None], [r, n])
    inverse = tf.scatter_nd(tf.stack([rows_ids, order], axis=2), tf.broadcast_to(pos[None, :], [r, n]), [r, n])
    labels = tf.gather(tf.where(in_range, k[:, None] - run, 0), inverse, batch_dims=1)
    cand_labels = tf.where(in_range[:, None, :], ks[None, :, None] - cand_runs, 0)
    cand_labels = tf.gather(cand_labels, tf.tile(inverse[:, None, :], [1, k_max - k_min + 1, 1]), batch_dims=2)
    return labels, cand_labels

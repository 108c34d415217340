"""All the work of 1-D k-means for one block of rows: sort, the exact optimum per k, the Lloyd runs kept where
their silhouette is higher, the choice of k by silhouette, and the labels in the caller's column order."""

from __future__ import annotations

from keras import ops

from kitm.ops.kmeans1d.backend import pick_along, take_last
from kitm.ops.kmeans1d.exact import _backtrack, _exact_dp
from kitm.ops.kmeans1d.lloyd import _lloyd_candidates
from kitm.ops.kmeans1d.silhouette import _silhouette
from kitm.ops.kmeans1d.sorted_rows import INF, SortedRows, _f64, _int, _runs_sse, _shape, _sorted_rows


def _nonnegative(x):
    # A tensor bound: keras' PyTorch maximum(float64 tensor, 0.0) returns float32.
    return ops.maximum(x, ops.zeros_like(x))


def _solve(x, valid, draws, k_min, k_max, lloyd_runs):
    """All the work for one block of rows; x float64 [r, n], valid bool [r, n], draws float64
    [r, groups, lloyd_runs, _draws_per_run] uniform numbers for the Lloyd runs' seeds.

    Returns (labels, k, silhouette, cand_labels, cand_sse, cand_silhouette, cand_eligible, optimal_sse).
    """
    rows = _sorted_rows(x, valid)
    sse, best_cut = _exact_dp(rows, k_max)
    starts, ends = _backtrack(best_cut, rows.n_valid, k_min, k_max)
    ks = ops.arange(k_min, k_max + 1, dtype="int32")
    # Rounding can leave a zero SSE a hair below 0.
    optimal_sse = _nonnegative(ops.stack(sse[k_min - 1:], axis=1))  # [r, K]
    cand_eligible = ks[None, :] <= rows.distinct[:, None]
    cand_sil, cand_runs, cand_sse = _best_candidates(rows, starts, ends, optimal_sse, cand_eligible, draws,
                                                     k_min, k_max, lloyd_runs)
    few, few_sil, few_run = _one_cluster_per_value(rows, k_min)

    scored = ops.where(cand_eligible, cand_sil, -INF)
    choice = _int(ops.argmax(scored, axis=1))  # first maximum: smallest k on ties
    k = ops.where(few, rows.distinct, k_min + choice)
    silhouette = ops.where(few, few_sil, pick_along(cand_sil, choice, 1))
    run = ops.where(few[:, None], few_run, pick_along(cand_runs, choice, 1))
    labels, cand_labels = _labels_in_column_order(rows, k, run, ks, cand_runs)
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
    r, n = _shape(xs)[0], _shape(xs)[1]
    num_k = k_max - k_min + 1
    if lloyd_runs > 0:
        l_starts, l_ends, l_ok = _lloyd_candidates(xs, s1, s2, in_range, n_valid, draws, k_min, k_max)
        starts = ops.concatenate([starts[:, :, None, :], l_starts], axis=2)  # [r, K, 1 + runs, k_max]
        ends = ops.concatenate([ends[:, :, None, :], l_ends], axis=2)
        usable = ops.concatenate([ops.ones_like(l_ok[:, :, :1]), l_ok], axis=2)
    else:
        starts, ends = starts[:, :, None, :], ends[:, :, None, :]
        usable = ops.ones((r, num_k, 1), "bool")
    per_k = 1 + lloyd_runs
    flat_starts = ops.reshape(starts, (r, num_k * per_k, k_max))
    flat_ends = ops.reshape(ends, (r, num_k * per_k, k_max))
    flat_runs = sum(_int(pos[None, None, :] >= flat_starts[:, :, c, None]) for c in range(1, k_max))
    flat_runs = ops.zeros((r, num_k * per_k, n), "int32") + flat_runs  # [r, K * per_k, n] (also for k_max = 1)
    all_sil = ops.reshape(_silhouette(xs, s1, flat_runs, flat_starts, flat_ends, in_range, n_valid),
                          (r, num_k, per_k))
    pick = _int(ops.argmax(ops.where(usable, all_sil, -INF), axis=2))  # first: exact on ties
    cand_sil = pick_along(all_sil, pick, 2)  # [r, K]
    cand_runs = pick_along(ops.reshape(flat_runs, (r, num_k, per_k, n)), pick, 2)  # [r, K, n]
    kept_starts = pick_along(starts, pick, 2)  # [r, K, k_max]
    kept_ends = pick_along(ends, pick, 2)
    cand_sse = ops.where(pick == 0, optimal_sse, _nonnegative(_runs_sse(s1, s2, kept_starts, kept_ends)))
    cand_sse = ops.where(cand_eligible, cand_sse, INF)
    return cand_sil, cand_runs, cand_sse


def _one_cluster_per_value(rows: SortedRows, k_min):
    """The clustering of rows with fewer than k_min distinct values: one cluster per distinct value.

    Returns (few bool [r], such a row; its silhouette [r]; each sorted point's run [r, n]).  Points of a run
    of equal values have a = 0 < b, so s = 1, and singletons have s = 0.
    """
    differs, pos, n_valid, distinct = rows.differs, rows.pos, rows.n_valid, rows.distinct
    few = distinct < k_min
    same_as_prev = ops.logical_and(ops.logical_not(differs[:, :-1]), pos[None, :] > 0)
    same_as_next = ops.logical_and(ops.logical_not(differs[:, 1:]), pos[None, :] + 1 < n_valid[:, None])
    has_twin = ops.logical_and(ops.logical_or(same_as_prev, same_as_next), rows.in_range)
    twin_fraction = ops.sum(_f64(has_twin), axis=1) / _f64(ops.maximum(n_valid, 1))
    few_sil = ops.where(distinct >= 2, twin_fraction, 0.0)
    few_run = ops.cumsum(_int(differs[:, :-1]), axis=1, dtype="int32")  # index of the distinct value
    return few, few_sil, _int(few_run)


def _labels_in_column_order(rows: SortedRows, k, run, ks, cand_runs):
    """The chosen labels [r, n] and every candidate's [r, K, n], back in the caller's column order; label 1
    is the run with the largest values, 0 a masked entry."""
    order, in_range = rows.order, rows.in_range
    # inverse[b, order[b, t]] = t: the inverse permutation, by sorting the permutation (every entry distinct).
    inverse = _int(ops.argsort(order, axis=1))
    labels = take_last(ops.where(in_range, k[:, None] - run, 0), inverse)
    cand_labels = ops.where(in_range[:, None, :], ks[None, :, None] - cand_runs, 0)
    cand_labels = take_last(cand_labels, ops.broadcast_to(inverse[:, None, :], _shape(cand_labels)))
    return _int(labels), _int(cand_labels)

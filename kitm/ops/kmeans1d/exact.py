"""The exact optimum of 1-D k-means for every k up to k_max: Bellman's segmentation DP over the sorted row,
batched over rows, then the backtrack of every candidate k's runs (kitm.ops.kmeans1d, "The exact optimum")."""

from __future__ import annotations

from keras import ops

from kitm.ops.kmeans1d.backend import take_last
from kitm.ops.kmeans1d.sorted_rows import INF, SortedRows, _f64, _int, _shape

# Bands of run ends that skip the all-infinite upper triangle of the DP table (see `_exact_dp`).
_BANDS = 4


def _exact_dp(rows: SortedRows, k_max):
    """D_k(n_valid) for k = 1..k_max and the DP's argmins.

    Returns (sse, best_cut): sse a list of k_max tensors [r], the minimum SSE of a k-run split of the
    valid sorted row (k = 1, 2, ...); best_cut a list [None, arg_2, ..., arg_kmax], arg_k [r, n] the start of
    the last run in the best k-run split of [0, j) at index j - 1 (arg_kmax: [r], for j = n_valid only).

    SSE(i, j) = s2[j] - s2[i] + q[b, j-1, i] with q = -(s1[j] - s1[i])^2 / (j - i) for i < j and
    +inf otherwise, for run ends j = 1..n and starts i = 0..n-1.  s2[j] does not depend on the
    cut i, so the DP adds it after the minimum:
      D_k(j) = s2[j] + min_i (E(i) + q[j-1, i]),   E(i) = D_{k-1}(i) - s2[i]  (+inf where no cut).
    The table q is never materialised: each band computes its block from the prefix sums where it
    is reduced (XLA fuses it into the argmin; a stored [r, n, n] float64 table would make every DP
    step a pass over memory).  The minimised axis i is last (contiguous).
    """
    s1, s2, cut_ok, n_valid = rows.s1, rows.s2, rows.cut_ok, rows.n_valid
    r, n = _shape(rows.xs)[0], _shape(rows.xs)[1]
    ends_, starts_ = ops.arange(1, n + 1, dtype="int32"), ops.arange(n, dtype="int32")

    def q_block(band):  # q[:, lo:hi, :hi]: ends j = lo+1..hi, starts i = 0..hi-1
        run_exists, minus_inverse_length, s1_ends, s1_starts = band
        seg_sum = s1_ends - s1_starts
        return ops.where(run_exists, seg_sum * seg_sum * minus_inverse_length, INF)

    def q_at(j, i):  # q at run ends j (1-based) and starts i, same shapes [r, ...]
        seg_sum = take_last(s1, j) - take_last(s1, i)
        length = j - i
        return ops.where(length > 0, seg_sum * seg_sum * (-1.0 / _f64(ops.maximum(length, 1))), INF)

    # Half of q is +inf (i >= j).  Band g holds the table rows j-1 in [lo, hi), i.e. ends j <= hi,
    # which only need starts i < hi: each band reads a [r, hi - lo, hi] block, 5/8 of the table
    # for 4 bands.  (Every hi >= 1, so no argmin runs over an empty axis.)
    bands = _BANDS
    band_hi = [(n * g + bands - 1) // bands for g in range(1, bands + 1)]
    band_lo = [0] + band_hi[:-1]
    # What a band's block is computed from, sliced once for every k (each slice of a shape unknown when traced
    # is a handful of graph ops; the blocks themselves are still computed where they are reduced).
    band_parts = []
    for lo, hi in zip(band_lo, band_hi):
        length = ends_[lo:hi, None] - starts_[None, :hi]
        band_parts.append((length > 0, -1.0 / _f64(ops.maximum(length, 1)), s1[:, lo + 1:hi + 1, None],
                           s1[:, None, :hi]))

    last = ops.maximum(n_valid - 1, 0)[:, None]  # index of the end j = n_valid (any index when n_valid = 0)
    all_ends = ops.broadcast_to(ends_[None, :], (r, n))
    d = s2[:, 1:] + q_at(all_ends, ops.zeros_like(all_ends))  # D_1(j) for j = 1..n: one run [0, j)
    sse = [take_last(d, last)[:, 0]]
    # best_cut[k-1][b, j-1] = start of the last run in the best k-run split of [0, j); for k = k_max
    # only j = n_valid is ever read back, so that step scores one row of q instead of the table.
    best_cut = [None]
    for k in range(2, k_max + 1):
        # E(0) = +inf: D_{k-1}(0) is infinite for k - 1 >= 1 runs.
        e = ops.concatenate([ops.full((r, 1), INF, "float64"),
                             ops.where(cut_ok[:, 1:n], d[:, :-1], INF) - s2[:, 1:n]], axis=1)
        if k < k_max:
            args = []
            for band, hi in zip(band_parts, band_hi):
                args.append(_int(ops.argmin(q_block(band) + e[:, None, :hi], axis=2)))
            arg = ops.concatenate(args, axis=1)
            # The minimum, recomputed at the argmin (cheaper than gathering from a block).
            d = s2[:, 1:] + q_at(all_ends, arg) + take_last(e, arg)
            sse.append(take_last(d, last)[:, 0])
        else:
            end = ops.broadcast_to(n_valid[:, None], (r, n))
            total = q_at(end, ops.broadcast_to(starts_[None, :], (r, n))) + e  # [r, n]: the row j = n_valid
            arg = _int(ops.argmin(total, axis=1))
            sse.append(take_last(s2, n_valid[:, None])[:, 0] + take_last(total, arg[:, None])[:, 0])
        best_cut.append(arg)
    return sse, best_cut


def _backtrack(best_cut, n_valid, k_min, k_max):
    """The runs of every candidate k's optimal split at once (axis 1 = k - k_min): starts, ends int32
    [r, K, k_max].

    For a k-run split of the sorted row, run c (0-based, ascending) is [start_c, start_{c+1}) with
    start_0 = 0 and start_k = n_valid; runs c >= k of a smaller k are empty, starting and ending at n_valid.
    """
    ks_list = list(range(k_min, k_max + 1))
    full = ops.tile(n_valid[:, None], (1, len(ks_list)))  # [r, K]
    end = full
    run_start = {}
    for c in range(k_max, 1, -1):
        active = ops.convert_to_tensor([k >= c for k in ks_list])[None, :]  # k-splits that have a run c - 1
        if c == k_max:
            found = ops.tile(best_cut[c - 1][:, None], (1, len(ks_list)))
        else:
            # end >= c on every chain of an eligible k; the clamp only keeps the others in range.
            found = take_last(best_cut[c - 1], ops.maximum(end - 1, 0))
        end = ops.where(active, found, end)
        run_start[c - 1] = ops.where(active, found, full)
    # Stack Python lists rather than slicing one stacked tensor: TF 2.20's grappler rewrites a
    # one-element strided slice of a Pack wrongly (it drops the new axis).
    starts = ops.stack([ops.zeros_like(full)] + [run_start[c] for c in range(1, k_max)], axis=2)  # [r, K, k_max]
    ends = ops.stack([run_start[c] for c in range(1, k_max)] + [full], axis=2)
    return starts, ends

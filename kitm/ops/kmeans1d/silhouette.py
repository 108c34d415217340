"""The mean silhouette of clusterings that are runs of a sorted row, from prefix sums in O(n k)
(kitm.ops.kmeans1d, "Silhouette")."""

from __future__ import annotations

from keras import ops

from kitm.ops.kmeans1d.backend import take_last
from kitm.ops.kmeans1d.sorted_rows import INF, _f64, _shape


def _silhouette(xs, s1, run, starts, ends, in_range, n_valid):
    """Mean silhouette per row and candidate for runs of the sorted row (formula: kitm.ops.kmeans1d).

    xs [r, n] sorted values, s1 [r, n+1] their prefix sums, run [r, K, n] each point's run index
    per candidate, starts/ends [r, K, C] run bounds (empty runs allowed and ignored).  Returns [r, K].
    """
    n = _shape(xs)[1]
    num_runs = _shape(starts)[2]
    t = ops.arange(n, dtype="int32")[None, None, :, None]
    s, e = starts[:, :, None, :], ends[:, :, None, :]  # [r, K, 1, C]
    p = ops.minimum(ops.maximum(t, s), e)  # points of the run before p are <= x_t, from p on >= x_t

    # S(p) without a gather per (point, run): p is s before the run, e after it, t inside it.
    s1_s, s1_e = take_last(s1, s), take_last(s1, e)
    s1_t = s1[:, None, :-1, None]
    s1_p = ops.where(t < s, s1_s, ops.where(t > e, s1_e, s1_t))
    x = xs[:, None, :, None]
    pf, sf, ef = _f64(p), _f64(s), _f64(e)
    dist_sum = x * (pf - sf) - (s1_p - s1_s) + (s1_e - s1_p) - x * (ef - pf)  # [r, K, n, C]

    # (Float bounds of maximum/minimum are tensors: keras' PyTorch maximum(float64, 1.0) returns float32.)
    size = ef - sf  # [r, K, 1, C]
    own = ops.equal(ops.arange(num_runs, dtype="int32")[None, None, None, :], run[:, :, :, None])
    own_size = ops.sum(ops.where(own, size, 0.0), axis=3)  # [r, K, n]
    a = ops.sum(ops.where(own, dist_sum, 0.0), axis=3) / ops.maximum(own_size - 1.0, ops.ones_like(own_size))
    b = ops.min(ops.where(ops.logical_or(own, size <= 0.0), INF, dist_sum / ops.maximum(size, ops.ones_like(size))), axis=3)
    denom = ops.maximum(a, b)
    ok = ops.logical_and(ops.logical_and(own_size > 1.0, denom > 0.0), ops.isfinite(b))
    # The clip only removes rounding (XLA may turn b / b into 1 + 1 ulp).
    sil = ops.clip(ops.where(ok, (b - a) / ops.where(ok, denom, 1.0), 0.0), -1.0, 1.0)
    return ops.sum(ops.where(in_range[:, None, :], sil, 0.0), axis=2) / _f64(ops.maximum(n_valid, 1))[:, None]

"""The mean silhouette of clusterings that are runs of a sorted row, from prefix sums in O(n k)
(kitm.ops.kmeans1d, "Silhouette")."""

from __future__ import annotations

import tensorflow as tf

from kitm.ops.kmeans1d.sorted_rows import _at


def _silhouette(xs, s1, run, starts, ends, in_range, n_valid):
    """Mean silhouette per row and candidate for runs of the sorted row (formula: kitm.ops.kmeans1d).

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

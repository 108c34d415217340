"""Lloyd's algorithm (scikit-learn's `_kmeans_single_lloyd`) from k-means++ seeds, for every row, k and run at
once (kitm.ops.kmeans1d, "Why Lloyd runs too")."""

from __future__ import annotations

import tensorflow as tf

from kitm.ops.kmeans1d.seeding import _kmeans_plus_plus
from kitm.ops.kmeans1d.sorted_rows import _at, _counter

# Lloyd's iteration cap (scikit-learn's max_iter), and the iterations per trip of the loop.
_LLOYD_MAX_ITER = 300
_LLOYD_UNROLL = 4


def _lloyd_candidates(xs, s1, s2, in_range, n_valid, draws, k_min, k_max):
    """Lloyd's algorithm from greedy k-means++ seeds, `runs` times per row and k (kitm.ops.kmeans1d).

    xs [r, n] sorted (centred) values, s1/s2 [r, n+1] prefix sums of xs and xs^2.  Returns run
    starts/ends [r, K, runs, k_max] (as for the exact candidates: run c is [start_c, end_c), runs
    c >= k empty at n_valid) and ok [r, K, runs], False where a cluster ended empty (then the
    result is not a k-cluster partition and is not used).
    """
    centers = _kmeans_plus_plus(xs, s1, s2, in_range, n_valid, draws, k_min, k_max)
    return _lloyd(xs, s1, in_range, n_valid, centers, k_min, k_max)


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

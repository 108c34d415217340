"""Lloyd's algorithm (scikit-learn's `_kmeans_single_lloyd`) from k-means++ seeds, for every row, k and run at
once (kitm.ops.kmeans1d, "Why Lloyd runs too")."""

from __future__ import annotations

from keras import ops

from kitm.ops.kmeans1d.seeding import _kmeans_plus_plus
from kitm.ops.kmeans1d.backend import take_last
from kitm.ops.kmeans1d.sorted_rows import INF, _counter, _f64, _shape

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
    found by a search of the midpoints between sorted centres (a value on a midpoint joins the
    lower cluster), and a cluster's mean comes from two prefix sums.  Finished problems are frozen.
    Unlike scikit-learn, a cluster that empties is not relocated: the result is marked not ok.
    """
    ks = list(range(k_min, k_max + 1))
    n_end = n_valid[:, None, None, None]
    count = _counter(xs, in_range, n_valid)
    used = ops.convert_to_tensor([[c < k for c in range(k_max)] for k in ks])[None, :, None, :]  # cluster c of k

    def assign(centers):  # -> cuts [r, K, runs, k_max - 1]: start of each cluster c >= 1
        return count(0.5 * (centers[..., :-1] + centers[..., 1:]), "right")  # +inf midpoints: n_valid

    def bounds(cuts):
        zero = ops.zeros_like(cuts[..., :1])
        return (ops.concatenate([zero, cuts], axis=3),
                ops.concatenate([cuts, ops.broadcast_to(n_end, _shape(zero))], axis=3))

    def means(cuts):  # -> cluster means (+inf for clusters c >= k) and sizes [r, K, runs, k_max]
        every = ops.concatenate([ops.zeros_like(cuts[..., :1]), cuts,
                                 ops.broadcast_to(n_end, _shape(cuts[..., :1]))], axis=3)
        sums = take_last(s1, every)
        size = every[..., 1:] - every[..., :-1]
        mean = (sums[..., 1:] - sums[..., :-1]) / _f64(ops.maximum(size, 1))
        return ops.where(used, mean, INF), size

    variance = ops.sum(ops.square(xs), axis=1) / _f64(ops.maximum(n_valid, 1))  # xs is centred
    tol = 1e-4 * variance[:, None, None]

    def body(i, centers, previous, active, emptied):
        cuts = assign(centers)
        new, size = means(cuts)
        empty = ops.any(ops.logical_and(used, size == 0), axis=3)
        shift = ops.sum(ops.where(used, ops.square(new - centers), 0.0), axis=3)
        same = ops.all(ops.equal(cuts, previous), axis=3)
        done = ops.logical_or(ops.logical_or(same, shift <= tol), empty)
        centers = ops.where(active[..., None], new, centers)
        previous = ops.where(active[..., None], cuts, previous)
        emptied = ops.logical_or(emptied, ops.logical_and(active, empty))
        return i + 1, centers, previous, ops.logical_and(active, ops.logical_not(done)), emptied

    def unrolled(*state):
        # Several iterations per trip of the loop: an XLA loop trip costs more than one iteration's
        # few small kernels (frozen problems just stay put, so extra iterations change nothing).
        for _ in range(_LLOYD_UNROLL):
            state = body(*state)
        return state

    start = ops.full(_shape(centers[..., 1:]), -1, "int32")  # no previous assignment
    everything = ops.ones(_shape(centers)[:3], "bool")
    _, centers, _, _, emptied = ops.while_loop(
        lambda i, c, p, active, e: ops.logical_and(i < _LLOYD_MAX_ITER, ops.any(active)),
        unrolled, (ops.convert_to_tensor(0, "int32"), centers, start, everything, ops.logical_not(everything)))
    starts, ends = bounds(assign(centers))
    ok = ops.logical_and(ops.logical_not(emptied),
                         ops.all(ops.logical_or(ops.logical_not(used), ends > starts), axis=3))
    return starts, ends, ok

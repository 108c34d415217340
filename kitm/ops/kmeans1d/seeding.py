"""Greedy k-means++ seeding (scikit-learn's `_kmeans_plusplus`) of every row, k and Lloyd run at once, from
uniform numbers drawn beforehand (kitm.ops.kmeans1d, "Why Lloyd runs too")."""

from __future__ import annotations

import math

import tensorflow as tf

from kitm.ops.kmeans1d.sorted_rows import _at, _counter


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

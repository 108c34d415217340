"""Greedy k-means++ seeding (scikit-learn's `_kmeans_plusplus`) of every row, k and Lloyd run at once, from
uniform numbers drawn beforehand (kitm.ops.kmeans1d, "Why Lloyd runs too"), and those uniform numbers: a
counter-based hash, the same on every backend."""

from __future__ import annotations

import math

import numpy as np

from keras import ops

from kitm.ops.kmeans1d.backend import take_last
from kitm.ops.kmeans1d.sorted_rows import INF, _counter, _cumsum, _f64, _int, _shape


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


def _as_int32(value: int) -> int:
    """A 32-bit pattern as the int32 that holds it (two's complement)."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def _hash32(x):
    """Chris Wellons' `lowbias32` integer hash of int32 tensors, bit for bit as on uint32.

    int32 arithmetic wraps modulo 2^32 on every backend (XLA defines it; TensorFlow's and PyTorch's CPU
    kernels do it), so the products are the uint32 ones; a right shift of a negative int32 is arithmetic,
    so the mask after it makes it the logical shift of the uint32 pattern.
    """
    def shift(v, bits):
        return ops.bitwise_and(ops.right_shift(v, bits), (1 << (32 - bits)) - 1)

    x = ops.bitwise_xor(x, shift(x, 16))
    x = ops.multiply(x, ops.convert_to_tensor(_as_int32(0x7FEB352D), "int32"))
    x = ops.bitwise_xor(x, shift(x, 15))
    x = ops.multiply(x, ops.convert_to_tensor(_as_int32(0x846CA68B), "int32"))
    return ops.bitwise_xor(x, shift(x, 16))


def seed_word(seed: int) -> np.ndarray:
    """The int32 scalar a seed enters the draws as (`_uniform_draws`): an input of the compiled clustering, not a
    constant of its trace, so that a new seed runs the same compiled function."""
    return np.asarray(_as_int32(seed * 0x9E3779B9 + 0x632BE5AB), np.int32)


def _uniform_draws(rows, k_min: int, k_max: int, runs: int, word):
    """The uniform numbers of every row's Lloyd runs: float64 [rows, groups, runs, _draws_per_run], in (0, 1).

    Counter-based: the number at (row, group, run, i) is a hash of its flat index and of `seed`, so it depends
    on the row's index and the seed only (not on chunking, the batch size or the backend), and is the same
    on TensorFlow, JAX and PyTorch.  `word`: the seed as `seed_word(seed)` gives it (int32 scalar).  24 bits each
    (exact in any float type; finer than any draw here needs).
    """
    groups, per_run = len(_trial_groups(k_min, k_max)), _draws_per_run(k_min, k_max)
    per_row = groups * runs * per_run
    counter = ops.arange(rows * per_row, dtype="int32")
    key = _hash32(ops.cast(word, "int32"))
    bits = _hash32(ops.bitwise_xor(_hash32(counter), key))
    top24 = ops.bitwise_and(ops.right_shift(bits, 8), (1 << 24) - 1)
    u = (_f64(top24) + 0.5) / float(1 << 24)
    return ops.reshape(u, (rows, groups, runs, per_run))


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
    groups = _trial_groups(k_min, k_max)
    ordered = {}  # trial count -> centres in the order drawn [r, runs, largest k of the group]
    for g, (trials, largest) in enumerate(groups):
        ordered[trials] = _seed_sequence(xs, s1, s2, in_range, n_valid, draws[:, g], trials, largest)
    per_k = []
    for k in range(k_min, k_max + 1):
        first_k = ordered[2 + int(math.log(k))][..., :k]
        padding = ops.full((_shape(first_k)[0], _shape(first_k)[1], k_max - k), INF, "float64")
        per_k.append(ops.sort(ops.concatenate([first_k, padding], axis=2), axis=2))  # +inf last
    return ops.stack(per_k, axis=1)


def _seed_sequence(xs, s1, s2, in_range, n_valid, draws, trials, num_centers):
    """One greedy k-means++ seeding of `num_centres` centres with `trials` local trials per centre, for
    every row and run; draws [r, runs, D] uniform numbers.  Returns the centres in the order drawn
    [r, runs, num_centres]."""
    x = xs[:, None, :]  # [r, 1, n]
    valid = in_range[:, None, :]
    count = _counter(xs, in_range, n_valid)
    most = ops.maximum(n_valid, 1)

    # floor(u n) as a cast (u n >= 0; keras' PyTorch floor of float64 rounds through float32).
    first = ops.minimum(_int(draws[..., 0] * _f64(n_valid)[:, None]), most[:, None] - 1)
    centers = [take_last(xs, first)]
    closest = ops.where(valid, ops.square(x - centers[0][..., None]), 0.0)  # D^2 [r, runs, n]
    for c in range(1, num_centers):
        cumulative = _cumsum(closest, 2)
        potential = cumulative[..., -1]
        u = draws[..., 1 + (c - 1) * trials:1 + c * trials]  # [r, runs, T]
        # Inverse-CDF draw, as numpy.searchsorted(cumsum(D^2), u * potential) (side "left") does: the
        # number of cumulative sums below the target, by comparisons ([r, runs, T, n]; n and T are small).
        target = (u * potential[..., None])[..., None]
        index = _int(ops.sum(_int(ops.less(cumulative[..., None, :], target)), axis=3))
        index = ops.minimum(index, most[:, None, None] - 1)
        value = take_last(xs, index)  # [r, runs, T]
        # A trial v only captures the values of its own Voronoi cell: a run of the sorted row
        # between the midpoints to the nearest centres below and above it.  Its potential is the
        # old one minus, over that run, D^2 - (x - v)^2, all from prefix sums (no [.., T, n] table).
        chosen = ops.stack(centers, axis=2)[..., None, :]  # [r, runs, 1, c]
        v = value[..., None]
        below = ops.max(ops.where(chosen < v, chosen, -INF), axis=3)
        above = ops.min(ops.where(chosen > v, chosen, INF), axis=3)
        duplicate = ops.any(ops.equal(chosen, v), axis=3)  # a centre already there: no change
        # The cell's ends in sorted positions (values on a midpoint are as near v as their centre:
        # either side gives the same potential), then the prefix sums at both ends.
        ends = count(0.5 * (ops.stack([below, above], axis=-1) + v), "right")  # [r, runs, T, 2]
        ends = ops.stack([ends[..., 0], ops.maximum(ends[..., 1], ends[..., 0])], axis=-1)
        prefix_closest = ops.concatenate([ops.zeros_like(cumulative[..., :1]), cumulative], axis=2)  # [r, runs, n+1]
        closest_at = take_last(prefix_closest, ends)  # [r, runs, T, 2]
        cell = _f64(ends[..., 1] - ends[..., 0])
        sum_x = take_last(s1, ends[..., 1]) - take_last(s1, ends[..., 0])
        sum_x2 = take_last(s2, ends[..., 1]) - take_last(s2, ends[..., 0])
        gain = closest_at[..., 1] - closest_at[..., 0] - (sum_x2 - 2.0 * value * sum_x + value * value * cell)
        trial_potential = potential[..., None] - ops.where(ops.logical_not(duplicate), gain, 0.0)
        pick = _int(ops.argmin(trial_potential, axis=2))[..., None]
        best_value = take_last(value, pick)[..., 0]
        closest = ops.minimum(closest, ops.where(valid, ops.square(x - best_value[..., None]), 0.0))
        centers.append(best_value)
    return ops.stack(centers, axis=2)

"""A block of rows sorted and centred, with the prefix sums every step of 1-D k-means reads, and the reads
themselves: a gather per row, the sorted position of a cut, the SSE of runs of the sorted row."""

from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf


class SortedRows(NamedTuple):
    """One block of rows, sorted ascending per row, masked entries last (see `_sorted_rows`).

    order:    int32 [r, n], the column of each sorted position.
    xs:       float64 [r, n], the sorted values minus the row mean (0 past n_valid).
    pos:      int32 [n], the sorted positions 0..n-1.
    in_range: bool [r, n], sorted position < n_valid.
    n_valid:  int32 [r], the number of valid entries.
    s1, s2:   float64 [r, n+1], prefix sums of xs and xs^2 (s1[:, j] = sum of the first j).
    differs:  bool [r, n+1], sorted position i holds a larger value than position i - 1.
    cut_ok:   bool [r, n+1], a cut before position i is allowed (between two different valid values).
    distinct: int32 [r], the number of distinct valid values.
    """

    order: tf.Tensor
    xs: tf.Tensor
    pos: tf.Tensor
    in_range: tf.Tensor
    n_valid: tf.Tensor
    s1: tf.Tensor
    s2: tf.Tensor
    differs: tf.Tensor
    cut_ok: tf.Tensor
    distinct: tf.Tensor


def _sorted_rows(x, valid) -> SortedRows:
    """Sort each row's valid values of x float64 [r, n] (valid bool [r, n]) ascending, centre them, and take
    their prefix sums and the allowed cuts; masked entries go last and are then ignored because every
    segment is cut off at n_valid."""
    r = tf.shape(x)[0]
    n = tf.shape(x)[1]
    n_valid = tf.reduce_sum(tf.cast(valid, tf.int32), axis=1)  # [r]
    inf = tf.constant(float("inf"), tf.float64)

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
    # together, kitm.ops.kmeans1d, "Ties").
    idx = tf.range(n + 1)
    differs = tf.concat(
        [tf.zeros([r, 1], tf.bool), xs[:, 1:] > xs[:, :-1], tf.zeros([r, 1], tf.bool)], axis=1)  # [r, n+1]
    cut_ok = tf.logical_and(differs, idx[None, :] < n_valid[:, None])
    distinct = tf.where(n_valid > 0, 1 + tf.reduce_sum(tf.cast(cut_ok, tf.int32), axis=1), 0)
    return SortedRows(order, xs, pos, in_range, n_valid, s1, s2, differs, cut_ok, distinct)

def _at(table, index):
    """table [r, m] read at index [r, ...] (each row of index into its own row of table)."""
    return tf.reshape(tf.gather(table, tf.reshape(index, [tf.shape(table)[0], -1]), batch_dims=1), tf.shape(index))


def _runs_sse(s1, s2, starts, ends):
    """Within-cluster sum of squares of runs [start, end) of the sorted row (prefix sums s1, s2)."""
    size = tf.cast(tf.maximum(ends - starts, 1), tf.float64)
    total = _at(s1, ends) - _at(s1, starts)
    return tf.reduce_sum(_at(s2, ends) - _at(s2, starts) - total * total / size, axis=-1)


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

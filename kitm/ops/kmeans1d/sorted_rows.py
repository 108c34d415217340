"""A block of rows sorted and centred, with the prefix sums every step of 1-D k-means reads, and the reads
themselves: a gather per row, the sorted position of a cut, the SSE of runs of the sorted row."""

from __future__ import annotations

from typing import Any, NamedTuple

import keras
from keras import ops

from kitm.ops.kmeans1d.backend import take_last

INF = float("inf")


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

    order: Any
    xs: Any
    pos: Any
    in_range: Any
    n_valid: Any
    s1: Any
    s2: Any
    differs: Any
    cut_ok: Any
    distinct: Any


def _shape(x):
    """Static sizes where known, else (TensorFlow graphs with unknown shapes) scalar tensors."""
    return ops.shape(x)


def _int(x):
    return ops.cast(x, "int32")


def _f64(x):
    return ops.cast(x, "float64")


def _cumsum(x, axis):
    # The dtype named: keras' PyTorch cumsum of a float64 tensor without one returns float32.
    return ops.cumsum(x, axis=axis, dtype=keras.backend.standardize_dtype(x.dtype))


def _sorted_rows(x, valid) -> SortedRows:
    """Sort each row's valid values of x float64 [r, n] (valid bool [r, n]) ascending, centre them, and take
    their prefix sums and the allowed cuts; masked entries go last and are then ignored because every
    segment is cut off at n_valid."""
    r, n = _shape(x)[0], _shape(x)[1]
    n_valid = _int(ops.sum(_int(valid), axis=1))  # [r] (JAX with x64 would sum to int64)

    # Ties may come out in any order: equal values always share a cluster (cuts only between
    # different values, Lloyd's cells and the seeds read values), so no output depends on it.
    order = _int(ops.argsort(ops.where(valid, x, INF), axis=1))
    xs = take_last(x, order)
    pos = ops.arange(n, dtype="int32")
    in_range = pos[None, :] < n_valid[:, None]  # [r, n]
    row_mean = ops.sum(ops.where(in_range, xs, 0.0), axis=1) / _f64(ops.maximum(n_valid, 1))
    xs = ops.where(in_range, xs - row_mean[:, None], 0.0)

    zero = ops.zeros((r, 1), "float64")
    s1 = ops.concatenate([zero, _cumsum(xs, 1)], axis=1)  # [r, n+1], s1[:, j] = sum of the first j
    s2 = ops.concatenate([zero, _cumsum(xs * xs, 1)], axis=1)

    # A cut before sorted position i is allowed only between two different values (ties stay
    # together, kitm.ops.kmeans1d, "Ties").
    idx = ops.arange(n + 1, dtype="int32")
    no = ops.zeros((r, 1), "bool")
    differs = ops.concatenate([no, ops.greater(xs[:, 1:], xs[:, :-1]), no], axis=1)  # [r, n+1]
    cut_ok = ops.logical_and(differs, idx[None, :] < n_valid[:, None])
    distinct = ops.where(n_valid > 0, 1 + _int(ops.sum(_int(cut_ok), axis=1)), 0)
    return SortedRows(order, xs, pos, in_range, n_valid, s1, s2, differs, cut_ok, _int(distinct))


def _runs_sse(s1, s2, starts, ends):
    """Within-cluster sum of squares of runs [start, end) of the sorted row (prefix sums s1, s2)."""
    size = _f64(ops.maximum(ends - starts, 1))
    total = take_last(s1, ends) - take_last(s1, starts)
    return ops.sum(take_last(s2, ends) - take_last(s2, starts) - total * total / size, axis=-1)


def _counter(xs, in_range, n_valid):
    """`count(values [r, ...], side)`: per row, the number of valid sorted x <= values ("right") or
    < values ("left"), i.e. the sorted position where a cut at that value falls.

    A batched search-sorted written as a count of comparisons ([r, m, n] for m values per row): keras.ops'
    searchsorted takes one 1-D sequence, and the m searched per row are few (one per cut or trial)."""
    searchable = ops.where(in_range, xs, INF)  # sorted, +inf past n_valid

    def count(values, side):
        # values [r, ...] against the row [r, 1.., n]: broadcasting by added axes, not reshapes (cheaper to
        # trace for shapes unknown when traced).
        row, limit = searchable, n_valid
        for _ in range(len(values.shape) - 1):
            row, limit = ops.expand_dims(row, 1), ops.expand_dims(limit, 1)
        at = ops.expand_dims(values, -1)
        hit = ops.less_equal(row, at) if side == "right" else ops.less(row, at)
        return ops.minimum(_int(ops.sum(_int(hit), axis=-1)), limit)

    return count

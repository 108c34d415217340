"""Deterministic top-K selection over the rows of a score matrix, and query chunking.

One ranking rule serves every metric in :mod:`kitm.eval`: candidates by descending score, ties
broken by ascending candidate index (a stable sort of the negated scores). The NCS reference
ranks with ``np.argsort(row)[::-1]``, whose order among tied scores depends on numpy's unstable
sort and its SIMD dispatch; fixing one rule makes every figure reproducible and lets recall,
medr, NCS, SR and CS agree on a single ranking.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

# Default number of matrix elements one chunk of queries may touch; about 16 MB of float32
# scores, small against the 4 GB budget of a COCO-5K evaluation, large enough that the Python
# overhead per chunk is negligible.
CHUNK_ELEMENTS = 1 << 22


def chunk_rows(num_rows: int, row_length: int, chunk_size: int | None = None) -> Iterator[slice]:
    """Slices covering ``range(num_rows)`` in consecutive blocks.

    With ``chunk_size=None`` a block holds about ``CHUNK_ELEMENTS / row_length`` rows, so memory
    per block stays bounded whatever the matrix size.
    """
    if chunk_size is None:
        chunk_size = max(1, CHUNK_ELEMENTS // max(1, row_length))
    elif isinstance(chunk_size, bool) or not isinstance(chunk_size, (int, np.integer)) or chunk_size < 1:
        raise ValueError(f"`chunk_size` must be a positive integer or None; got {chunk_size!r}.")
    for start in range(0, num_rows, int(chunk_size)):
        yield slice(start, min(start + int(chunk_size), num_rows))


def top_k_indices(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the `k` best candidates of each row, best first.

    Order: descending score, ties by ascending index, i.e. exactly
    ``np.argsort(-scores, axis=1, kind="stable")[:, :k]``, but in O(n) per row via
    ``np.argpartition`` when `k` is small against the row length. ``-inf`` marks a candidate
    that must never be picked before a finite one (it is how removed items are masked).

    Args:
      scores: float [rows, n].
      k: 1 <= k <= n.

    Returns:
      int64 [rows, k].
    """
    rows, n = scores.shape
    if not 1 <= k <= n:
        raise ValueError(f"k must be in [1, {n}] for rows of length {n}; got {k}.")
    negated = np.negative(scores)
    if 4 * k >= n:
        # The default (introsort) argsort is several times faster than the stable one; only rows
        # that hold equal scores need the stable sort to put ties in index order.
        order = np.argsort(negated, axis=1)
        ordered = np.take_along_axis(negated, order, axis=1)
        tied = np.flatnonzero((ordered[:, 1:] == ordered[:, :-1]).any(axis=1))
        if tied.size:
            order[tied] = np.argsort(negated[tied], axis=1, kind="stable")
        return order[:, :k]
    best = np.argpartition(negated, k - 1, axis=1)[:, :k]
    kth = np.take_along_axis(scores, best[:, k - 1 :], axis=1)  # the k-th largest value
    # argpartition returns the right set unless more values tie with the k-th than fit in the
    # cut, in which case it keeps an arbitrary subset of them; those rows keep the lowest
    # indices instead.
    ambiguous = np.flatnonzero(np.count_nonzero(scores >= kth, axis=1) > k)
    if ambiguous.size:
        tied_rows = scores[ambiguous]
        above = tied_rows > kth[ambiguous]
        at_kth = tied_rows == kth[ambiguous]
        free_slots = k - np.count_nonzero(above, axis=1)
        keep = np.cumsum(at_kth, axis=1) <= free_slots[:, None]
        best[ambiguous] = np.nonzero(above | (at_kth & keep))[1].reshape(ambiguous.size, k)
    # In index order first, so that the stable sort by score leaves ties in index order.
    best.sort(axis=1)
    order = np.argsort(np.take_along_axis(negated, best, axis=1), axis=1, kind="stable")
    return np.take_along_axis(best, order, axis=1)


def top_k_values(values: np.ndarray, k: int) -> np.ndarray:
    """The `k` largest values of each row, in descending order; [rows, k]."""
    rows, n = values.shape
    if not 1 <= k <= n:
        raise ValueError(f"k must be in [1, {n}] for rows of length {n}; got {k}.")
    negated = np.negative(values)
    if 4 * k >= n:
        smallest = np.sort(negated, axis=1)[:, :k]
    else:
        smallest = np.partition(negated, k - 1, axis=1)[:, :k]
        smallest.sort(axis=1)
    return np.negative(smallest)

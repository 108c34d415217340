"""Kendall's tau-b for many rows at once, in O(n log n) per row without a loop over rows.

For one row of paired values (x_t, y_t), t = 1..n, with
n0 = n(n-1)/2 pairs, n1 = pairs tied in x, n2 = pairs tied in y, n3 = pairs tied in both and
D = discordant pairs (x and y strictly in opposite order):

    tau_b = (n0 - n1 - n2 + n3 - 2 D) / sqrt(n0 - n1) / sqrt(n0 - n2)

(Kendall 1945; the ladder-loss paper's Eq. 13 with P - Q = n0 - n1 - n2 + n3 - 2D), undefined
(NaN) when every pair is tied in x or in y. This is the computation and the operation order of
``scipy.stats.kendalltau(x, y, variant="b")``, which counts D with a merge sort per call
(Knight 1966). Here D is counted for all rows together by a bottom-up merge: after sorting each
row by (x, y), D is the number of strict inversions of the y sequence; at each level, blocks
of width w merge pairwise, and the inversions between a left block L and a right block R are
``sum_{r in R} #{l in L : l > r}``, read off one sort of the concatenated block in which every
value carries its origin in the lowest bit (so equal values of L sort before those of R).
"""

from __future__ import annotations

import numpy as np

# Rows are first cut into blocks of at most this width, whose inner inversions are counted by
# direct comparison; the merge levels start from there.
_LEAF_WIDTH = 16


def kendall_tau_b(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Kendall's tau-b between `x[q]` and `y[q]` for every row q.

    Args:
      x, y: finite reals [rows, n] of the same shape.

    Returns:
      float64 [rows]; NaN where a row is constant in x or in y (or n < 2), as scipy.
    """
    x = np.asarray(x)
    y = np.asarray(y)
    if x.ndim != 2 or x.shape != y.shape:
        raise ValueError(
            f"`x` and `y` must be 2-D of the same shape; got {x.shape} and {y.shape}."
        )
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("`x` and `y` must be finite (no NaN or inf).")
    rows, n = x.shape
    if rows == 0:
        return np.empty(0)
    if n < 2:
        return np.full(rows, np.nan)
    # tau is invariant to permuting the pairs, so put every row in ascending x order first;
    # rows that come already sorted (the top-K lists of coherent_score) skip the sort.
    if np.all(x[:, 1:] <= x[:, :-1]):
        x, y = x[:, ::-1], y[:, ::-1]
    elif not np.all(x[:, 1:] >= x[:, :-1]):
        order = np.argsort(x, axis=1, kind="stable")
        x, y = np.take_along_axis(x, order, axis=1), np.take_along_axis(y, order, axis=1)
    x_rank, x_ties = _ranks_of_sorted(x)
    y_rank, y_ties = dense_ranks(y)
    # Within a run of tied x, order by y so that tied-x pairs count as no inversion; the pairs
    # tied in both then sit next to each other. Rows without tied x need neither.
    sequence = y_rank
    joint_ties = np.zeros(rows, dtype=np.int64)
    tied_rows = np.flatnonzero(x_ties)
    if tied_rows.size:
        key = x_rank[tied_rows].astype(np.int64) * n + y_rank[tied_rows]
        key.sort(axis=1)
        joint_ties[tied_rows] = _tied_pairs_of_sorted(key)
        sequence = y_rank.copy()
        sequence[tied_rows] = (key % n).astype(sequence.dtype)
    discordant = count_inversions(sequence)
    total = n * (n - 1) // 2
    con_minus_dis = (total - x_ties - y_ties + joint_ties - 2 * discordant).astype(np.float64)
    defined = (x_ties < total) & (y_ties < total)
    with np.errstate(divide="ignore", invalid="ignore"):
        tau = con_minus_dis / np.sqrt(total - x_ties) / np.sqrt(total - y_ties)
    # scipy clips the same way, to absorb rounding.
    return np.where(defined, np.clip(tau, -1.0, 1.0), np.nan)


def dense_ranks(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dense ranks (0 = smallest, equal values share a rank) of each row, and the number of
    tied pairs per row.

    Returns:
      (int32 [rows, n], int64 [rows]).
    """
    order = np.argsort(values, axis=1)
    rank_of_sorted, ties = _ranks_of_sorted(np.take_along_axis(values, order, axis=1))
    ranks = np.empty_like(rank_of_sorted)
    np.put_along_axis(ranks, order, rank_of_sorted, axis=1)
    return ranks, ties


def _ranks_of_sorted(ordered: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dense ranks and tied-pair counts of rows already sorted ascending."""
    ranks = np.zeros(ordered.shape, dtype=np.int32)
    np.cumsum(ordered[:, 1:] != ordered[:, :-1], axis=1, out=ranks[:, 1:])
    # A row without ties ends at rank n - 1; only the others need their runs counted.
    ties = np.zeros(ordered.shape[0], dtype=np.int64)
    tied_rows = np.flatnonzero(ranks[:, -1] < ordered.shape[1] - 1)
    if tied_rows.size:
        ties[tied_rows] = _tied_pairs_of_sorted(ordered[tied_rows])
    return ranks, ties


def _tied_pairs_of_sorted(ordered: np.ndarray) -> np.ndarray:
    """Pairs of equal values per row of a row-sorted matrix: sum over runs of t(t-1)/2."""
    rows, n = ordered.shape
    starts = np.ones((rows, n), dtype=bool)
    starts[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    first = np.flatnonzero(starts)
    lengths = np.diff(np.append(first, rows * n))
    pairs = lengths * (lengths - 1) // 2
    return np.bincount(first // n, weights=pairs, minlength=rows).astype(np.int64)


def count_inversions(sequence: np.ndarray) -> np.ndarray:
    """Strict inversions ``#{s < t : seq[s] > seq[t]}`` of every row.

    Args:
      sequence: non-negative ints [rows, n], each below n (dense ranks).

    Returns:
      int64 [rows].
    """
    rows, n = sequence.shape
    if n < 2:
        return np.zeros(rows, dtype=np.int64)
    # Pad to leaf * 2^levels with the value n, larger than every rank: padding sits at the end
    # and is never strictly smaller than anything before it, so it adds no inversion.
    levels = 0
    while -(-n // (1 << levels)) > _LEAF_WIDTH:
        levels += 1
    leaf = -(-n // (1 << levels))
    size = leaf << levels
    padded = np.full((rows, size), n, dtype=np.int32)
    padded[:, :n] = sequence
    blocks = padded.reshape(rows, size // leaf, leaf)
    inversions = np.zeros(rows, dtype=np.int64)
    for s in range(leaf - 1):
        inversions += np.count_nonzero(blocks[:, :, s : s + 1] > blocks[:, :, s + 1 :], axis=(1, 2))
    blocks.sort(axis=2)
    # From here every value carries, in its lowest bit, the side of the merge it comes from
    # (0 = left block, 1 = right block), so one sort merges a pair of blocks and puts equal
    # values of the left block first.
    tagged = padded
    tagged <<= 1
    width = leaf
    while width < size:
        pairs = size // (2 * width)
        halves = tagged.reshape(rows, pairs, 2, width)
        halves[:, :, 1, :] |= 1
        merged = tagged.reshape(rows, pairs, 2 * width)
        merged.sort(axis=2)
        # A right-block element at merged position p, k-th in its block, has p - k left elements
        # at or below it, hence width - (p - k) strictly above it; summed over the block:
        # width^2 + width(width-1)/2 - sum of the right elements' merged positions.
        right_positions = ((merged & 1) * np.arange(2 * width, dtype=np.int32)).sum(
            axis=(1, 2), dtype=np.int64
        )
        inversions += pairs * (width * width + width * (width - 1) // 2) - right_positions
        tagged &= ~1
        width *= 2
    return inversions

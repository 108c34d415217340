"""The two retrieval directions seen as one shape: queries x candidates.

Image i owns captions i*cpi .. i*cpi + cpi - 1. For image-to-text (i2t) a query is an image,
its candidates are all captions and its ground truth the cpi captions it owns. For text-to-image
(t2i) a query is a caption, its candidates are all images and its ground truth the one image
that owns it. Metrics are written once against this view and run in both directions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DIRECTIONS = ("i2t", "t2i")

# Rows copied per step of a transposed copy: a tile of this many rows of a column block stays
# in cache, which makes the copy several times faster than numpy's strided transpose.
_TRANSPOSE_TILE = 512


def transposed_columns(matrix: np.ndarray, columns: slice, dtype: object = None) -> np.ndarray:
    """``matrix[:, columns].T`` as a C-contiguous array (optionally cast), copied in tiles."""
    block = matrix[:, columns]
    out = np.empty((block.shape[1], block.shape[0]), dtype=dtype or matrix.dtype)
    for start in range(0, block.shape[0], _TRANSPOSE_TILE):
        out[:, start : start + _TRANSPOSE_TILE] = block[start : start + _TRANSPOSE_TILE].T
    return out


def check_direction(direction: str) -> str:
    if direction not in DIRECTIONS:
        raise ValueError(f"`direction` must be one of {DIRECTIONS}; got {direction!r}.")
    return direction


@dataclass(frozen=True)
class DirectionView:
    """Row access to `sims` [num_images, num_captions] (and `relevance` [num_captions,
    num_images], when given) in one direction."""

    direction: str
    sims: np.ndarray
    captions_per_image: int
    relevance: np.ndarray | None = None

    @property
    def num_images(self) -> int:
        return self.sims.shape[0]

    @property
    def num_queries(self) -> int:
        return self.sims.shape[0] if self.direction == "i2t" else self.sims.shape[1]

    @property
    def num_candidates(self) -> int:
        return self.sims.shape[1] if self.direction == "i2t" else self.sims.shape[0]

    @property
    def ground_truth_per_query(self) -> int:
        return self.captions_per_image if self.direction == "i2t" else 1

    def scores(self, rows: slice) -> np.ndarray:
        """Model scores [q, num_candidates] of the queries in `rows` (a fresh array for t2i)."""
        if self.direction == "i2t":
            return self.sims[rows]
        return transposed_columns(self.sims, rows)

    def ground_truth(self, rows: slice) -> np.ndarray:
        """Candidate indices [q, G] of each query's ground truth, ascending along G."""
        queries = np.arange(rows.start, rows.stop)
        if self.direction == "i2t":
            cpi = self.captions_per_image
            return queries[:, None] * cpi + np.arange(cpi)[None, :]
        return (queries // self.captions_per_image)[:, None]

    def query_images(self, rows: slice) -> np.ndarray:
        """The image each query is (i2t) or belongs to (t2i), [q]."""
        queries = np.arange(rows.start, rows.stop)
        return queries if self.direction == "i2t" else queries // self.captions_per_image

    def candidate_images(self, candidates: np.ndarray) -> np.ndarray:
        """The image each candidate index belongs to (i2t: its owner; t2i: itself)."""
        if self.direction == "i2t":
            return candidates // self.captions_per_image
        return candidates

    def relevance_rows(self, rows: slice) -> np.ndarray:
        """N of every candidate for the queries in `rows`, float64 [q, num_candidates]:
        i2t ``N[:, i]`` for query image i, t2i ``N[c, :]`` for query caption c."""
        if self.relevance is None:
            raise ValueError("this metric needs `relevance`.")
        if self.direction == "i2t":
            return transposed_columns(self.relevance, rows, np.float64)
        return np.array(self.relevance[rows], dtype=np.float64, order="C")

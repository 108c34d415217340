"""mAP@R and R-Precision (Musgrave et al., "A Metric Learning Reality Check", ECCV 2020), as ECCV Caption scores them.

For a query q with relevant set P_q, R_q = |P_q| and the model's ranking c_1, c_2, ... of the candidates:

- R-Precision: ``RP_q = |{c_1 .. c_{R_q}} ∩ P_q| / R_q``, the precision at rank R_q;
- mAP@R: ``mAP@R_q = (1 / R_q) * sum_{i=1..R_q} P@i * 1{c_i in P_q}`` with ``P@i = |{c_1 .. c_i} ∩ P_q| / i``:
  average precision truncated at rank R_q, dividing by R_q (not by the number of hits), so that a ranking
  scores 1 only when all R_q relevant items come first.

Both are averaged over the queries with at least one relevant item (R_q >= 1); a query without one has no
defined value and is left out (NaN per query). Figures are in percent. ECCV Caption's ``eccv_map_at_r`` and
``eccv_rprecision`` (Chun et al. 2022, package ``eccv-caption``) compute the same quantities from ranked id
lists; the tests check the two agree.

Ties follow kitm's one ranking rule (:mod:`kitm.eval.ranking`): descending score, ties broken by ascending
candidate index. A relevant and an irrelevant item with equal scores are therefore ordered by their index, as
R@K, medr and NCS order them; no tie averaging.

Vectorised: per chunk of queries only the top ``max R_q`` candidates are selected
(:func:`kitm.eval.ranking.top_k_indices`), so memory stays bounded by the chunk.
"""

from __future__ import annotations

import numpy as np

from kitm.eval import _checks
from kitm.eval.ranking import chunk_rows, top_k_indices


def _checked(scores: object, relevant: object) -> tuple[np.ndarray, np.ndarray]:
    scores = _checks.as_matrix(scores, "scores")
    relevant = np.asarray(relevant)
    if relevant.dtype != bool:
        raise ValueError(f"`relevant` must be a bool array [queries, candidates]; got dtype {relevant.dtype}.")
    if relevant.shape != scores.shape:
        raise ValueError(f"`relevant` has shape {relevant.shape}; expected {scores.shape}, the shape of `scores` "
                         "([queries, candidates] for both).")
    return scores, relevant


def ranked_precision(scores: np.ndarray, relevant: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """mAP@R and R-Precision of each row of one block, as fractions: (map_at_r [q], r_precision [q]).

    NaN where a row has no relevant item. `scores` float [q, n], `relevant` bool [q, n], already checked.
    """
    num_relevant = np.count_nonzero(relevant, axis=1)
    map_r = np.full(scores.shape[0], np.nan)
    precision = np.full(scores.shape[0], np.nan)
    rows = np.flatnonzero(num_relevant)
    if not rows.size:
        return map_r, precision
    counts = num_relevant[rows]
    deepest = int(counts.max())
    every_row = rows.size == scores.shape[0]  # no copy when every row has a positive
    order = top_k_indices(scores if every_row else scores[rows], deepest)
    hits = np.take_along_axis(relevant if every_row else relevant[rows], order, axis=1)
    ranks = np.arange(1, deepest + 1)
    hits &= ranks[None, :] <= counts[:, None]  # only ranks 1 .. R_q count
    found = np.cumsum(hits, axis=1)
    map_r[rows] = (found / ranks * hits).sum(axis=1) / counts
    precision[rows] = found[np.arange(rows.size), counts - 1] / counts
    return map_r, precision


def map_at_r_from_ranks(ranks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """mAP@R and R-Precision in percent from the 0-based ranks of each query's positives, int [Q, R] (every query
    with the same R, as the ground truth of kitm's layout): (map_at_r [Q], r_precision [Q]).

    With the positives' ranks sorted, r_(1) < ... < r_(R), the i-th positive is a hit when r_(i) < R and its
    precision is i / (r_(i) + 1), so ``mAP@R = (1/R) sum_{i: r_(i) < R} i / (r_(i) + 1)`` and ``RP = #{r < R} / R``:
    the same figures as :func:`map_at_r_per_query` under the same ranking, without ranking again.
    """
    ordered = np.sort(np.asarray(ranks), axis=1)
    count = ordered.shape[1]
    hits = ordered < count
    position = np.arange(1, count + 1)
    precision_sum = np.where(hits, position / (ordered + 1), 0.0).sum(axis=1)
    return 100.0 * precision_sum / count, 100.0 * np.count_nonzero(hits, axis=1) / count


def map_at_r_per_query(scores: object, relevant: object, *, chunk_size: int | None = None
                       ) -> tuple[np.ndarray, np.ndarray]:
    """mAP@R and R-Precision of every query in percent: (map_at_r [Q], r_precision [Q]), NaN where R_q = 0.

    Args:
      scores: float [Q, N], higher is better (any sign).
      relevant: bool [Q, N], the relevant candidates of each query.
      chunk_size: queries per chunk (default: about 4M matrix elements each).
    """
    scores, relevant = _checked(scores, relevant)
    num_queries, num_candidates = scores.shape
    map_r = np.empty(num_queries)
    precision = np.empty(num_queries)
    for rows in chunk_rows(num_queries, num_candidates, chunk_size):
        map_r[rows], precision[rows] = ranked_precision(scores[rows], relevant[rows])
    return 100.0 * map_r, 100.0 * precision


def _mean_over_defined(values: np.ndarray, name: str) -> float:
    if np.isnan(values).all():
        raise ValueError(f"{name}: no query has a relevant item (`relevant` is all False).")
    return _checks.figure(values)


def map_at_r(scores: object, relevant: object, *, chunk_size: int | None = None) -> float:
    """mAP@R in percent, the mean over queries with at least one relevant item (module docstring).

    Args:
      scores: float [Q, N] model scores (e.g. ``sims`` for image->text, ``sims.T`` for text->image).
      relevant: bool [Q, N].

    Example:
      >>> map_at_r([[0.9, 0.8, 0.7, 0.1]], [[True, False, True, False]])  # R=2: (1/2)(1/1 + 0) = 0.5
      50.0
    """
    return _mean_over_defined(map_at_r_per_query(scores, relevant, chunk_size=chunk_size)[0], "mAP@R")


def r_precision(scores: object, relevant: object, *, chunk_size: int | None = None) -> float:
    """R-Precision in percent, the mean over queries with at least one relevant item (module docstring).

    Example:
      >>> r_precision([[0.9, 0.8, 0.7, 0.1]], [[True, False, True, False]])  # top 2 hold 1 of R=2
      50.0
    """
    return _mean_over_defined(map_at_r_per_query(scores, relevant, chunk_size=chunk_size)[1], "R-Precision")

"""Binary-relevance retrieval metrics: R@K, R^V@K, medr, meanr and mAP.

Ground truth: image i owns captions i*cpi .. i*cpi + cpi - 1 (`captions_per_image` = cpi).
Ranks are taken under kitm's one ranking rule (descending score, ties by ascending candidate
index; see :mod:`kitm.eval.ranking`) and computed by counting, without sorting a row:
``rank(g) = #{j : s_j > s_g} + #{j < g : s_j = s_g}`` (0-based).

- R@K, information-retrieval recall (Biten et al. 2022, Eq. 1):
  ``R_q@K = |G_q ∩ Q_qK| / |G_q|``, mean over queries, in percent.
- R^V@K, VSE++ recall (same paper, Eq. 2; Faghri et al. 2018): ``1{G_q ∩ Q_qK ≠ ∅}``.
- medr / meanr, as VSE++ ``evaluation.py``: r_q = 0-based rank of the best-ranked ground-truth
  item; ``medr = floor(median(r)) + 1``, ``meanr = mean(r) + 1``.
- AP, with scikit-learn's ``average_precision_score`` semantics (a threshold per distinct
  score, so tied candidates share one precision):
  ``AP_q = (1/|G_q|) sum_{g in G_q} #{h in G_q : s_h >= s_g} / #{j : s_j >= s_g}``.
  Without ties this is the usual ``mean_k k / rank_k`` (1-based ranks).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from kitm.eval import _checks
from kitm.eval._views import DirectionView, check_direction
from kitm.eval.ranking import chunk_rows


@dataclass(frozen=True)
class GroundTruthRanks:
    """Where each query's ground truth landed.

    Attributes:
      ranks: int64 [num_queries, G], the 0-based rank of each ground-truth candidate
        (G = captions_per_image for i2t, 1 for t2i).
      average_precision: float64 [num_queries], AP of each query (scikit-learn semantics).
    """

    ranks: np.ndarray
    average_precision: np.ndarray


def ground_truth_ranks(
    sims: np.ndarray,
    *,
    captions_per_image: int = 5,
    direction: str = "i2t",
    chunk_size: int | None = None,
) -> GroundTruthRanks:
    """Ranks and AP of every query's ground truth in `sims` [num_images, num_captions]."""
    view = _view(sims, captions_per_image, direction)
    return _ground_truth_ranks(view, chunk_size)


def _view(sims: object, captions_per_image: int, direction: str) -> DirectionView:
    sims = _checks.as_matrix(sims, "sims")
    cpi = _checks.positive_int(captions_per_image, "captions_per_image")
    _checks.similarity_layout(sims, cpi)
    return DirectionView(check_direction(direction), sims, cpi)


def _ground_truth_ranks(view: DirectionView, chunk_size: int | None) -> GroundTruthRanks:
    num_queries, num_candidates = view.num_queries, view.num_candidates
    width = view.ground_truth_per_query
    ranks = np.empty((num_queries, width), dtype=np.int64)
    average_precision = np.empty(num_queries, dtype=np.float64)
    positions = np.arange(num_candidates)
    for rows in chunk_rows(num_queries, num_candidates * width, chunk_size):
        scores = view.scores(rows)
        truth = view.ground_truth(rows)
        truth_scores = np.take_along_axis(scores, truth, axis=1)  # [q, G]
        above = np.count_nonzero(scores[:, None, :] > truth_scores[:, :, None], axis=2)
        tied = scores[:, None, :] == truth_scores[:, :, None]
        num_tied = np.count_nonzero(tied, axis=2)  # the item itself included
        chunk_ranks = above.copy()
        query, slot = np.nonzero(num_tied > 1)
        if query.size:
            lower_index = positions[None, :] < truth[query, slot][:, None]
            chunk_ranks[query, slot] += np.count_nonzero(tied[query, slot] & lower_index, axis=1)
        ranks[rows] = chunk_ranks
        truth_at_or_above = np.count_nonzero(
            truth_scores[:, None, :] >= truth_scores[:, :, None], axis=2
        )
        average_precision[rows] = (truth_at_or_above / (above + num_tied)).mean(axis=1)
    return GroundTruthRanks(ranks, average_precision)


def recall_from_ranks(ranks: np.ndarray, ks: Iterable[int]) -> dict[int, float]:
    """R@K (Eq. 1) in percent: mean over queries of the share of ground truth ranked < K."""
    return {k: _checks.figure(100.0 * np.mean(ranks < k, axis=1)) for k in _checks.cutoffs(ks)}


def recall_vse_from_ranks(ranks: np.ndarray, ks: Iterable[int]) -> dict[int, float]:
    """R^V@K (Eq. 2) in percent: share of queries whose best ground truth is ranked < K."""
    best = ranks.min(axis=1)
    return {k: _checks.figure(100.0 * (best < k)) for k in _checks.cutoffs(ks)}


def median_rank(ranks: np.ndarray) -> float:
    """VSE++ medr: ``floor(median(best 0-based rank)) + 1``."""
    return float(np.floor(np.median(ranks.min(axis=1))) + 1)


def mean_rank(ranks: np.ndarray) -> float:
    """VSE++ meanr: ``mean(best 0-based rank) + 1``."""
    return float(ranks.min(axis=1).mean() + 1)


def recall_at_k(
    sims: np.ndarray,
    ks: Iterable[int] = (1, 5, 10),
    *,
    captions_per_image: int = 5,
    direction: str = "i2t",
    chunk_size: int | None = None,
) -> dict[int, float]:
    """R@K (information-retrieval recall, Eq. 1) in percent, keyed by K."""
    return _recall(recall_from_ranks, sims, ks, captions_per_image, direction, chunk_size)


def recall_vse_at_k(
    sims: np.ndarray,
    ks: Iterable[int] = (1, 5, 10),
    *,
    captions_per_image: int = 5,
    direction: str = "i2t",
    chunk_size: int | None = None,
) -> dict[int, float]:
    """R^V@K (VSE++ recall, Eq. 2) in percent, keyed by K."""
    return _recall(recall_vse_from_ranks, sims, ks, captions_per_image, direction, chunk_size)


def _recall(from_ranks, sims, ks, captions_per_image, direction, chunk_size) -> dict[int, float]:
    """`from_ranks` (R or R^V) of the ground-truth ranks of `sims` seen in `direction`, after checking `ks`."""
    view = _view(sims, captions_per_image, direction)
    ks = _checks.cutoffs(ks)
    _checks.cutoffs_within(ks, view.num_candidates, "ks", f"a {direction} query ranks")
    return from_ranks(_ground_truth_ranks(view, chunk_size).ranks, ks)


def mean_average_precision(
    sims: np.ndarray,
    *,
    captions_per_image: int = 5,
    direction: str = "i2t",
    chunk_size: int | None = None,
) -> float:
    """mAP in percent; image->text by default (each image has `captions_per_image` positives).

    Per query AP as scikit-learn's ``average_precision_score(is_ground_truth, scores)``
    (see the module docstring for the formula and tie handling); mean over queries.
    For t2i each caption has one positive and AP = 1 / #{images scoring >= its own}.
    """
    view = _view(sims, captions_per_image, direction)
    return _checks.figure(100.0 * _ground_truth_ranks(view, chunk_size).average_precision)


def retrieval_summary(ranks: GroundTruthRanks, ks: tuple[int, ...]) -> dict[str, object]:
    """The binary-relevance block of :func:`kitm.eval.evaluate` for one direction."""
    return {
        "recall": recall_from_ranks(ranks.ranks, ks),
        "recall_vse": recall_vse_from_ranks(ranks.ranks, ks),
        "medr": median_rank(ranks.ranks),
        "meanr": mean_rank(ranks.ranks),
        "map": _checks.figure(100.0 * ranks.average_precision),
    }

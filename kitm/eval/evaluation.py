"""``evaluate``: every retrieval figure of one similarity matrix, both directions.

:func:`evaluate_per_query` also returns the per-query values behind every figure that is a mean over queries
(R@K, R^V@K, mAP, NCS@K, SR@K, mAP@R, R-Precision), in percent; each figure of the result is exactly
``float(np.nanmean(values))`` of its per-query array (NaN marks a query a figure leaves out).
"""

from __future__ import annotations


import numpy as np

from kitm.eval import _checks
from kitm.eval._views import DIRECTIONS, DirectionView
from kitm.eval.map_at_r import map_at_r_from_ranks, ranked_precision
from kitm.eval.options import MetricOptions
from kitm.eval.ranking import chunk_rows
from kitm.eval.retrieval import _ground_truth_ranks, mean_rank, median_rank
from kitm.eval.semantic import (
    _semantic_pass,
    _semantic_relevant_images,
    check_semantic_cutoffs,
    check_semantic_parameters,
)


def evaluate(sims: np.ndarray, *, relevance: np.ndarray | None = None, options: MetricOptions | None = None,
             **settings) -> dict[str, dict[str, object]]:
    """Retrieval metrics of `sims` in both directions.

    Image i owns captions i*cpi .. i*cpi + cpi - 1. Ranks are 0-based internally, ties broken by
    ascending candidate index (:mod:`kitm.eval.ranking`). Formulas: :mod:`kitm.eval.retrieval`
    (R, R^V, medr, meanr, mAP) and :mod:`kitm.eval.semantic` (NCS, SR).

    Args:
      sims: model scores [num_images, num_captions] (higher = more similar).
      relevance: optional N [num_captions, num_images], N[c, i] = relevance of caption c to
        image i (CIDEr-D or SPICE; the NCS reference's orientation). Enables "ncs" and
        "semantic_recall". A transposed matrix is reported as such unless the matrix is
        square (captions_per_image=1), where the two orientations cannot be told apart.
      options, settings: :class:`kitm.eval.options.MetricOptions` (captions_per_image, ks, include_gt,
        semantic_threshold, semantic_depth, positive_threshold, chunk_size), as one object or as keywords.

    Returns:
      ``{"i2t": {...}, "t2i": {...}}``; each holds "recall" (R@K, Eq. 1) and "recall_vse"
      (R^V@K, Eq. 2) as {K: percent}, "medr", "meanr" (1-based, VSE++), "map" (percent; i2t
      with cpi positives per image, t2i with one), "map_at_r" and "r_precision" (percent), and
      with `relevance` "ncs" and "semantic_recall" as {K: percent}.

    Example:
      >>> sims = np.eye(2).repeat(2, axis=1)        # 2 images x 4 captions, cpi=2
      >>> evaluate(sims, captions_per_image=2, ks=(1,))["i2t"]["recall"]
      {1: 50.0}
    """
    return evaluate_per_query(sims, relevance=relevance, options=MetricOptions.of(options, settings))[0]


def evaluate_per_query(sims: np.ndarray, *, relevance: np.ndarray | None = None,
                       options: MetricOptions | None = None,
                       **settings) -> tuple[dict[str, dict[str, object]], dict[str, dict[str, object]]]:
    """(:func:`evaluate`'s result, the per-query values behind it); the same arguments.

    The second dict mirrors the first: ``{"i2t": {"recall_vse": {K: float64 [queries]}, "map": [queries],
    ...}}`` in percent (0 or 100 for R^V@K), queries in evaluation order (images for i2t, captions for
    t2i), NaN where a query is left out of the mean (mAP@R and R-Precision without a relevant item). medr
    and meanr, which are not means over queries, have none. Every figure is ``float(np.nanmean(values))``.
    """
    o = MetricOptions.of(options, settings).metric_options()
    captions_per_image, ks, include_gt = o.captions_per_image, o.ks, o.include_gt
    semantic_threshold, semantic_depth = o.semantic_threshold, o.semantic_depth
    positive_threshold, chunk_size = o.positive_threshold, o.chunk_size
    sims = _checks.as_matrix(sims, "sims")
    cpi = _checks.positive_int(captions_per_image, "captions_per_image")
    num_images, num_captions = _checks.similarity_layout(sims, cpi)
    ks = _checks.cutoffs(ks)
    _checks.cutoffs_within(ks, num_captions, "ks", "an i2t query ranks")
    _checks.cutoffs_within(ks, num_images, "ks", "a t2i query ranks")
    relevant_images = None
    if positive_threshold is not None:
        if relevance is None:
            raise ValueError(f"`positive_threshold`={positive_threshold} extends the positives by relevance; "
                             "give `relevance` too, or leave the threshold out (None).")
        positive_threshold = float(positive_threshold)
        if not np.isfinite(positive_threshold):
            raise ValueError(f"`positive_threshold` must be a finite number; got {positive_threshold}.")
    if relevance is not None:
        relevance = _checks.relevance_layout(relevance, num_images, num_captions)
        check_semantic_cutoffs(ks, num_images, num_captions, cpi, include_gt)
        threshold, depth = check_semantic_parameters(
            semantic_threshold,
            max(ks) if semantic_depth is None else semantic_depth,
            num_images,
            bool(include_gt),
        )
        relevant_images = _semantic_relevant_images(
            relevance, cpi, threshold, depth, bool(include_gt), chunk_size
        )

    results: dict[str, dict[str, object]] = {}
    per_query: dict[str, dict[str, object]] = {}
    for direction in DIRECTIONS:
        view = DirectionView(direction, sims, cpi, relevance)
        ranks = _ground_truth_ranks(view, chunk_size)
        values: dict[str, object] = {
            "recall": {k: 100.0 * np.mean(ranks.ranks < k, axis=1) for k in ks},
            "recall_vse": {k: 100.0 * (ranks.ranks.min(axis=1) < k) for k in ks},
            "map": 100.0 * ranks.average_precision,
        }
        if positive_threshold is None:  # the positives are the ground truth, whose ranks are known
            values["map_at_r"], values["r_precision"] = map_at_r_from_ranks(ranks.ranks)
        else:
            values["map_at_r"], values["r_precision"] = extended_map_at_r(view, positive_threshold, chunk_size)
        if relevance is not None:
            ncs, recall = _semantic_pass(
                view, ks, bool(include_gt), True, relevant_images, chunk_size
            )
            values["ncs"] = {k: 100.0 * ncs[k] for k in ks}
            values["semantic_recall"] = {k: 100.0 * recall[k] for k in ks}
        block = figures_of(values)
        block["medr"], block["meanr"] = median_rank(ranks.ranks), mean_rank(ranks.ranks)
        results[direction] = _ordered(block)
        per_query[direction] = values
    return results, per_query


_ORDER = ("recall", "recall_vse", "medr", "meanr", "map", "map_at_r", "r_precision", "ncs", "semantic_recall")


def _ordered(block: dict[str, object]) -> dict[str, object]:
    return {key: block[key] for key in sorted(block, key=lambda key: _ORDER.index(key) if key in _ORDER else 99)}


def figures_of(per_query: dict[str, object]) -> dict[str, object]:
    """Per-query values (nested dicts of arrays) -> their figures, each ``float(np.nanmean(values))``
    (NaN, not a warning, when every value is NaN)."""
    out: dict[str, object] = {}
    for key, value in per_query.items():
        out[key] = figures_of(value) if isinstance(value, dict) else _checks.figure(value)
    return out


def extended_map_at_r(view: DirectionView, positive_threshold: float | None,
                      chunk_size: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Per-query mAP@R and R-Precision (percent, NaN without a positive) of one direction: the positives of
    a query are its ground truth plus, when `positive_threshold` is given, every candidate whose relevance
    (``view.relevance_rows``) is >= the threshold."""
    num_queries, num_candidates = view.num_queries, view.num_candidates
    map_r = np.empty(num_queries)
    precision = np.empty(num_queries)
    for rows in chunk_rows(num_queries, num_candidates, chunk_size):
        scores = view.scores(rows)
        relevant = np.zeros(scores.shape, dtype=bool)
        np.put_along_axis(relevant, view.ground_truth(rows), True, axis=1)
        if positive_threshold is not None:
            relevant |= view.relevance_rows(rows) >= positive_threshold
        map_r[rows], precision[rows] = ranked_precision(scores, relevant)
    return 100.0 * map_r, 100.0 * precision

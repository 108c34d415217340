"""``evaluate``: every retrieval figure of one similarity matrix, both directions."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from kitm.eval import _checks
from kitm.eval._views import DIRECTIONS, DirectionView
from kitm.eval.retrieval import _ground_truth_ranks, retrieval_summary
from kitm.eval.semantic import (
    _semantic_pass,
    _semantic_relevant_images,
    check_semantic_cutoffs,
    check_semantic_parameters,
)


def evaluate(
    sims: np.ndarray,
    *,
    captions_per_image: int = 5,
    relevance: np.ndarray | None = None,
    ks: Iterable[int] = (1, 5, 10),
    include_gt: bool = False,
    semantic_threshold: int = 1,
    semantic_depth: int | None = None,
    chunk_size: int | None = None,
) -> dict[str, dict[str, object]]:
    """Retrieval metrics of `sims` in both directions.

    Image i owns captions i*cpi .. i*cpi + cpi - 1. Ranks are 0-based internally, ties broken by
    ascending candidate index (:mod:`kitm.eval.ranking`). Formulas: :mod:`kitm.eval.retrieval`
    (R, R^V, medr, meanr, mAP) and :mod:`kitm.eval.semantic` (NCS, SR).

    Args:
      sims: model scores [num_images, num_captions] (higher = more similar).
      captions_per_image: cpi.
      relevance: optional N [num_captions, num_images], N[c, i] = relevance of caption c to
        image i (CIDEr-D or SPICE; the NCS reference's orientation). Enables "ncs" and
        "semantic_recall". A transposed matrix is reported as such unless the matrix is
        square (captions_per_image=1), where the two orientations cannot be told apart.
      ks: cut-offs K.
      include_gt: NCS and SR keep each query's own ground truth (reference ``include_anns``).
        R, R^V, medr, meanr and mAP always rank every candidate.
      semantic_threshold: m of SR, the number of most relevant images that form the extended
        ground truth (reference ``threshold``, default 1).
      semantic_depth: per-caption list length in SR's aggregation; default max(ks), as the
        reference (which uses its last recall cut-off).
      chunk_size: queries per chunk (default: sized to about 4M matrix elements).

    Returns:
      ``{"i2t": {...}, "t2i": {...}}``; each holds "recall" (R@K, Eq. 1) and "recall_vse"
      (R^V@K, Eq. 2) as {K: percent}, "medr", "meanr" (1-based, VSE++), "map" (percent; i2t
      with cpi positives per image, t2i with one), and with `relevance` "ncs" and
      "semantic_recall" as {K: percent}.

    Example:
      >>> sims = np.eye(2).repeat(2, axis=1)        # 2 images x 4 captions, cpi=2
      >>> evaluate(sims, captions_per_image=2, ks=(1,))["i2t"]["recall"]
      {1: 50.0}
    """
    sims = _checks.as_matrix(sims, "sims")
    cpi = _checks.positive_int(captions_per_image, "captions_per_image")
    num_images, num_captions = _checks.similarity_layout(sims, cpi)
    ks = _checks.cutoffs(ks)
    _checks.cutoffs_within(ks, num_captions, "ks", "an i2t query ranks")
    _checks.cutoffs_within(ks, num_images, "ks", "a t2i query ranks")
    relevant_images = None
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
    for direction in DIRECTIONS:
        view = DirectionView(direction, sims, cpi, relevance)
        block = retrieval_summary(_ground_truth_ranks(view, chunk_size), ks)
        if relevance is not None:
            ncs, recall = _semantic_pass(
                view, ks, bool(include_gt), True, relevant_images, chunk_size
            )
            block["ncs"] = {k: float(100.0 * ncs[k].mean()) for k in ks}
            block["semantic_recall"] = {k: float(100.0 * recall[k].mean()) for k in ks}
        results[direction] = block
    return results

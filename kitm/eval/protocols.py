"""Evaluation protocols over a test set: k-fold averages (COCO 1K) and the full set (COCO 5K).

COCO 1K (VSE++ ``evalrank(fold5=True)``): the 5000 test images are cut into five folds of 1000
consecutive images with their 5000 captions; every figure is computed on each fold's
[1000, 5000] block of `sims` (and its [5000, 1000] block of `relevance`) and averaged over the
folds, medr and meanr included, as VSE++ does. COCO 5K: the whole matrix.

A relevance block keeps the values it was given: CIDEr computed with the 5K set's document
frequencies stays so (the NCS reference likewise slices its 5K matrix); pass per-fold matrices
through `relevance_folds` to use each fold's own idf instead.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kitm.eval import _checks
from kitm.eval.evaluation import evaluate


def fold_slices(num_images: int, folds: int, captions_per_image: int) -> list[tuple[slice, slice]]:
    """(image rows, caption columns) of each of `folds` consecutive, equal folds."""
    folds = _checks.positive_int(folds, "folds")
    if num_images % folds:
        raise ValueError(f"{num_images} images cannot be split into {folds} equal folds.")
    size = num_images // folds
    return [
        (
            slice(f * size, (f + 1) * size),
            slice(f * size * captions_per_image, (f + 1) * size * captions_per_image),
        )
        for f in range(folds)
    ]


def average_results(results: Sequence[object]) -> object:
    """Element-wise mean of equally shaped nested dicts of numbers."""
    first = results[0]
    if isinstance(first, dict):
        return {key: average_results([r[key] for r in results]) for key in first}
    return float(np.mean([float(r) for r in results]))


def evaluate_folds(
    sims: np.ndarray,
    *,
    folds: int = 5,
    captions_per_image: int = 5,
    relevance: np.ndarray | None = None,
    relevance_folds: Sequence[np.ndarray] | None = None,
    **evaluate_kwargs: object,
) -> dict[str, object]:
    """:func:`kitm.eval.evaluate` on each of `folds` consecutive folds, and their mean.

    Args:
      sims: [num_images, num_captions].
      folds: number of folds; num_images must be divisible by it.
      relevance: [num_captions, num_images], sliced into the folds' diagonal blocks.
      relevance_folds: alternatively, one [fold captions, fold images] matrix per fold.
      **evaluate_kwargs: passed to ``evaluate`` (ks, include_gt, semantic_threshold, ...).

    Returns:
      {"mean": averaged results, "folds": [results of each fold]}.
    """
    sims = _checks.as_matrix(sims, "sims")
    cpi = _checks.positive_int(captions_per_image, "captions_per_image")
    num_images, num_captions = _checks.similarity_layout(sims, cpi)
    slices = fold_slices(num_images, folds, cpi)
    if relevance is not None and relevance_folds is not None:
        raise ValueError("give `relevance` or `relevance_folds`, not both.")
    if relevance is not None:
        relevance = _checks.relevance_layout(relevance, num_images, num_captions)
    if relevance_folds is not None and len(relevance_folds) != len(slices):
        raise ValueError(
            f"`relevance_folds` holds {len(relevance_folds)} matrices; expected one per fold "
            f"({len(slices)})."
        )
    per_fold = []
    for f, (images, captions) in enumerate(slices):
        if relevance is not None:
            block = relevance[captions, images]
        elif relevance_folds is not None:
            block = relevance_folds[f]
        else:
            block = None
        per_fold.append(
            evaluate(
                sims[images, captions],
                captions_per_image=cpi,
                relevance=block,
                **evaluate_kwargs,
            )
        )
    return {"mean": average_results(per_fold), "folds": per_fold}


def evaluate_coco_protocols(
    sims: np.ndarray,
    *,
    captions_per_image: int = 5,
    relevance: np.ndarray | None = None,
    fold_size: int = 1000,
    **evaluate_kwargs: object,
) -> dict[str, object]:
    """COCO 1K (mean over the folds of `fold_size` images) and COCO 5K (the whole set).

    Args:
      sims: [5 * fold_size, 5 * fold_size * captions_per_image] (5000 x 25000 for COCO).
      relevance: [num_captions, num_images], optional.
      fold_size: images per 1K fold (1000 for COCO; smaller for tests).
      **evaluate_kwargs: passed to :func:`kitm.eval.evaluate`.

    Returns:
      {"1k": averaged results over the folds, "5k": results on the whole set}.
    """
    sims = _checks.as_matrix(sims, "sims")
    fold_size = _checks.positive_int(fold_size, "fold_size")
    if sims.shape[0] != 5 * fold_size:
        raise ValueError(
            f"`sims` has {sims.shape[0]} images; the COCO protocols need 5 folds of "
            f"fold_size={fold_size}, i.e. {5 * fold_size} images."
        )
    kwargs = dict(captions_per_image=captions_per_image, relevance=relevance, **evaluate_kwargs)
    return {
        "1k": evaluate_folds(sims, folds=5, **kwargs)["mean"],
        "5k": evaluate(sims, **kwargs),
    }

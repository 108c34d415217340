"""ECCV Caption figures for a COCO Karpathy 5K test similarity matrix, by the ``eccv-caption`` package's own scorer.

ECCV Caption (Chun et al., "ECCV Caption: Correcting False Negatives by Collecting Machine-and-Human-verified
Image-Caption Associations for MS-COCO", ECCV 2022) extends the positives of COCO's Karpathy 5K test split. Its
package (PyPI ``eccv-caption``, MIT) ships the positives offline and scores ranked id lists with
``eccv_caption.Metrics.compute_all_metrics``: ECCV mAP@R, R-Precision and R@1, CxC R@K, COCO 1K and 5K R@K.

:func:`eccv_caption_metrics` ranks a [5000, 25000] image-by-caption matrix with kitm's ranking rule (descending
score, ties by ascending index) and hands the package the ranked COCO ids:

- rows are COCO image ids, columns COCO caption (annotation) ids. By default they are the package's own test
  order: columns ``Metrics().coco_ids`` (25,000 caption ids, five per image, image by image) and rows the image of
  every fifth of them, which is also kitm's layout (image i owns captions 5i .. 5i+4). Other orders are given as
  `image_ids` and `caption_ids` and must keep that layout;
- each query's list is its top L candidates (L = the largest of max(ks) and the most positives any ECCV query
  has, so that mAP@R and R-Precision see ranks 1 .. R) followed by the top max(ks) candidates of its COCO 1K fold
  (the package's folds of 1,000 images) that are not among them: the package's COCO 1K recall filters the list to
  the fold's items, and this list gives it exactly the fold's own top max(ks), in rank order.

Figures are returned in percent, ``{"eccv_map_at_r": {"i2t": .., "t2i": ..}, "eccv_rprecision": ..., "eccv_r1":
..., "cxc_r1": ..., "coco_1k_r1": ..., "coco_5k_r1": ..., ...}`` (the package's names). mAP@R and R-Precision
are the quantities of :mod:`kitm.eval.map_at_r`; ECCV Caption averages them over its annotated queries only
(1,261 query images, 1,332 query captions in eccv-caption 0.1.0), and its R of an image query counts every listed
positive, two captions outside the 5K test split included. These figures are not in the report's ``flat`` block
nor in its per-query file: the package gives means only.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from collections.abc import Iterable

import numpy as np

from kitm.eval import _checks
from kitm.eval.ranking import chunk_rows, top_k_indices

NUM_IMAGES = 5000
CAPTIONS_PER_IMAGE = 5
COCO_1K_FOLDS = 5
TARGET_METRICS = ("eccv_map_at_r", "eccv_rprecision", "eccv_r1", "coco_1k_recalls", "coco_5k_recalls",
                  "cxc_recalls")


class EccvCaptionUnavailable(RuntimeError):
    """The eccv-caption package is not installed."""


def load_metrics():
    """``eccv_caption.Metrics()`` (its bundled positives), or EccvCaptionUnavailable naming the package."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # it warns when the optional ujson is missing
            from eccv_caption import Metrics
    except ImportError as error:
        raise EccvCaptionUnavailable(f"--eccv_caption needs the eccv-caption package (pip install "
                                     f"eccv-caption==0.1.0): {error}") from None
    return Metrics()


def package_ids(metrics) -> tuple[np.ndarray, np.ndarray]:
    """(image ids [5000], caption ids [25000]) of the package's test order (module docstring)."""
    caption_ids = np.asarray(metrics.coco_ids, dtype=np.int64)
    owner = metrics.coco_gts["t2i"]
    image_ids = np.array([owner[int(c)][0] for c in caption_ids[::CAPTIONS_PER_IMAGE]], dtype=np.int64)
    return image_ids, caption_ids


def _check_ids(metrics, image_ids: np.ndarray, caption_ids: np.ndarray) -> None:
    if image_ids.shape != (NUM_IMAGES,) or caption_ids.shape != (NUM_IMAGES * CAPTIONS_PER_IMAGE,):
        raise ValueError(f"ECCV Caption scores the COCO Karpathy 5K test split: expected {NUM_IMAGES} image ids and "
                         f"{NUM_IMAGES * CAPTIONS_PER_IMAGE} caption ids; got {image_ids.shape[0]} and "
                         f"{caption_ids.shape[0]}.")
    owner = metrics.coco_gts["t2i"]
    unknown = [int(c) for c in caption_ids if int(c) not in owner]
    if unknown:
        raise ValueError(f"{len(unknown)} caption ids are not in the Karpathy 5K test split (first: {unknown[0]}).")
    owners = np.array([owner[int(c)][0] for c in caption_ids], dtype=np.int64)
    wrong = np.flatnonzero(owners != np.repeat(image_ids, CAPTIONS_PER_IMAGE))
    if wrong.size:
        c = int(wrong[0])
        raise ValueError(f"caption column {c} (COCO caption id {int(caption_ids[c])}) belongs to image "
                         f"{int(owners[c])}, but row {c // CAPTIONS_PER_IMAGE} is image "
                         f"{int(image_ids[c // CAPTIONS_PER_IMAGE])}: image i must own columns 5i .. 5i+4.")
    if len(set(image_ids.tolist())) != NUM_IMAGES:
        raise ValueError("the image ids repeat: each of the 5000 test images must be one row.")


def _ranked_lists(scores: np.ndarray, depth: int, fold_depth: int, query_fold: np.ndarray,
                  candidate_fold: np.ndarray) -> list[np.ndarray]:
    """Per query: its top `depth` candidates, then the top `fold_depth` of its fold not already listed."""
    top = np.empty((scores.shape[0], depth), dtype=np.int64)
    for rows in chunk_rows(scores.shape[0], scores.shape[1]):
        top[rows] = top_k_indices(scores[rows], depth)
    lists: list[np.ndarray] = [np.empty(0, np.int64)] * scores.shape[0]
    for fold in np.unique(query_fold):
        queries = np.flatnonzero(query_fold == fold)
        candidates = np.flatnonzero(candidate_fold == fold)
        in_fold = candidates[top_k_indices(scores[np.ix_(queries, candidates)], fold_depth)]
        for q, fold_best in zip(queries, in_fold):
            head = top[q]
            lists[q] = np.concatenate([head, fold_best[~np.isin(fold_best, head)]])
    return lists


def eccv_caption_metrics(sims: np.ndarray, *, image_ids: np.ndarray | None = None,
                         caption_ids: np.ndarray | None = None, ks: Iterable[int] = (1, 5, 10),
                         metrics=None, progress: bool = False) -> dict[str, dict[str, float]]:
    """ECCV Caption, CxC and COCO 1K / 5K figures of `sims` [5000, 25000] in percent (module docstring).

    Args:
      sims: image-by-caption scores of the Karpathy 5K test split.
      image_ids, caption_ids: COCO ids of the rows and columns (default: the package's test order).
      ks: K of the CxC and COCO R@K.
      metrics: an ``eccv_caption.Metrics`` (default: a new one).
      progress: let the package draw its progress bars on stderr (its ECCV scorer draws them whatever its
        `verbose`; without `progress` its stderr is captured).
    """
    metrics = load_metrics() if metrics is None else metrics
    sims = _checks.as_matrix(sims, "sims")
    ks = _checks.cutoffs(ks)
    default_images, default_captions = package_ids(metrics)
    image_ids = default_images if image_ids is None else np.asarray(image_ids, dtype=np.int64)
    caption_ids = default_captions if caption_ids is None else np.asarray(caption_ids, dtype=np.int64)
    _check_ids(metrics, image_ids, caption_ids)
    if sims.shape != (image_ids.size, caption_ids.size):
        raise ValueError(f"`sims` has shape {sims.shape}; ECCV Caption scores [images, captions] = "
                         f"[{image_ids.size}, {caption_ids.size}] (the Karpathy 5K test split).")
    # The package's COCO 1K folds: 5,000 consecutive caption ids of its order, and their images.
    position = {int(c): p for p, c in enumerate(default_captions)}
    caption_fold = np.array([position[int(c)] for c in caption_ids]) // (caption_ids.size // COCO_1K_FOLDS)
    image_fold = caption_fold[::CAPTIONS_PER_IMAGE]
    deepest = max(ks)
    depth = {direction: max(deepest, max(len(v) for v in metrics.eccv_gts[direction].values()))
             for direction in ("i2t", "t2i")}
    depth = {"i2t": min(caption_ids.size, depth["i2t"]), "t2i": min(image_ids.size, depth["t2i"])}
    i2t = _ranked_lists(sims, depth["i2t"], deepest, image_fold, caption_fold)
    t2i = _ranked_lists(np.ascontiguousarray(sims.T), depth["t2i"], deepest, caption_fold, image_fold)
    i2t_ids = {int(image_ids[q]): caption_ids[found].tolist() for q, found in enumerate(i2t)}
    t2i_ids = {int(caption_ids[q]): image_ids[found].tolist() for q, found in enumerate(t2i)}
    quiet = contextlib.nullcontext() if progress else contextlib.redirect_stderr(io.StringIO())
    with quiet:
        scores = metrics.compute_all_metrics(i2t_ids, t2i_ids, target_metrics=TARGET_METRICS, Ks=ks, verbose=False)
    return {name: {direction: 100.0 * float(value) for direction, value in figures.items()}
            for name, figures in sorted(scores.items())}


def format_eccv(figures: dict[str, dict[str, float]]) -> str:
    """A table of :func:`eccv_caption_metrics`' figures."""
    lines = ["ECCV Caption (eccv-caption's scorer; percent)", f"  {'':16s} {'i2t':>8s} {'t2i':>8s}"]
    for name, values in figures.items():
        lines.append(f"  {name:16s} {values.get('i2t', float('nan')):8.2f} {values.get('t2i', float('nan')):8.2f}")
    return "\n".join(lines)

"""Graded-relevance retrieval metrics: NCS@K and semantic recall SR@K.

Both come from Biten et al., "Is an image worth five sentences?" (WACV 2022) and
follow its reference implementation (github.com/furkanbiten/ncs_metric, ``metric.py``, class
``Metric``) wherever the paper leaves a choice.

`relevance` is N [num_captions, num_images]: N[c, i] = phi(G_i, c), the captioning metric
(CIDEr-D or SPICE) of caption c against image i's reference captions (paper Eq. 3, stored with
rows captions as the reference stores it). Image i owns captions i*cpi .. i*cpi + cpi - 1.

**Removal** (`include_gt=False`, the reference's default ``include_anns=False``): for an i2t query
image i its own cpi captions are removed from the model's ranking, from the ideal ranking and
from the extended ground truth; for a t2i query caption c its own image is removed likewise.
With ``include_gt=True`` nothing is removed.

**NCS@K** (Eq. 5 as ``Metric.NCS`` and ``calculate_ranks`` compute it):
``NCS_q@K = mean_{j in top K by the model} N_q[j] / (mean_{l in top K by N_q itself} N_q[l] + 1e-10)``,
mean over queries, times 100. N_q is N[:, i] for query image i and N[c, :] for query caption c.
The denominator holds the K largest values of N_q, so it does not depend on tie order.

**SR@K** (Eq. 4 with the reference's ``get_intersection``/``recall``/``hard``, recall type
``"recall"``, its default): the relevant set of image i is the `threshold` (the reference's
``threshold``, m, default 1) images ranked highest by
``A_i[j] = sum_{c owned by i} N[c, j] * 1{j among the `depth` highest of N[c, :]}``
over the union of those per-caption lists (the reference takes ``depth`` = its last recall
threshold, i.e. max(ks)); image i itself is dropped from that list unless ``include_gt``.
i2t: the relevant captions are all captions of those m images; t2i, query caption c: the m
images of c's image. ``SR_q@K = |relevant ∩ top K| / (m * cpi)`` for i2t and ``/ m`` for t2i
(Eq. 4; the reference divides by that nominal size even if fewer than m images qualify),
mean over queries, times 100. With m = 1 the t2i figure is the any-hit recall the reference
uses there.

**Ties**: kitm ranks by descending score with ties by ascending index (model ranking, per-caption
top-`depth` lists, and the order of A_i). The reference uses ``np.argsort(x)[::-1]`` (tie order
unspecified) and orders tied A_i values by first appearance; only exact ties are affected.
Where the reference would crash (image i absent from the union of its own captions' lists with
``include_anns=False``), kitm simply has nothing to remove.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from kitm.eval import _checks
from kitm.eval._views import DirectionView, check_direction
from kitm.eval.ranking import chunk_rows, top_k_indices, top_k_values

# Added to the ideal mean, as the reference does, so that an all-zero ideal list gives 0.
NCS_EPSILON = 1e-10


def semantic_relevant_images(
    relevance: np.ndarray,
    *,
    captions_per_image: int = 5,
    threshold: int = 1,
    depth: int = 10,
    include_gt: bool = False,
    chunk_size: int | None = None,
) -> np.ndarray:
    """The extended ground truth of SR: for each image, its `threshold` most relevant images.

    Args:
      relevance: N [num_captions, num_images].
      captions_per_image: cpi.
      threshold: m, how many images extend each image's ground truth.
      depth: how many images of each caption's relevance row enter the aggregate A_i
        (module docstring; the reference uses its largest recall cut-off).
      include_gt: keep image i in its own list (the reference's ``include_anns``).

    Returns:
      int64 [num_images, threshold], most relevant first; -1 where fewer than `threshold`
      images qualify (possible only when `depth` is small).
    """
    relevance = _checks.as_matrix(relevance, "relevance")
    cpi = _checks.positive_int(captions_per_image, "captions_per_image")
    num_captions, num_images = relevance.shape
    if num_captions != num_images * cpi:
        raise ValueError(
            f"`relevance` has shape {relevance.shape}; with captions_per_image={cpi} expected "
            f"[num_images * {cpi}, num_images] (rows captions, columns images)."
        )
    threshold, depth = check_semantic_parameters(threshold, depth, num_images, include_gt)
    return _semantic_relevant_images(relevance, cpi, threshold, depth, include_gt, chunk_size)


def check_semantic_parameters(
    threshold: object, depth: object, num_images: int, include_gt: bool
) -> tuple[int, int]:
    """Validate SR's m (`semantic_threshold`) and aggregation depth (`semantic_depth`)."""
    threshold = _checks.positive_int(threshold, "semantic_threshold")
    depth = _checks.positive_int(depth, "semantic_depth")
    available = num_images if include_gt else num_images - 1
    if threshold > available:
        raise ValueError(
            f"`semantic_threshold`={threshold} exceeds the {available} images that can extend "
            "an image's ground truth."
        )
    if depth > num_images:
        raise ValueError(f"`semantic_depth`={depth} exceeds the {num_images} images.")
    return threshold, depth


def _semantic_relevant_images(
    relevance: np.ndarray,
    cpi: int,
    threshold: int,
    depth: int,
    include_gt: bool,
    chunk_size: int | None,
) -> np.ndarray:
    num_images = relevance.shape[1]
    out = np.empty((num_images, threshold), dtype=np.int64)
    for images in chunk_rows(num_images, num_images * cpi, chunk_size):
        count = images.stop - images.start
        rows = np.asarray(relevance[images.start * cpi : images.stop * cpi], dtype=np.float64)
        best = top_k_indices(rows, depth)
        contribution = np.zeros_like(rows)
        np.put_along_axis(contribution, best, np.take_along_axis(rows, best, axis=1), axis=1)
        listed = np.zeros(rows.shape, dtype=bool)
        np.put_along_axis(listed, best, True, axis=1)
        # Summing the cpi rows in caption order adds the same terms in the same order as the
        # reference's running dictionary (the zeros of unlisted pairs change nothing).
        aggregate = contribution.reshape(count, cpi, num_images).sum(axis=1)
        aggregate[~listed.reshape(count, cpi, num_images).any(axis=1)] = -np.inf
        if not include_gt:
            aggregate[np.arange(count), np.arange(images.start, images.stop)] = -np.inf
        chosen = top_k_indices(aggregate, threshold)
        valid = np.isfinite(np.take_along_axis(aggregate, chosen, axis=1))
        out[images] = np.where(valid, chosen, -1)
    return out


def _semantic_pass(
    view: DirectionView,
    ks: tuple[int, ...],
    include_gt: bool,
    with_ncs: bool,
    relevant_images: np.ndarray | None,
    chunk_size: int | None,
) -> tuple[dict[int, np.ndarray], dict[int, np.ndarray]]:
    """Per-query NCS and SR values (fractions) for every K, in one ranking pass."""
    num_queries, num_candidates = view.num_queries, view.num_candidates
    deepest = max(ks)
    ncs = {k: np.empty(num_queries) for k in ks} if with_ncs else {}
    recall = {k: np.empty(num_queries) for k in ks} if relevant_images is not None else {}
    if relevant_images is not None:
        per_image = view.captions_per_image if view.direction == "i2t" else 1
        nominal = relevant_images.shape[1] * per_image
    for rows in chunk_rows(num_queries, num_candidates, chunk_size):
        scores = view.scores(rows)
        truth = view.ground_truth(rows)
        if not include_gt:
            scores = np.array(scores, copy=True)
            np.put_along_axis(scores, truth, -np.inf, axis=1)
        retrieved = top_k_indices(scores, deepest)
        if with_ncs:
            values = view.relevance_rows(rows)
            gained = np.take_along_axis(values, retrieved, axis=1)
            if not include_gt:
                np.put_along_axis(values, truth, -np.inf, axis=1)
            ideal = top_k_values(values, deepest)
            for k in ks:
                ncs[k][rows] = gained[:, :k].mean(axis=1) / (ideal[:, :k].mean(axis=1) + NCS_EPSILON)
        if relevant_images is not None:
            wanted = relevant_images[view.query_images(rows)]  # [q, m], -1 never matches
            found = view.candidate_images(retrieved)
            hits = (found[:, :, None] == wanted[:, None, :]).any(axis=2)
            cumulative = np.cumsum(hits, axis=1)
            for k in ks:
                recall[k][rows] = cumulative[:, k - 1] / nominal
    return ncs, recall


def _prepare(
    sims: object,
    relevance: object,
    ks: Iterable[int],
    captions_per_image: int,
    include_gt: bool,
) -> tuple[np.ndarray, np.ndarray, int, tuple[int, ...]]:
    sims = _checks.as_matrix(sims, "sims")
    cpi = _checks.positive_int(captions_per_image, "captions_per_image")
    num_images, num_captions = _checks.similarity_layout(sims, cpi)
    relevance = _checks.relevance_layout(relevance, num_images, num_captions)
    ks = _checks.cutoffs(ks)
    check_semantic_cutoffs(ks, num_images, num_captions, cpi, include_gt)
    return sims, relevance, cpi, ks


def check_semantic_cutoffs(
    ks: tuple[int, ...], num_images: int, num_captions: int, cpi: int, include_gt: bool
) -> None:
    """K may not exceed what a query can rank once its ground truth is removed."""
    removed = "" if include_gt else " once its ground truth is removed"
    _checks.cutoffs_within(
        ks, num_captions - (0 if include_gt else cpi), "ks", "an i2t query ranks" + removed
    )
    _checks.cutoffs_within(
        ks, num_images - (0 if include_gt else 1), "ks", "a t2i query ranks" + removed
    )


def ncs_score(
    sims: np.ndarray,
    relevance: np.ndarray,
    ks: Iterable[int] = (1, 5, 10),
    *,
    captions_per_image: int = 5,
    include_gt: bool = False,
    direction: str = "i2t",
    chunk_size: int | None = None,
) -> dict[int, float]:
    """NCS@K (Eq. 5, reference semantics; module docstring) in percent, keyed by K.

    Args:
      sims: model scores [num_images, num_captions].
      relevance: N [num_captions, num_images].
    """
    sims, relevance, cpi, ks = _prepare(sims, relevance, ks, captions_per_image, include_gt)
    view = DirectionView(check_direction(direction), sims, cpi, relevance)
    ncs, _ = _semantic_pass(view, ks, include_gt, True, None, chunk_size)
    return {k: _checks.figure(100.0 * ncs[k]) for k in ks}


def semantic_recall(
    sims: np.ndarray,
    relevance: np.ndarray,
    ks: Iterable[int] = (1, 5, 10),
    *,
    captions_per_image: int = 5,
    threshold: int = 1,
    depth: int | None = None,
    include_gt: bool = False,
    direction: str = "i2t",
    chunk_size: int | None = None,
) -> dict[int, float]:
    """SR@K (Eq. 4, reference semantics; module docstring) in percent, keyed by K.

    `threshold` is m; `depth` defaults to max(ks), as the reference's ``TOP_K``.
    """
    sims, relevance, cpi, ks = _prepare(sims, relevance, ks, captions_per_image, include_gt)
    relevant = semantic_relevant_images(
        relevance,
        captions_per_image=cpi,
        threshold=threshold,
        depth=max(ks) if depth is None else depth,
        include_gt=include_gt,
        chunk_size=chunk_size,
    )
    view = DirectionView(check_direction(direction), sims, cpi, relevance)
    _, recall = _semantic_pass(view, ks, include_gt, False, relevant, chunk_size)
    return {k: _checks.figure(100.0 * recall[k]) for k in ks}

"""N-way retrieval R@1 (Thomas & Kovashka, Section 4.2): each query's true partner
competes with N - 1 distractors drawn at random from the test set's other items of the target
modality; R@1 is the share of queries whose partner scores highest.

Queries are pairs (image i, caption c) with c owned by i, one per caption. i2t: image i ranks
caption c against N - 1 captions drawn from those not owned by i; t2i: caption c ranks image i
against N - 1 other images. Distractors are drawn uniformly without replacement, independently
per query, from ``numpy.random.default_rng(seed)``. A distractor that ties the partner counts
as beating it (no credit for a tie). With `repeats` > 1 the figure is averaged over that many
independent draws.
"""

from __future__ import annotations

import numpy as np

from kitm.eval import _checks
from kitm.eval.ranking import chunk_rows

# Above this k * k / population ratio, random keys + argpartition beat Floyd's O(k^2) sampler.
_FLOYD_LIMIT = 4.0


def sample_without_replacement(
    rng: np.random.Generator, population: int, k: int, size: int
) -> np.ndarray:
    """`size` independent uniform k-subsets of ``range(population)``: int64 [size, k].

    Floyd's algorithm run for all rows at once (loop over the k draws, not over rows), or for
    large k, the k smallest of `population` uniform keys per row in fixed-size chunks; either
    way the result depends only on the generator's state, not on any chunk size.
    """
    if not 0 <= k <= population:
        raise ValueError(f"cannot draw {k} distinct items from {population}.")
    out = np.empty((size, k), dtype=np.int64)
    if k == 0:
        return out
    if k * k <= _FLOYD_LIMIT * population:
        for step, upper in enumerate(range(population - k, population)):
            draw = rng.integers(0, upper + 1, size=size)
            taken = (out[:, :step] == draw[:, None]).any(axis=1)
            out[:, step] = np.where(taken, upper, draw)
        return out
    for rows in chunk_rows(size, population, 256):
        keys = rng.random((rows.stop - rows.start, population))
        out[rows] = np.argpartition(keys, k - 1, axis=1)[:, :k]
    return out


def n_way_recall(sims: np.ndarray | None, n: int, **options) -> dict[str, float]:
    """N-way R@1 in percent for both directions: {"i2t": ..., "t2i": ...}.

    The mean over queries of :func:`n_way_recall_per_query`, which takes the same arguments and documents them.
    """
    per_query = n_way_recall_per_query(sims, n, **options)
    return {direction: _checks.figure(values) for direction, values in per_query.items()}


def n_way_recall_per_query(
    sims: np.ndarray | None,
    n: int,
    *,
    image_embeddings: np.ndarray | None = None,
    text_embeddings: np.ndarray | None = None,
    captions_per_image: int = 1,
    seed: int = 0,
    repeats: int = 1,
) -> dict[str, np.ndarray]:
    """N-way R@1 of every query in percent, both directions: {"i2t": float64 [num_captions], "t2i": ...}.

    A query is a (caption, its image) pair, in caption order; its value is the share (in percent) of the
    `repeats` draws in which its partner beat the N - 1 distractors (0 or 100 with one draw).

    Give either `sims` [num_images, num_captions], or ``sims=None`` and both embedding matrices
    (scores are then their dot products, the cosine for unit rows, computed only for the
    sampled pairs): ``n_way_recall(None, 100, image_embeddings=x, text_embeddings=y)``.

    Args:
      n: N, candidates per query (the partner and N - 1 distractors); the paper uses 5, 20, 100.
      captions_per_image: image i owns captions i*cpi .. i*cpi + cpi - 1 (1 for paired data).
      seed: seed of ``numpy.random.default_rng``.
      repeats: independent draws to average over.
    """
    cpi = _checks.positive_int(captions_per_image, "captions_per_image")
    n = _checks.positive_int(n, "n")
    repeats = _checks.positive_int(repeats, "repeats")
    sims, image_embeddings, text_embeddings, num_images, num_captions = _checked_scores(
        sims, image_embeddings, text_embeddings, cpi)
    distractors = n - 1
    if distractors > num_captions - cpi or distractors > num_images - 1:
        raise ValueError(
            f"`n`={n} needs {distractors} distractors, but a query has only "
            f"{num_captions - cpi} other captions and {num_images - 1} other images."
        )
    score = _pair_scorer(sims, image_embeddings, text_embeddings)

    rng = np.random.default_rng(seed)
    captions = np.arange(num_captions)
    owners = captions // cpi
    totals = {"i2t": np.zeros(num_captions), "t2i": np.zeros(num_captions)}
    for _ in range(repeats):
        # Draw from the candidates that are not the query's own, then shift past the gap.
        drawn = sample_without_replacement(rng, num_captions - cpi, distractors, num_captions)
        other_captions = drawn + cpi * (drawn >= (owners * cpi)[:, None])
        drawn = sample_without_replacement(rng, num_images - 1, distractors, num_captions)
        other_images = drawn + (drawn >= owners[:, None])
        partner = score(owners[:, None], captions[:, None])[:, 0]
        for direction, rival in (
            ("i2t", score(owners[:, None], other_captions)),
            ("t2i", score(other_images, captions[:, None])),
        ):
            won = np.all(rival < partner[:, None], axis=1)
            totals[direction] += won
    return {direction: 100.0 * total / repeats for direction, total in totals.items()}


def _checked_scores(sims, image_embeddings, text_embeddings, cpi: int):
    """Either `sims` or both embedding matrices, checked -> (sims, image_embeddings, text_embeddings, num_images,
    num_captions), the ones not given None."""
    if sims is not None:
        if image_embeddings is not None or text_embeddings is not None:
            raise ValueError("give either `sims` or `image_embeddings` and `text_embeddings`, not both.")
        sims = _checks.as_matrix(sims, "sims")
        num_images, num_captions = _checks.similarity_layout(sims, cpi)
    else:
        if image_embeddings is None or text_embeddings is None:
            raise ValueError("give `sims`, or both `image_embeddings` and `text_embeddings`.")
        image_embeddings = _checks.as_matrix(image_embeddings, "image_embeddings")
        text_embeddings = _checks.as_matrix(text_embeddings, "text_embeddings")
        if image_embeddings.shape[1] != text_embeddings.shape[1]:
            raise ValueError(
                f"`image_embeddings` has width {image_embeddings.shape[1]} and `text_embeddings` "
                f"{text_embeddings.shape[1]}; they must match."
            )
        num_images, num_captions = image_embeddings.shape[0], text_embeddings.shape[0]
        if num_captions != num_images * cpi:
            raise ValueError(
                f"{num_images} images with captions_per_image={cpi} need {num_images * cpi} text "
                f"embeddings; got {num_captions}."
            )
    return sims, image_embeddings, text_embeddings, num_images, num_captions


def _pair_scorer(sims, image_embeddings, text_embeddings):
    """`score(images, captions)`: the scores of (images[q, j], captions[q, j]) pairs, read from `sims`, or without
    it the dot products of the embeddings, computed only for those pairs."""

    def score(images: np.ndarray, captions: np.ndarray) -> np.ndarray:
        """Scores of (images[q, j], captions[q, j]) pairs, broadcast to one [Q, width] array."""
        images, captions = np.broadcast_arrays(images, captions)
        if sims is not None:
            return sims[images, captions]
        # Embedding gathers are [rows, width, D]; chunk the queries to bound them.
        width = images.shape[1] * image_embeddings.shape[1]
        out = np.empty(images.shape, dtype=np.result_type(image_embeddings, text_embeddings))
        for rows in chunk_rows(images.shape[0], width):
            out[rows] = np.einsum(
                "qjd,qjd->qj", image_embeddings[images[rows]], text_embeddings[captions[rows]]
            )
        return out

    return score

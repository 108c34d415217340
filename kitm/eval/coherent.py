"""Coherent Score CS@K (Zhou et al., adaptive ladder loss, Section III-D, Eq. 13).

For each query q, take the model's top K candidates (descending score, ties by ascending index,
as everywhere in :mod:`kitm.eval`) and compute Kendall's tau-b between the model's scores and
the relevance degrees of those K candidates:

    tau = (P - Q) / sqrt((P + Q + T) (P + Q + U))

P concordant, Q discordant pairs, T pairs tied only in the scores, U only in the relevance
(Eq. 13; equal to scipy's ``kendalltau(..., variant="b")``). CS@K is the mean over queries.
The paper uses one caption per image, CS@100 / CS@1000 on 1K sets and CS@500 / CS@5000 on 5K.

A query whose K relevance degrees (or K scores) are all equal has no defined tau (scipy returns
NaN). ``nan_policy="omit"`` (default) leaves such queries out of the mean, ``"propagate"``
makes the mean NaN, ``"raise"`` raises; :func:`coherent_score_per_query` gives the NaNs.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from kitm.eval import _checks
from kitm.eval.kendall import kendall_tau_b
from kitm.eval.ranking import chunk_rows, top_k_indices

_NAN_POLICIES = ("omit", "propagate", "raise")

# Queries per chunk for the tau-b computation: about 2.5M pairs of values at K=5000, a few
# tens of MB of temporaries.
_CHUNK_ELEMENTS = 1 << 21


def coherent_score_per_query(
    scores: np.ndarray,
    relevance: np.ndarray,
    ks: Iterable[int],
    *,
    chunk_size: int | None = None,
) -> dict[int, np.ndarray]:
    """tau-b of each query at each K: {K: float64 [queries]}, NaN where undefined.

    Args:
      scores: model scores [queries, candidates] (e.g. ``sims`` for image->text, ``sims.T``
        for text->image).
      relevance: relevance degrees [queries, candidates], same layout as `scores`.
      ks: cut-offs, each in [2, candidates].
    """
    scores = _checks.as_matrix(scores, "scores")
    relevance = _checks.as_matrix(relevance, "relevance")
    if scores.shape != relevance.shape:
        raise ValueError(
            f"`relevance` has shape {relevance.shape}; expected {scores.shape}, the shape of "
            "`scores` ([queries, candidates] for both)."
        )
    ks = _checks.cutoffs(ks)
    num_queries, num_candidates = scores.shape
    _checks.cutoffs_within(ks, num_candidates, "ks", "a query ranks")
    if min(ks) < 2:
        raise ValueError(f"`ks` must be >= 2 (tau-b needs two candidates); got {ks}.")
    deepest = max(ks)
    out = {k: np.empty(num_queries) for k in ks}
    if chunk_size is None:
        chunk_size = max(1, _CHUNK_ELEMENTS // max(deepest, num_candidates // 8))
    for rows in chunk_rows(num_queries, num_candidates, chunk_size):
        chunk_scores = scores[rows]
        best = top_k_indices(chunk_scores, deepest)
        ranked_scores = np.take_along_axis(chunk_scores, best, axis=1)
        ranked_relevance = np.take_along_axis(np.asarray(relevance[rows]), best, axis=1)
        for k in ks:
            out[k][rows] = kendall_tau_b(ranked_scores[:, :k], ranked_relevance[:, :k])
    return out


def coherent_score(
    scores: np.ndarray,
    relevance: np.ndarray,
    ks: Iterable[int],
    *,
    nan_policy: str = "omit",
    chunk_size: int | None = None,
) -> dict[int, float]:
    """CS@K: mean Kendall tau-b over queries, {K: value in [-1, 1]} (not percent, as the paper).

    Args:
      scores: model scores [queries, candidates].
      relevance: relevance degrees [queries, candidates] (call with transposes, or with
        ``sims.T`` and ``relevance``-as-[captions, images], for the other direction).
      ks: cut-offs, each in [2, candidates].
      nan_policy: what undefined queries do to the mean (module docstring).

    Example:
      >>> cs = coherent_score([[3., 2., 1.]], [[0.9, 0.1, 0.5]], ks=(3,))  # P=2, Q=1: 1/3
      >>> round(cs[3], 6)
      0.333333
    """
    if nan_policy not in _NAN_POLICIES:
        raise ValueError(f"`nan_policy` must be one of {_NAN_POLICIES}; got {nan_policy!r}.")
    per_query = coherent_score_per_query(scores, relevance, ks, chunk_size=chunk_size)
    result = {}
    for k, taus in per_query.items():
        undefined = np.isnan(taus)
        if undefined.any() and nan_policy == "raise":
            raise ValueError(
                f"CS@{k}: tau-b is undefined for {int(undefined.sum())} of {taus.size} queries "
                "(all K relevance degrees or all K scores equal); use nan_policy='omit'."
            )
        if nan_policy == "propagate" or undefined.all():
            result[k] = float(np.mean(taus))
        else:
            result[k] = _checks.figure(taus)  # the mean of the defined values
    return result

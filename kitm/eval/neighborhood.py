"""Neighbourhood preservation (Thomas & Kovashka, "Preserving semantic neighborhoods",
Section 4.3, Table 3).

For every item s, with Psi_Omega(s) its k nearest neighbours in the reference (text-only,
e.g. Doc2Vec or sentence-embedding) space and Psi_M(s) its k nearest neighbours among items of
the same modality in the learned space, both excluding s itself:

    NP = mean_s |Psi_M(s) ∩ Psi_Omega(s)| / |Psi_Omega(s)|,    k = 200 in the paper,

a fraction in [0, 1] as the paper's Table 3 reports it. For image items, pass as
`reference_embeddings` the reference-space embeddings of each image's paired text and as
`learned_embeddings` the learned image embeddings (the paper's "I" columns); for text items,
the texts' reference embeddings and their learned embeddings ("T").

Nearest = highest cosine similarity (``metric="cosine"``), or smallest Euclidean distance
(``metric="euclidean"``); ties at the k-th place go to the lower index. The paper uses
approximate nearest neighbours; this is the exact search.
"""

from __future__ import annotations

import numpy as np

from kitm.eval import _checks
from kitm.eval.ranking import chunk_rows, top_k_indices

_METRICS = ("cosine", "euclidean")


def nearest_neighbor_indices(
    embeddings: np.ndarray,
    k: int,
    *,
    metric: str = "cosine",
    chunk_size: int | None = None,
) -> np.ndarray:
    """The `k` nearest neighbours of every row, self excluded, nearest first: int64 [N, k]."""
    if metric not in _METRICS:
        raise ValueError(f"`metric` must be one of {_METRICS}; got {metric!r}.")
    embeddings = np.asarray(_checks.as_matrix(embeddings, "embeddings"), dtype=np.float64)
    count = embeddings.shape[0]
    k = _checks.positive_int(k, "k")
    if k > count - 1:
        raise ValueError(f"`k`={k} exceeds the {count - 1} other items of {count} embeddings.")
    if metric == "cosine":
        norms = np.linalg.norm(embeddings, axis=1)
        if np.any(norms == 0):
            raise ValueError(
                f"cosine neighbours need non-zero embeddings; row {int(np.argmin(norms))} is zero."
            )
        embeddings = embeddings / norms[:, None]
        offsets = np.zeros(count)
    else:
        # argmin |a - b|^2 = argmax (a.b - |b|^2 / 2): the |a|^2 term is constant per row.
        offsets = 0.5 * np.einsum("ij,ij->i", embeddings, embeddings)
    out = np.empty((count, k), dtype=np.int64)
    for rows in chunk_rows(count, count, chunk_size):
        closeness = embeddings[rows] @ embeddings.T - offsets[None, :]
        closeness[np.arange(rows.stop - rows.start), np.arange(rows.start, rows.stop)] = -np.inf
        out[rows] = top_k_indices(closeness, k)
    return out


def neighborhood_preservation(
    reference_embeddings: np.ndarray,
    learned_embeddings: np.ndarray,
    k: int = 200,
    *,
    metric: str = "cosine",
    chunk_size: int | None = None,
) -> float:
    """Mean share of each item's k reference-space neighbours that are also among its k
    learned-space neighbours (module docstring), in [0, 1].

    Args:
      reference_embeddings: [N, D_ref], row s = item s in the text-only reference space.
      learned_embeddings: [N, D], row s = the same item in the learned space.
      k: neighbourhood size (200 in the paper), at most N - 1.
    """
    reference = _checks.as_matrix(reference_embeddings, "reference_embeddings")
    learned = _checks.as_matrix(learned_embeddings, "learned_embeddings")
    if reference.shape[0] != learned.shape[0]:
        raise ValueError(
            f"`reference_embeddings` has {reference.shape[0]} rows and `learned_embeddings` "
            f"{learned.shape[0]}; both must hold the same N items in the same order."
        )
    before = nearest_neighbor_indices(reference, k, metric=metric, chunk_size=chunk_size)
    after = nearest_neighbor_indices(learned, k, metric=metric, chunk_size=chunk_size)
    # Each list holds distinct items, so in the sorted union a shared item is a repeated value.
    both = np.sort(np.concatenate([before, after], axis=1), axis=1)
    shared = np.count_nonzero(both[:, 1:] == both[:, :-1], axis=1)
    return float(np.mean(shared / k))

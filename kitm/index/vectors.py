"""The faiss index over an index's embeddings: exact inner products up to a size, HNSW above it, recall measured.

Embeddings are unit rows (kitm's SavedModels return normalised embeddings), so the inner product is the cosine the
model was trained on. Up to ``DEFAULT_EXACT_THRESHOLD`` rows a search scans every row (``IndexFlatIP``): one query
over 100,000 rows of 256 floats takes 5-8 ms on one core of the project's 2-core VM (2.5 ms at 50,000, 0.15 ms at
10,000, 15 ms at 200,000; benchmarks/bench_index_search.py measures it), which keeps a search page interactive with
nothing approximate. Above it an HNSW graph (Malkov & Yashunin 2018; faiss ``IndexHNSWFlat`` over inner products) answers in
well under a millisecond; its search breadth ``efSearch`` is doubled until the recall@10 of a sample of real queries
(the data's caption embeddings, or its image embeddings where it has no captions) against exact search reaches
``target_recall``, and the recall of the chosen breadth, measured on a second sample, is returned with the index so
that the index's manifest and the search page can state it.

The search app runs each query on one OpenMP thread (``faiss.omp_set_num_threads(1)``, set in the thread that
searches: the setting is per thread): on a loaded 2-core machine faiss's threads made a single exact query over
100,000 rows 4x slower (22 ms against 5.4).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from kitm.errors import KitmDataError

DEFAULT_EXACT_THRESHOLD = 100_000
DEFAULT_TARGET_RECALL = 0.95
RECALL_K = 10
_RECALL_SAMPLE = 500
_MAX_EF_SEARCH = 4096
_HNSW_M = 32
_EF_CONSTRUCTION = 80


@dataclasses.dataclass
class VectorIndex:
    """A built faiss index and how it searches.

    Attributes:
      index: the faiss index (``IndexFlatIP`` or ``IndexHNSWFlat`` over inner products).
      kind: "exact" or "hnsw".
      recall: measured recall@``recall_k`` against exact search (1.0 for exact).
      ef_search: HNSW's search breadth (None for exact).
      recall_queries: how many sampled queries measured the recall (0 for exact).
    """

    index: object
    kind: str
    recall: float
    ef_search: int | None = None
    recall_queries: int = 0
    recall_k: int = RECALL_K

    def describe(self) -> dict:
        return {"kind": self.kind, "recall_at_k": self.recall, "recall_k": self.recall_k,
                "ef_search": self.ef_search, "recall_queries": self.recall_queries}


def _faiss():
    import faiss

    return faiss


def _checked(embeddings: np.ndarray, what: str) -> np.ndarray:
    array = np.ascontiguousarray(np.asarray(embeddings, dtype=np.float32))
    if array.ndim != 2 or array.shape[0] < 1 or array.shape[1] < 1:
        raise KitmDataError(f"{what} must be a non-empty float32 matrix [N, D]; got shape {array.shape}.")
    if not np.isfinite(array).all():
        raise KitmDataError(f"{what} hold NaN or infinite values: the model's embeddings are broken.")
    return array


def exact_index(embeddings: np.ndarray):
    """An ``IndexFlatIP`` holding `embeddings` [N, D]."""
    faiss = _faiss()
    embeddings = _checked(embeddings, "embeddings")
    index = faiss.IndexFlatIP(embeddings.shape[1])
    index.add(embeddings)
    return index


def recall_at_k(found: np.ndarray, exact_scores: np.ndarray, found_scores: np.ndarray) -> float:
    """Share of the returned entries that belong to an exact top-k (ties count: a score at least the exact k-th)."""
    kth = exact_scores[:, -1:]
    return float(((found_scores >= kth - 1e-6) & (found >= 0)).sum()) / found.size


def build_vector_index(embeddings: np.ndarray, queries: np.ndarray | None = None, *,
                       exact_threshold: int = DEFAULT_EXACT_THRESHOLD, target_recall: float = DEFAULT_TARGET_RECALL,
                       seed: int = 0) -> VectorIndex:
    """The index over `embeddings` [N, D]: exact for N <= `exact_threshold`, else HNSW tuned on `queries`.

    Args:
      embeddings: the rows searched.
      queries: [Q, D] realistic queries for tuning and measuring HNSW's recall (default: `embeddings` themselves).
      exact_threshold: the largest N searched exactly.
      target_recall: the recall@10 HNSW's efSearch is raised to reach; when even efSearch=4096 does not reach it,
        the exact index is returned instead (an exact answer is never worse than asked for).
      seed: the samples of queries.
    """
    faiss = _faiss()
    embeddings = _checked(embeddings, "embeddings")
    if not 0.0 < float(target_recall) <= 1.0:
        raise ValueError(f"target_recall must be in (0, 1]; got {target_recall!r}.")
    if isinstance(exact_threshold, bool) or not isinstance(exact_threshold, (int, np.integer)) or exact_threshold < 0:
        raise ValueError(f"exact_threshold must be a non-negative integer; got {exact_threshold!r}.")
    exact = exact_index(embeddings)
    num_rows, dim = embeddings.shape
    if num_rows <= exact_threshold:
        return VectorIndex(exact, "exact", 1.0)
    queries = embeddings if queries is None else _checked(queries, "queries")
    if queries.shape[1] != dim:
        raise KitmDataError(f"queries have width {queries.shape[1]} but the embeddings {dim}.")
    k = min(RECALL_K, num_rows)
    rng = np.random.default_rng(seed)
    tune, check = (queries[rng.choice(len(queries), size=min(_RECALL_SAMPLE, len(queries)), replace=False)]
                   for _ in range(2))
    hnsw = faiss.IndexHNSWFlat(dim, _HNSW_M, faiss.METRIC_INNER_PRODUCT)
    hnsw.hnsw.efConstruction = _EF_CONSTRUCTION
    hnsw.add(embeddings)
    exact_tune, _ = exact.search(tune, k)
    ef = max(2 * k, 16)
    while True:
        hnsw.hnsw.efSearch = ef
        found_scores, found = hnsw.search(tune, k)
        if recall_at_k(found, exact_tune, found_scores) >= target_recall:
            break
        if 2 * ef > _MAX_EF_SEARCH:
            return VectorIndex(exact, "exact", 1.0)
        ef *= 2
    exact_check, _ = exact.search(check, k)
    found_scores, found = hnsw.search(check, k)
    return VectorIndex(hnsw, "hnsw", recall_at_k(found, exact_check, found_scores), ef_search=ef,
                       recall_queries=len(check), recall_k=k)


def write_index(index, path) -> None:
    """faiss's own file format (the caller renames the folder holding it into place)."""
    _faiss().write_index(index, str(path))


def read_index(path, ef_search: int | None = None):
    faiss = _faiss()
    try:
        index = faiss.read_index(str(path))
    except RuntimeError as error:
        raise KitmDataError(f"{path} is not a readable faiss index ({str(error).splitlines()[0]}); rebuild the "
                            "index with python -m kitm.index.") from None
    if ef_search is not None:
        faiss.ParameterSpace().set_index_parameter(index, "efSearch", int(ef_search))
    return index

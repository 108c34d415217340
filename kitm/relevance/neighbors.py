"""The k nearest neighbours of every row of an embedding matrix by cosine similarity, self excluded.

Thomas & Kovashka (semantic neighbourhoods, Sec. 3.2) draw, for each caption i, a neighbour i' among the
k = 200 nearest neighbours of i in a text-only space; the lists are precomputed once ("relevance
rows"). For row i of the L2-normalised matrix E the neighbour list is

    NN_k(i) = the k indices j != i with the largest s(i, j) = E[i] . E[j],

sorted by decreasing s and, among equal scores, by increasing j. Self is excluded *by index*, so a
duplicate of row i (an identical caption, score 1) is a neighbour of i like any other row.

Two ways to compute it:

* exact (N <= ``exact_threshold``): rows in chunks, one BLAS product E[chunk] E^T per chunk, the
  k-th largest score of each row by ``np.partition``, then the entries above it plus, where the
  k-th score is tied, the lowest-index tied entries. Memory is bounded by ``memory_bytes`` apart
  from the [N, D] input and the [N, k] outputs. Cost O(N^2 D).
* approximate (larger N): a faiss HNSW graph (Malkov & Yashunin 2018) over inner products. Its
  search breadth ``efSearch`` is tuned on a random sample of rows until the sample's recall against
  exact search reaches ``target_recall``; the final recall is measured on a fresh sample and logged
  (logger ``kitm.relevance.neighbors``). When HNSW cannot reach the target more cheaply than exact
  search would (high-dimensional data without structure, e.g. random vectors), the exact path is
  used instead, with a warning: the result is never silently worse than asked for.

Recall (``approximate_recall``) of a returned row is the share of its k entries that belong to an
exact top-k of that row, ties included: entry j counts when j != i, it is not repeated in the row
and s(i, j) >= the exact k-th largest score of row i. Without ties this is the usual
|approx ∩ exact| / k.
"""

from __future__ import annotations

import logging
import time
import warnings

import numpy as np

__all__ = ["DEFAULT_EXACT_THRESHOLD", "approximate_nearest_neighbors", "approximate_recall",
           "exact_nearest_neighbors", "nearest_neighbors"]

logger = logging.getLogger(__name__)

DEFAULT_EXACT_THRESHOLD = 50_000
# Working set of one exact chunk: float32 scores, the partitioned float32 copy, three boolean masks
# and an int32 running count of tied entries, per (query row, candidate) element.
_BYTES_PER_ELEMENT = 16
_DEFAULT_MEMORY_BYTES = 256 * 2**20
# Rows per faiss search call: bounds faiss's own [rows, k + 1] result buffers and feeds the bar.
_SEARCH_ROWS = 8192


def _check_embeddings(embeddings: object) -> np.ndarray:
    """Float32, C-contiguous, finite, unit rows (rows are normalised here when they are not)."""
    array = np.asarray(embeddings)
    if array.ndim != 2:
        raise ValueError(f"embeddings must be a 2-D array [N, D], got shape {array.shape}")
    if not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)):
        raise TypeError(f"embeddings must be numeric, got dtype {array.dtype}")
    if array.shape[1] < 1:
        raise ValueError(f"embeddings must have at least one column, got shape {array.shape}")
    array = np.ascontiguousarray(array, dtype=np.float32)
    finite = np.isfinite(array).all(axis=1)
    if not finite.all():
        raise ValueError(f"embeddings[{np.flatnonzero(~finite)[0]}] holds a NaN or infinite value")
    norms = np.linalg.norm(array, axis=1)
    zero = norms == 0
    if zero.any():
        raise ValueError(f"embeddings[{np.flatnonzero(zero)[0]}] is a zero vector: its cosine similarity "
                         "to anything is undefined")
    # Sentence embeddings arrive unit-norm; only other inputs pay for the copy.
    if np.abs(norms - 1.0).max() > 1e-5:
        array = array / norms[:, None]
    return array


def _check_k(k: object, num_rows: int) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    if k >= num_rows:
        raise ValueError(f"k={k} neighbours asked for, but embeddings has {num_rows} rows, so each row has only "
                         f"{num_rows - 1} others: k must be < N")
    return int(k)


def _check_positive_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def _chunk_rows(num_columns: int, memory_bytes: int) -> int:
    return max(1, int(memory_bytes) // (_BYTES_PER_ELEMENT * num_columns))


def _progress_bar(total: int, progress: bool, description: str):
    from kitm.progress import progress_bar as tqdm

    return tqdm(total=total, disable=not progress, desc=description, unit="rows")


def _chunk_scores(embeddings: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """s(i, j) for i in rows and every j, with s(i, i) = -inf so that self is never selected."""
    scores = embeddings[rows] @ embeddings.T
    scores[np.arange(len(rows)), rows] = -np.inf
    return scores


def _kth_largest(scores: np.ndarray, k: int) -> np.ndarray:
    return np.partition(scores, scores.shape[1] - k, axis=1)[:, scores.shape[1] - k]


def _top_k(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k largest entries of each row, by decreasing value then increasing column."""
    num_rows = scores.shape[0]
    kth = _kth_largest(scores, k)
    selected = scores >= kth[:, None]
    # More than k entries reach the k-th value only when it is tied; keep the lowest-index ties.
    tied = np.flatnonzero(selected.sum(axis=1) > k)
    if len(tied):
        block, threshold = scores[tied], kth[tied][:, None]
        above = block > threshold
        needed = k - above.sum(axis=1)
        equal = block == threshold
        rank = np.cumsum(equal, axis=1, dtype=np.int32)
        selected[tied] = above | (equal & (rank <= needed[:, None]))
    # np.nonzero walks rows in order and columns ascending: exactly k per row, in index order.
    columns = np.nonzero(selected)[1].reshape(num_rows, k)
    values = np.take_along_axis(scores, columns, axis=1)
    # A stable sort on the score keeps equal scores in index order.
    order = np.argsort(-values, axis=1, kind="stable")
    return np.take_along_axis(columns, order, axis=1), np.take_along_axis(values, order, axis=1)


def _exact(embeddings: np.ndarray, k: int, rows: np.ndarray, memory_bytes: int,
           progress: bool = False) -> tuple[np.ndarray, np.ndarray]:
    indices = np.empty((len(rows), k), dtype=np.int64)
    scores = np.empty((len(rows), k), dtype=np.float32)
    step = _chunk_rows(len(embeddings), memory_bytes)
    with _progress_bar(len(rows), progress, "exact neighbours") as bar:
        for start in range(0, len(rows), step):
            stop = min(start + step, len(rows))
            indices[start:stop], scores[start:stop] = _top_k(_chunk_scores(embeddings, rows[start:stop]), k)
            bar.update(stop - start)
    return indices, scores


def exact_nearest_neighbors(embeddings: np.ndarray, k: int, *, rows: np.ndarray | None = None,
                            memory_bytes: int = _DEFAULT_MEMORY_BYTES,
                            progress: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Exact k nearest neighbours by cosine similarity, self excluded by index, ties by index.

    ``indices[r]`` holds the k indices j != rows[r] with the largest ``s(rows[r], j)``, where
    ``s(i, j) = E[i] . E[j] / (|E[i]| |E[j]|)``, sorted by decreasing s then increasing j;
    ``scores[r]`` the matching s (float32 products of unit rows).

    Args:
      embeddings: [N, D]; rows are L2-normalised here unless they already are (zero rows and
        non-finite values are errors).
      k: neighbours per row, 1 <= k < N.
      rows: query rows (int indices into embeddings); default all N.
      memory_bytes: working-set bound of one chunk of query rows (about 16 bytes per score).
      progress: tqdm bar over query rows.

    Returns:
      (indices int64 [len(rows), k], scores float32 [len(rows), k]).
    """
    embeddings = _check_embeddings(embeddings)
    k = _check_k(k, len(embeddings))
    memory_bytes = _check_positive_int(memory_bytes, "memory_bytes")
    if rows is None:
        rows = np.arange(len(embeddings), dtype=np.int64)
    else:
        rows = np.asarray(rows)
        if rows.ndim != 1 or not (np.issubdtype(rows.dtype, np.integer) or rows.size == 0):
            raise ValueError(f"rows must be a 1-D array of integer indices, got shape {rows.shape} "
                             f"and dtype {rows.dtype}")
        rows = rows.astype(np.int64)
        if rows.size and (rows.min() < 0 or rows.max() >= len(embeddings)):
            raise ValueError(f"rows must index embeddings' {len(embeddings)} rows, got values in "
                             f"[{rows.min()}, {rows.max()}]")
    return _exact(embeddings, k, rows, memory_bytes, progress)


def _row_hits(scores: np.ndarray, candidates: np.ndarray, k: int) -> np.ndarray:
    """Per row, how many of ``candidates`` belong to an exact top-k of ``scores`` (self = -inf)."""
    num_columns = scores.shape[1]
    valid = (candidates >= 0) & (candidates < num_columns)
    safe = np.where(valid, candidates, 0)
    # A repeated index counts once: mark every occurrence after the first in its row.
    order = np.argsort(safe, axis=1, kind="stable")
    ordered = np.take_along_axis(safe, order, axis=1)
    repeat_sorted = np.zeros_like(valid)
    repeat_sorted[:, 1:] = ordered[:, 1:] == ordered[:, :-1]
    repeated = np.empty_like(valid)
    np.put_along_axis(repeated, order, repeat_sorted, axis=1)
    reached = np.take_along_axis(scores, safe, axis=1) >= _kth_largest(scores, k)[:, None]
    return (valid & ~repeated & reached).sum(axis=1)


def _recall(embeddings: np.ndarray, candidates: np.ndarray, rows: np.ndarray, k: int,
            memory_bytes: int) -> float:
    hits = 0
    step = _chunk_rows(len(embeddings), memory_bytes)
    for start in range(0, len(rows), step):
        chunk = rows[start:start + step]
        hits += int(_row_hits(_chunk_scores(embeddings, chunk), candidates[start:start + step], k).sum())
    return hits / (len(rows) * k)


def approximate_recall(embeddings: np.ndarray, indices: np.ndarray, *, sample: int | None = 1000, seed: int = 0,
                       memory_bytes: int = _DEFAULT_MEMORY_BYTES) -> float:
    """Recall@k of neighbour lists against exact search, measured on a random sample of rows.

    For each sampled row i with returned list ``indices[i]`` (k entries):
    ``hits(i) = |{j in indices[i] : j valid, j != i, first occurrence, s(i, j) >= s_k(i)}|`` where
    ``s_k(i)`` is the exact k-th largest cosine similarity of i to the other rows, so any of the
    exact top-k sets allowed by ties counts as right. Returns ``sum hits / (rows sampled * k)``.

    Args:
      embeddings: the [N, D] matrix the lists were computed on.
      indices: [N, k] neighbour lists (e.g. from ``approximate_nearest_neighbors``).
      sample: rows to check (drawn without replacement with ``seed``); None checks every row.
    """
    embeddings = _check_embeddings(embeddings)
    indices = np.asarray(indices)
    if indices.ndim != 2 or indices.shape[0] != len(embeddings) or not np.issubdtype(indices.dtype, np.integer):
        raise ValueError(f"indices must be an integer array [N, k] with N = {len(embeddings)} rows like "
                         f"embeddings, got shape {indices.shape} and dtype {indices.dtype}")
    k = _check_k(indices.shape[1], len(embeddings))
    memory_bytes = _check_positive_int(memory_bytes, "memory_bytes")
    rows = _sample_rows(len(embeddings), sample, seed)
    return _recall(embeddings, indices[rows], rows, k, memory_bytes)


def _sample_rows(num_rows: int, sample: int | None, seed: int) -> np.ndarray:
    if sample is None or sample >= num_rows:
        return np.arange(num_rows, dtype=np.int64)
    sample = _check_positive_int(sample, "sample")
    return np.sort(np.random.default_rng(seed).choice(num_rows, size=sample, replace=False)).astype(np.int64)


def _import_faiss():
    try:
        import faiss
    except ImportError:
        raise ImportError("Approximate nearest neighbours need faiss: `pip install faiss-cpu` (kitm is tested with "
                          "1.15.1), or raise exact_threshold above N to search exactly.") from None
    return faiss


def _drop_self(found: np.ndarray, found_scores: np.ndarray, rows: np.ndarray,
               k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """k of the k + 1 results per row without the row itself (by index); flags rows faiss left short."""
    is_self = found == rows[:, None]
    keep = ~is_self
    # When a row's duplicates crowd it out of its own results, the last result goes instead.
    keep[~is_self.any(axis=1), -1] = False
    indices = found[keep].reshape(len(rows), k)
    scores = found_scores[keep].reshape(len(rows), k)
    short = (indices < 0).any(axis=1)
    order = np.lexsort((indices, -scores), axis=1)
    return np.take_along_axis(indices, order, axis=1), np.take_along_axis(scores, order, axis=1), short


def _search(index, embeddings: np.ndarray, rows: np.ndarray, k: int,
            progress: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    indices = np.empty((len(rows), k), dtype=np.int64)
    scores = np.empty((len(rows), k), dtype=np.float32)
    short = np.zeros(len(rows), dtype=bool)
    with _progress_bar(len(rows), progress, "approximate neighbours") as bar:
        for start in range(0, len(rows), _SEARCH_ROWS):
            chunk = rows[start:start + _SEARCH_ROWS]
            found_scores, found = index.search(embeddings[chunk], k + 1)
            part = slice(start, start + len(chunk))
            indices[part], scores[part], short[part] = _drop_self(found.astype(np.int64, copy=False),
                                                                  found_scores, chunk, k)
            bar.update(len(chunk))
    return indices, scores, short


def approximate_nearest_neighbors(embeddings: np.ndarray, k: int, *, target_recall: float = 0.95,
                                  recall_sample: int = 1000, hnsw_m: int = 32, ef_construction: int = 80,
                                  ef_search: int | None = None, max_ef_search: int = 8192, seed: int = 0,
                                  memory_bytes: int = _DEFAULT_MEMORY_BYTES, exact_fallback: bool = True,
                                  progress: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """k nearest neighbours by cosine similarity through a faiss HNSW index, self excluded by index.

    Same contract as ``exact_nearest_neighbors`` (sorted by decreasing score, ties by index, scores
    float32 products of unit rows) except that a row may miss some of its true neighbours. The
    HNSW graph (``hnsw_m`` links per node, ``ef_construction``) is searched with ``efSearch``:
    given, or else doubled from max(k + 1, 64) (capped at ``max_ef_search``) until the recall
    of a random sample of ``recall_sample`` rows reaches ``target_recall`` (see
    ``approximate_recall``). If that needs an
    ``efSearch`` above ``max_ef_search``, or HNSW search would cost more per row than exact search
    on the same sample, every row is searched exactly instead (a ``UserWarning`` says so); with
    ``exact_fallback=False`` HNSW is kept (at ``max_ef_search`` if the target is not reached). The
    recall of the final lists on a fresh sample is logged at INFO. Rows that faiss leaves short of
    k results are searched exactly. Multi-threaded graph construction makes the lists vary
    slightly between runs.

    Returns:
      (indices int64 [N, k], scores float32 [N, k]).
    """
    embeddings = _check_embeddings(embeddings)
    num_rows = len(embeddings)
    k = _check_k(k, num_rows)
    if not 0.0 < float(target_recall) <= 1.0:
        raise ValueError(f"target_recall must be in (0, 1], got {target_recall!r}")
    recall_sample = _check_positive_int(recall_sample, "recall_sample")
    hnsw_m = _check_positive_int(hnsw_m, "hnsw_m")
    ef_construction = _check_positive_int(ef_construction, "ef_construction")
    max_ef_search = _check_positive_int(max_ef_search, "max_ef_search")
    memory_bytes = _check_positive_int(memory_bytes, "memory_bytes")
    if ef_search is not None and _check_positive_int(ef_search, "ef_search") <= k:
        raise ValueError(f"ef_search must exceed k={k} (HNSW keeps ef_search candidates per query), got {ef_search}")
    faiss = _import_faiss()

    started = time.perf_counter()
    index = faiss.IndexHNSWFlat(embeddings.shape[1], hnsw_m, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = ef_construction
    index.add(embeddings)
    logger.info("HNSW index over %d rows (M=%d, efConstruction=%d) built in %.1f s",
                num_rows, hnsw_m, ef_construction, time.perf_counter() - started)

    sample = _sample_rows(num_rows, recall_sample, seed)
    if ef_search is None:
        ef_search = _tune_ef_search(index, embeddings, sample, k, float(target_recall), max_ef_search,
                                    memory_bytes, bool(exact_fallback))
        if ef_search is None:
            return _exact(embeddings, k, np.arange(num_rows, dtype=np.int64), memory_bytes, progress)
    index.hnsw.efSearch = int(ef_search)
    indices, scores, short = _search(index, embeddings, np.arange(num_rows, dtype=np.int64), k, progress)
    if short.any():
        missing = np.flatnonzero(short)
        logger.info("%d rows had fewer than k=%d HNSW results; searching them exactly", len(missing), k)
        indices[missing], scores[missing] = _exact(embeddings, k, missing, memory_bytes)

    check = _sample_rows(num_rows, recall_sample, seed + 1)
    recall = _recall(embeddings, indices[check], check, k, memory_bytes)
    logger.info("approximate neighbours: N=%d, k=%d, efSearch=%d, recall@k=%.4f on %d sampled rows (%.1f s in all)",
                num_rows, k, ef_search, recall, len(check), time.perf_counter() - started)
    if progress:
        from tqdm.auto import tqdm

        tqdm.write(f"approximate neighbours: recall@{k} = {recall:.4f} on {len(check)} sampled rows "
                   f"(efSearch={ef_search})")
    return indices, scores


def _tune_ef_search(index, embeddings: np.ndarray, sample: np.ndarray, k: int, target_recall: float,
                    max_ef_search: int, memory_bytes: int, exact_fallback: bool) -> int | None:
    """Smallest doubling of efSearch whose sample recall reaches the target; None: search exactly."""
    started = time.perf_counter()
    _, exact_scores = _exact(embeddings, k, sample, memory_bytes)
    exact_seconds_per_row = (time.perf_counter() - started) / len(sample)
    kth = exact_scores[:, -1:]

    # efSearch = k + 1 already reaches recall ~0.99 on caption embeddings (Flickr8K, k = 200).
    ef = max(k + 1, min(64, max_ef_search))
    while True:
        index.hnsw.efSearch = ef
        started = time.perf_counter()
        found_scores, found = index.search(embeddings[sample], k + 1)
        approximate_seconds_per_row = (time.perf_counter() - started) / len(sample)
        indices, scores, _ = _drop_self(found.astype(np.int64, copy=False), found_scores, sample, k)
        # faiss's scores and BLAS's differ by rounding only; the slack lets exact ties count as hits.
        recall = float(((scores >= kth - 1e-6) & (indices >= 0)).sum()) / indices.size
        logger.info("efSearch=%d: sample recall@%d=%.4f, %.2f ms per row (exact: %.2f ms)", ef, k, recall,
                    1e3 * approximate_seconds_per_row, 1e3 * exact_seconds_per_row)
        if recall >= target_recall:
            if approximate_seconds_per_row < exact_seconds_per_row or not exact_fallback:
                return ef
            reason = (f"HNSW reaches recall {recall:.3f} at efSearch={ef} but costs "
                      f"{1e3 * approximate_seconds_per_row:.2f} ms per row against {1e3 * exact_seconds_per_row:.2f}")
            break
        if 2 * ef > max_ef_search and not exact_fallback:
            warnings.warn(f"HNSW reaches only recall {recall:.3f} < target {target_recall} on {len(sample)} "
                          f"sampled rows at efSearch={ef} (max_ef_search)", stacklevel=3)
            return ef
        if exact_fallback and (approximate_seconds_per_row >= exact_seconds_per_row or 2 * ef > max_ef_search):
            reason = (f"HNSW reaches only recall {recall:.3f} < target {target_recall} at efSearch={ef} "
                      f"({1e3 * approximate_seconds_per_row:.2f} ms per row, exact "
                      f"{1e3 * exact_seconds_per_row:.2f} ms)")
            break
        ef *= 2
    warnings.warn(f"{reason} on {len(sample)} sampled rows: searching all {len(embeddings)} rows exactly "
                  "(embeddings without low-dimensional structure, such as random vectors, defeat HNSW)",
                  stacklevel=3)
    return None


def nearest_neighbors(embeddings: np.ndarray, k: int, *, exact_threshold: int = DEFAULT_EXACT_THRESHOLD,
                      target_recall: float = 0.95, recall_sample: int = 1000, seed: int = 0,
                      memory_bytes: int = _DEFAULT_MEMORY_BYTES,
                      progress: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The k nearest neighbours of every row by cosine similarity, self excluded (by index).

    ``indices[i]`` = the k rows j != i with the largest ``s(i, j) = E[i] . E[j]`` (E row-normalised),
    by decreasing s and then increasing j; ``scores[i]`` the matching s. This is Thomas & Kovashka's
    neighbour list (Sec. 3.2: a semantic neighbour is drawn from the k = 200 nearest captions in a
    text-only space). Duplicate rows are neighbours of each other with score 1.

    N <= ``exact_threshold``: exact (``exact_nearest_neighbors``, chunked BLAS + partition,
    working set <= ``memory_bytes``). Larger N: faiss HNSW tuned to ``target_recall`` on
    ``recall_sample`` rows, its measured recall logged (``approximate_nearest_neighbors``).

    Returns:
      (indices int64 [N, k], scores float32 [N, k]).

    Example:
      >>> e = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
      >>> nearest_neighbors(e, 2)[0]
      array([[3, 2],
             [2, 0],
             [0, 1],
             [0, 2]])
    """
    embeddings = _check_embeddings(embeddings)
    k = _check_k(k, len(embeddings))
    if isinstance(exact_threshold, bool) or not isinstance(exact_threshold, (int, np.integer)) or exact_threshold < 0:
        raise ValueError(f"exact_threshold must be a non-negative integer, got {exact_threshold!r}")
    if len(embeddings) <= exact_threshold:
        return exact_nearest_neighbors(embeddings, k, memory_bytes=memory_bytes, progress=progress)
    return approximate_nearest_neighbors(embeddings, k, target_recall=target_recall, recall_sample=recall_sample,
                                         seed=seed, memory_bytes=memory_bytes, progress=progress)

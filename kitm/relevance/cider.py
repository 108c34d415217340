"""Exact, vectorised CIDEr-D between every hypothesis and every group of reference captions.

CIDEr-D as pycocoevalcap's ``CiderScorer`` computes it (Vedantam et al. 2015, "CIDEr:
Consensus-based Image Description Evaluation", with the "-D" changes of the coco-caption code:
clipped numerator, Gaussian length penalty, x10), for all pairs at once. For n-gram order
k = 1..n a caption c has the tf-idf vector

    v_c[g] = tf_c(g) * (log(D) - log(max(1, df(g))))                       (1)

over the k-grams g of c, where D is the number of documents and df(g) the number of documents
having g in any of their captions (a document is one group of references). Then

    sim_k(h, r) = sum_g min(v_h[g], v_r[g]) * v_r[g] / (|v_h| |v_r|)      (2)

(0 when a norm is 0) and

    CIDEr-D(h, G) = 10 / (n |G|) * sum_{r in G} exp(-(l_h - l_r)^2 / (2 sigma^2)) * sum_k sim_k(h, r)   (3)

where l_c is pycocoevalcap's "length": the number of bigrams of c, max(words - 1, 0).

How it is vectorised. Since idf(g) >= 0, min(v_h[g], v_r[g]) = idf(g) * min(tf_h(g), tf_r(g)) and
term frequencies are small integers, so with min(a, b) = sum_{t >= 1} [a >= t] [b >= t] the
numerator of (2) is a dot product over "levels" (g, t):

    sum_{(g,t)} [tf_h(g) >= t] / |v_h|  *  idf(g)^2 tf_r(g) [tf_r(g) >= t] / |v_r|

Dividing each entry by the norm of its own order folds all orders into one product
S = A B^T with S[h, r] = sum_k sim_k(h, r), and (3) is a penalty-weighted sum of S over the
references of each group. The columns are split in two:

* the few n-grams present in a large share of captions ("a", "in", "a man") are held densely. For
  them sum_{r in G} pen(h, r) A[h].B[r] = A[h].(sum_{r in G} pen(h, r) B[r]), and pen depends on h
  only through its length, so hypotheses are sorted by length and, per length, one BLAS product
  against penalty-weighted group sums of B gives the groups' scores without any [H, R] array;
* the long tail goes through a sparse product A B^T whose non-zeros are weighted by their penalty
  and summed into groups (a bincount over (hypothesis, group) keys).

Hypotheses are processed in chunks so that memory stays bounded (the [H, G] result aside); Python
loops run over captions (giving tokens ids), hypothesis lengths and chunks only.

Choices where pycocoevalcap leaves none: ``n`` other than 4 counts 1..n-grams (pycocoevalcap's
``precook`` always counts up to 4-grams and fails for n < 4), and the length is always the bigram
count. Duplicate captions inside a group, and duplicate groups, count separately, as there.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import itertools
import json
import math
import os
from collections.abc import Mapping, Sequence

import numpy as np
import scipy.sparse as sp

from kitm.files import write_bytes_atomically
from kitm.relevance._inputs import check_captions, check_reference_groups
from kitm.relevance.text_normalization import normalize_captions

__all__ = ["DocumentFrequency", "cider_matrix", "ngram_counts"]

_FORMAT = "kitm.relevance.DocumentFrequency"
_FORMAT_VERSION = 1
# Bytes per (hypothesis, reference) pair a chunk may hold at worst: the sparse product as COO
# (row, column, value) plus the penalty-weighted values and their flat group keys.
_BYTES_PER_PAIR = 48
# Working-set target for the chunked part and, separately, for the dense column block.
_DEFAULT_MEMORY_BYTES = 512 * 2**20
# An n-gram column goes to the dense product when (share of hypotheses having it) x (share of
# references having it) reaches this (tuned on Flickr8K: 5000x1000 and 25000x5000 matrices).
_DENSE_COLUMN_SHARE = 0.001
_MAX_DENSE_COLUMNS = 2048


def ngram_counts(caption: str, n: int = 4) -> dict[str, int]:
    """Counts of the 1..n-grams of a whitespace-tokenised caption, keyed by space-joined tokens.

    This is pycocoevalcap's ``precook`` with string keys: ``ngram_counts("a a dog", 2) ==
    {"a": 2, "dog": 1, "a a": 1, "a dog": 1}``.
    """
    _check_order(n)
    tokens = caption.split()
    counts: dict[str, int] = {}
    for order in range(1, n + 1):
        for gram in _ngrams(tokens, order):
            counts[gram] = counts.get(gram, 0) + 1
    return counts


def _ngrams(tokens: list[str], order: int) -> list[str]:
    if order == 1:
        return tokens
    return [" ".join(window) for window in zip(*(tokens[start:] for start in range(order)))]


def _check_order(n: object) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    return int(n)


def _normalization_name(normalize: bool | str) -> str:
    if normalize is True or normalize in ("python", "java"):
        return "ptb"
    if normalize is False or normalize == "none":
        return "none"
    raise ValueError(f"normalize must be True, False, 'python', 'java' or 'none', got {normalize!r}")


class _NgramTable:
    """Term counts of the 1..n-grams of a list of (already normalised) captions.

    ``counts`` is an int64 CSR matrix [captions, n-grams]; ``orders`` gives each column's order
    (1..n), ``lengths`` each caption's bigram count and ``vocabulary`` (built on demand) each
    column's n-gram as space-joined tokens. Python touches each token once (to give it an id);
    the k-grams are then numbered with numpy, by extending the (k-1)-gram at each position.
    """

    def __init__(self, captions: Sequence[str], n: int):
        token_lists = [caption.split() for caption in captions]
        sizes = np.fromiter(map(len, token_lists), dtype=np.int64, count=len(token_lists))
        self._tokens = list(itertools.chain.from_iterable(token_lists))
        token_index: dict[str, int] = {}
        lookup = token_index.setdefault
        token_ids = np.fromiter((lookup(token, len(token_index)) for token in self._tokens),
                                dtype=np.int64, count=len(self._tokens))
        self._unigrams = list(token_index)
        num_tokens, num_types = len(token_ids), max(len(token_index), 1)
        caption_of = np.repeat(np.arange(len(token_lists), dtype=np.int64), sizes)
        # Tokens from each position to the end of its caption, itself included.
        remaining = np.repeat(sizes, sizes) - (np.arange(num_tokens) - np.repeat(np.cumsum(sizes) - sizes, sizes))

        rows, columns, orders = [caption_of], [token_ids], [np.ones(len(token_index), dtype=np.int64)]
        self._first_positions: list[np.ndarray] = []
        previous, offset = token_ids, len(token_index)
        for order in range(2, n + 1):
            valid = np.flatnonzero(remaining >= order)
            if not len(valid):
                break
            # The k-gram at i is the (k-1)-gram at i followed by token i+k-1.
            keys = previous[valid] * num_types + token_ids[valid + order - 1]
            unique_keys, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
            current = np.full(num_tokens, -1, dtype=np.int64)
            current[valid] = inverse
            rows.append(caption_of[valid])
            columns.append(inverse + offset)
            orders.append(np.full(len(unique_keys), order, dtype=np.int64))
            self._first_positions.append(valid[first])
            previous, offset = current, offset + len(unique_keys)
        row_index = np.concatenate(rows)
        matrix = sp.csr_matrix((np.ones(len(row_index), dtype=np.int64), (row_index, np.concatenate(columns))),
                               shape=(len(token_lists), offset))
        matrix.sum_duplicates()
        self.counts = matrix
        self.orders = np.concatenate(orders)
        self.lengths = np.maximum(sizes - 1, 0)

    @functools.cached_property
    def vocabulary(self) -> list[str]:
        grams = list(self._unigrams)
        for order, positions in enumerate(self._first_positions, start=2):
            grams.extend(" ".join(self._tokens[p:p + order]) for p in positions.tolist())
        return grams


@dataclasses.dataclass(frozen=True, eq=False)
class DocumentFrequency:
    """Document frequencies of n-grams: the idf side of CIDEr-D, e.g. of a training corpus.

    Attributes:
        counts: n-gram (its tokens joined by one space) -> number of documents containing it.
            n-grams in no document may be left out. Every count is in [1, num_documents].
        num_documents: D, the number of documents (reference groups) counted.
        n: the highest n-gram order counted.
        normalization: how captions were normalised before counting: ``"ptb"``
            (pycocoevalcap's PTB normalisation, ``normalize=True``) or ``"none"``.
    """

    counts: Mapping[str, int]
    num_documents: int
    n: int = 4
    normalization: str = "ptb"

    def __post_init__(self) -> None:
        if isinstance(self.num_documents, bool) or not isinstance(self.num_documents, (int, np.integer)) \
                or self.num_documents < 1:
            raise ValueError(f"num_documents must be a positive integer, got {self.num_documents!r}")
        _check_order(self.n)
        if self.normalization not in ("ptb", "none"):
            raise ValueError(f"normalization must be 'ptb' or 'none', got {self.normalization!r}")
        for gram, count in self.counts.items():
            if not isinstance(gram, str):
                raise TypeError(f"counts keys must be str n-grams, got {type(gram).__name__}")
            if not 1 <= count <= self.num_documents:
                # A count above D would give a negative idf, which breaks CIDEr-D's clipping.
                raise ValueError(f"counts[{gram!r}] = {count} is outside [1, num_documents={self.num_documents}]")

    @classmethod
    def from_reference_groups(cls, reference_groups: Sequence[Sequence[str]], *, n: int = 4,
                              normalize: bool | str = True) -> DocumentFrequency:
        """Document frequencies with one document per group, as pycocoevalcap counts them."""
        n = _check_order(n)
        name = _normalization_name(normalize)
        groups = check_reference_groups(reference_groups, "CIDEr-D")
        flat = normalize_captions([caption for group in groups for caption in group], normalize)
        unique: dict[str, int] = {}
        rows = np.fromiter((unique.setdefault(caption, len(unique)) for caption in flat),
                           dtype=np.int64, count=len(flat))
        table = _NgramTable(list(unique), n)
        frequency = _document_frequency(table.counts[rows], [len(group) for group in groups])
        present = np.flatnonzero(frequency)
        return cls({table.vocabulary[column]: int(frequency[column]) for column in present},
                   num_documents=len(groups), n=n, normalization=name)

    def lookup(self, ngrams: Sequence[str]) -> np.ndarray:
        """Document frequency of each n-gram (0 for unseen ones), int64 [len(ngrams)]."""
        get = self.counts.get
        return np.fromiter((get(gram, 0) for gram in ngrams), dtype=np.int64, count=len(ngrams))

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write to JSON (gzip-compressed when ``path`` ends in ``.gz``), atomically.

        The file is written under a temporary name in the same directory and then renamed
        (`kitm.files.write_bytes_atomically`), so a reader never sees a partial file.
        """
        path = os.fspath(path)
        grams = sorted(self.counts)
        payload = {"format": _FORMAT, "version": _FORMAT_VERSION, "n": int(self.n),
                   "num_documents": int(self.num_documents), "normalization": self.normalization,
                   "ngrams": grams, "counts": [int(self.counts[gram]) for gram in grams]}
        data = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        if path.endswith(".gz"):
            data = gzip.compress(data, mtime=0)
        # A plain open() gives the file the usual umask-based mode (mkstemp would make it owner-only).
        write_bytes_atomically(path, data)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> DocumentFrequency:
        """Read a file written by :meth:`save`."""
        path = os.fspath(path)
        with open(path, "rb") as stream:
            data = stream.read()
        if path.endswith(".gz"):
            data = gzip.decompress(data)
        payload = json.loads(data.decode("utf-8"))
        if not isinstance(payload, dict) or payload.get("format") != _FORMAT:
            raise ValueError(f"{path!r} is not a kitm DocumentFrequency file")
        if payload.get("version") != _FORMAT_VERSION:
            raise ValueError(f"{path!r} has DocumentFrequency format version {payload.get('version')!r}; "
                             f"this kitm reads version {_FORMAT_VERSION}")
        if len(payload["ngrams"]) != len(payload["counts"]):
            raise ValueError(f"{path!r} is corrupt: {len(payload['ngrams'])} n-grams but "
                             f"{len(payload['counts'])} counts")
        return cls(dict(zip(payload["ngrams"], payload["counts"])), num_documents=payload["num_documents"],
                   n=payload["n"], normalization=payload["normalization"])


def _document_frequency(reference_counts: sp.csr_matrix, group_sizes: Sequence[int]) -> np.ndarray:
    """Number of groups whose captions contain each column's n-gram; rows are group-contiguous."""
    sizes = np.asarray(group_sizes, dtype=np.int64)
    membership = sp.csr_matrix(
        (np.ones(int(sizes.sum())), (np.repeat(np.arange(len(sizes)), sizes), np.arange(int(sizes.sum())))),
        shape=(len(sizes), int(sizes.sum())))
    present = (membership @ (reference_counts > 0).astype(np.float64)).tocsr()
    present.eliminate_zeros()
    return np.bincount(present.indices, minlength=reference_counts.shape[1]).astype(np.int64)


def _level_entries(table: _NgramTable, idf: np.ndarray, n: int):
    """Every (caption, n-gram, level t < tf) entry with its factors of S = A B^T, caption-major.

    A[c, (g, t)] = [tf_c(g) >= t] / |v_c|_k and B[c, (g, t)] = idf(g)^2 tf_c(g) [tf_c(g) >= t] / |v_c|_k,
    k the order of g, with 1/|v| taken as 0 for a zero norm (pycocoevalcap then skips the
    division, and its numerator is 0 anyway because idf >= 0).
    Returns (rows, n-gram columns, levels counted from 0, A values, B values).
    """
    counts = table.counts.tocoo()
    rows, columns, tf = counts.row, counts.col, counts.data.astype(np.int64)
    weights = tf.astype(np.float64) * idf[columns]
    order_index = table.orders[columns] - 1
    squared = np.bincount(rows * n + order_index, weights=weights * weights,
                          minlength=table.counts.shape[0] * n).reshape(-1, n)
    norms = np.sqrt(squared)
    inverse = np.divide(1.0, norms, out=np.zeros_like(norms), where=norms != 0)
    inverse_entry = inverse[rows, order_index]

    # One entry per (n-gram, level t <= tf): entry e of the count matrix is repeated tf[e] times.
    starts = np.cumsum(tf) - tf
    levels = np.arange(int(tf.sum()), dtype=np.int64) - np.repeat(starts, tf)
    a_values = np.repeat(inverse_entry, tf)
    b_values = np.repeat(idf[columns] ** 2 * tf * inverse_entry, tf)
    return np.repeat(rows, tf), np.repeat(columns, tf), levels, a_values, b_values


def _level_matrices(table: _NgramTable, idf: np.ndarray, n: int) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """The two factors of S = A B^T over (n-gram, level) columns, for every caption of ``table``."""
    rows, columns, levels, a_values, b_values = _level_entries(table, idf, n)
    keys = columns * (int(levels.max(initial=0)) + 2) + levels
    unique_keys, level_columns = np.unique(keys, return_inverse=True)
    shape = (table.counts.shape[0], len(unique_keys))
    a = sp.csr_matrix((a_values, (rows, level_columns)), shape=shape)
    b = sp.csr_matrix((b_values, (rows, level_columns)), shape=shape)
    a.eliminate_zeros()
    b.eliminate_zeros()
    return a, b


def cider_matrix(hypotheses: Sequence[str], reference_groups: Sequence[Sequence[str]], *, n: int = 4,
                 sigma: float = 6.0, document_frequency: DocumentFrequency | None = None,
                 normalize: bool | str = True, chunk_size: int | None = None) -> np.ndarray:
    """CIDEr-D of every hypothesis against every group of references.

    Equal per pair to pycocoevalcap's ``CiderScorer`` (to ~1e-12 relative) when its documents are
    the groups (``document_frequency=None``), or when its document frequencies and D are those of
    ``document_frequency``; see the module docstring for the formula (Vedantam et al. 2015, as
    implemented in coco-caption's ``cider_scorer.py``).

    Args:
        hypotheses: H captions.
        reference_groups: G non-empty groups of reference captions (e.g. an image's captions).
        n: highest n-gram order; scores average orders 1..n. pycocoevalcap only works with 4.
        sigma: standard deviation of the Gaussian length penalty (6 in CIDEr-D).
        document_frequency: idf source; ``None`` counts the groups themselves, one document each.
        normalize: ``True`` or ``"python"`` (pycocoevalcap's PTB normalisation in pure Python),
            ``"java"`` (the same through Stanford's tokenizer; needs ``java``), or ``False``
            (captions are compared as given, split on whitespace). Applied to both sides.
        chunk_size: hypotheses scored at once; by default sized to keep the working set near 512 MB.

    Returns:
        float64 array [H, G].

    Example:
        >>> cider_matrix(["A dog runs on the grass."],
        ...              [["a dog runs on the grass"], ["a cat sleeps on the sofa"]])
        array([[10.,  0.]])
    """
    n, hypotheses, groups = _checked_arguments(hypotheses, reference_groups, n, sigma, normalize,
                                               document_frequency, chunk_size)
    num_groups = len(groups)
    scores = np.zeros((len(hypotheses), num_groups), dtype=np.float64)
    if not hypotheses or not groups:
        return scores

    # Normalise everything in one call (one JVM start for "java"), count each distinct caption once.
    group_sizes = np.array([len(group) for group in groups], dtype=np.int64)
    texts = normalize_captions(hypotheses + [caption for group in groups for caption in group], normalize)
    unique: dict[str, int] = {}
    rows = np.fromiter((unique.setdefault(text, len(unique)) for text in texts), dtype=np.int64, count=len(texts))
    hypothesis_rows, reference_rows = rows[:len(hypotheses)], rows[len(hypotheses):]
    table = _NgramTable(list(unique), n)
    a_all, b_all = _level_matrices(table, _idf(table, reference_rows, group_sizes, document_frequency), n)

    # Distinct hypotheses, sorted by length: the length penalty is then one row per run.
    distinct_hypotheses, first_row, hypothesis_inverse = np.unique(
        hypothesis_rows, return_index=True, return_inverse=True)
    by_length = np.argsort(table.lengths[distinct_hypotheses], kind="stable")
    distinct_hypotheses = distinct_hypotheses[by_length]
    hypothesis_lengths = table.lengths[distinct_hypotheses]
    reference_lengths = table.lengths[reference_rows].astype(np.float64)
    # Columns held densely: at most 8 bytes x (hypotheses + 2 x references) each within the budget.
    max_dense = min(_MAX_DENSE_COLUMNS,
                    _DEFAULT_MEMORY_BYTES // (8 * (len(distinct_hypotheses) + 2 * len(reference_rows))))
    columns = _ColumnSplit(a_all[distinct_hypotheses], b_all[reference_rows], max_dense)
    del a_all, b_all
    # Each distinct hypothesis is scored once, into the first row that holds it.
    target_rows = first_row[by_length]
    _score_by_length(scores, columns, hypothesis_lengths, reference_lengths, target_rows, group_sizes, n, sigma,
                     chunk_size)
    repeated = np.flatnonzero(first_row[hypothesis_inverse] != np.arange(len(hypotheses)))
    if len(repeated):
        scores[repeated] = scores[first_row[hypothesis_inverse[repeated]]]
    return scores


def _checked_arguments(hypotheses, reference_groups, n, sigma, normalize, document_frequency, chunk_size):
    """`cider_matrix`'s arguments checked -> (n, hypotheses, reference groups); a document frequency must count
    n-grams up to n on captions normalised as `normalize` says."""
    n = _check_order(n)
    if isinstance(sigma, bool) or not isinstance(sigma, (int, float, np.floating, np.integer)) \
            or not math.isfinite(sigma) or sigma <= 0:
        raise ValueError(f"sigma must be a positive finite number, got {sigma!r}")
    name = _normalization_name(normalize)
    hypotheses = check_captions(hypotheses, "hypotheses")
    groups = check_reference_groups(reference_groups, "CIDEr-D")
    if document_frequency is not None:
        if not isinstance(document_frequency, DocumentFrequency):
            raise TypeError("document_frequency must be a DocumentFrequency or None, "
                            f"got {type(document_frequency).__name__}")
        if document_frequency.n < n:
            raise ValueError(f"document_frequency counts n-grams up to n={document_frequency.n}, "
                             f"fewer than the n={n} requested")
        if document_frequency.normalization != name:
            raise ValueError(f"document_frequency was counted on {document_frequency.normalization!r}-"
                             f"normalised captions but normalize={normalize!r} gives {name!r}")
    if chunk_size is not None and (isinstance(chunk_size, bool) or not isinstance(chunk_size, (int, np.integer))
                                   or chunk_size < 1):
        raise ValueError(f"chunk_size must be a positive integer or None, got {chunk_size!r}")
    return n, hypotheses, groups


def _idf(table: _NgramTable, reference_rows: np.ndarray, group_sizes: np.ndarray,
         document_frequency: DocumentFrequency | None) -> np.ndarray:
    """The idf of every n-gram of `table`: from the groups themselves (one document each) or from
    `document_frequency`."""
    if document_frequency is None:
        num_documents = len(group_sizes)
        frequency = _document_frequency(table.counts[reference_rows], group_sizes)
    else:
        num_documents = document_frequency.num_documents
        frequency = document_frequency.lookup(table.vocabulary)
    # The same float operations as pycocoevalcap: ref_len - log(max(1., df)).
    return np.log(float(num_documents)) - np.log(np.maximum(1.0, frequency.astype(np.float64)))


def _score_by_length(scores: np.ndarray, columns: _ColumnSplit, hypothesis_lengths: np.ndarray,
                     reference_lengths: np.ndarray, target_rows: np.ndarray, group_sizes: np.ndarray, n: int,
                     sigma: float, chunk_size: int | None) -> None:
    """Score the distinct hypotheses (sorted by length) against every group into `scores[target_rows]`, run of
    equal length by run (one length penalty row each), `chunk_size` hypotheses at a time."""
    num_groups = len(group_sizes)
    num_references = len(reference_lengths)
    group_of_reference = np.repeat(np.arange(num_groups, dtype=np.int64), group_sizes)
    group_starts = np.concatenate([[0], np.cumsum(group_sizes)[:-1]])
    equal_size = int(group_sizes[0]) if np.all(group_sizes == group_sizes[0]) else 0

    def group_sum(values: np.ndarray) -> np.ndarray:
        # Sum over the references of each group (axis 0 is the group-contiguous reference axis).
        if equal_size:
            return values.reshape(num_groups, equal_size, *values.shape[1:]).sum(axis=1)
        return np.add.reduceat(values, group_starts, axis=0)

    if chunk_size is None:
        chunk_size = max(1, _DEFAULT_MEMORY_BYTES // (_BYTES_PER_PAIR * (num_references + num_groups)))
    scale = 10.0 / (n * group_sizes.astype(np.float64))
    run_starts = np.flatnonzero(np.diff(hypothesis_lengths, prepend=-1))
    run_stops = np.append(run_starts[1:], len(hypothesis_lengths))
    for run_start, run_stop in zip(run_starts.tolist(), run_stops.tolist()):
        delta = float(hypothesis_lengths[run_start]) - reference_lengths
        penalty = np.e ** (-(delta ** 2) / (2 * float(sigma) ** 2))
        # Dense columns: sum_{r in G} pen(h, r) A[h].B[r] = A[h].(sum_{r in G} pen(h, r) B[r]), and
        # pen depends on h only through its length, fixed in this run.
        weighted_references = group_sum(penalty[:, None] * columns.dense_b) if columns.num_dense else None
        for start in range(run_start, run_stop, chunk_size):
            stop = min(start + chunk_size, run_stop)
            if weighted_references is not None:
                block = columns.dense_a[start:stop] @ weighted_references.T
            else:
                block = np.zeros((stop - start, num_groups), dtype=np.float64)
            product = (columns.sparse_a[start:stop] @ columns.sparse_bt).tocoo()
            if product.nnz:
                block += np.bincount(
                    product.row.astype(np.int64) * num_groups + group_of_reference[product.col],
                    weights=product.data * penalty[product.col],
                    minlength=(stop - start) * num_groups).reshape(stop - start, num_groups)
            block *= scale
            scores[target_rows[start:stop]] = block

class _ColumnSplit:
    """The (n-gram, level) columns of A and B split into a dense block and a sparse rest.

    Frequent n-grams ("a", "in", "a man") make S = A B^T dense; for those columns a BLAS product
    against group-summed references is far cheaper than a sparse product. The long tail stays sparse.
    Columns absent from either side contribute nothing and are dropped.
    """

    def __init__(self, a: sp.csr_matrix, b: sp.csr_matrix, max_dense: int):
        share_a = np.bincount(a.indices, minlength=a.shape[1]) / max(a.shape[0], 1)
        share_b = np.bincount(b.indices, minlength=b.shape[1]) / max(b.shape[0], 1)
        benefit = share_a * share_b
        candidates = np.flatnonzero(benefit >= _DENSE_COLUMN_SHARE)
        dense = np.sort(candidates[np.argsort(-benefit[candidates], kind="stable")[:max_dense]])
        is_dense = np.zeros(a.shape[1], dtype=bool)
        is_dense[dense] = True
        sparse = np.flatnonzero(~is_dense & (share_a > 0) & (share_b > 0))
        self.num_dense = len(dense)
        self.dense_a = np.ascontiguousarray(a[:, dense].toarray())
        self.dense_b = np.ascontiguousarray(b[:, dense].toarray())
        self.sparse_a = a[:, sparse].tocsr()
        self.sparse_bt = b[:, sparse].T.tocsr()

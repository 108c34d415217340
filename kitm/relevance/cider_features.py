"""Per-caption CIDEr-D features, stored in the records, from which the input pipeline builds exact batch CIDEr-D.

`kitm.relevance.cider_matrix` factors CIDEr-D (docs/methods.md#cider-d) as S = A B^T over
(n-gram g, level t) columns, with

    A[c, (g, t)] = [tf_c(g) >= t] / |v_c|_k        B[c, (g, t)] = idf(g)^2 tf_c(g) [tf_c(g) >= t] / |v_c|_k

(k the order of g) so that S[h, r] = sum_k sim_k(h, r), and

    CIDEr-D(h, G) = 10 / (n |G|) * sum_{r in G} exp(-(l_h - l_r)^2 / (2 sigma^2)) * S[h, r].

Once the idf is fixed (a training corpus's document frequencies, as the SAM reference uses while
training), a caption's row of A and of B depends on that caption alone. So each caption is stored as
its non-zero (g, t) entries: a 64-bit key naming (g, t), its A value ("hypothesis weight"), its B value
("reference weight"), plus its length l (bigram count). Any two captions of any split then meet on equal
keys, and a batch's CIDEr-D needs only a join on keys and a segment sum (`kitm.relevance.batch`).

Keys: the low 8 bits hold (t - 1) mod 256, the other 55 bits a BLAKE2b hash of the n-gram, salted with
(t - 1) // 256 (the salt 0 of the first 256 levels is BLAKE2b's default, so every key of a caption that repeats no
n-gram more than 256 times is the plain hash's). The salt lets a caption repeat an n-gram any number of times (a
100,000-character caption of one word repeated did) with each (n-gram, level) still its own key, and CIDEr-D exact.
Two distinct (n-gram, salt) pairs collide with probability about 2^-55; within a batch's few thousand n-grams that is
below 1e-9.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence

import numpy as np

from kitm.relevance._inputs import check_captions
from kitm.relevance.cider import DocumentFrequency, _level_entries, _NgramTable, _normalization_name
from kitm.relevance.text_normalization import normalize_captions

__all__ = ["CiderFeatures", "cider_features", "ngram_key"]

_LEVEL_BITS = 8
_HASH_BITS = 63 - _LEVEL_BITS


def _hash_bits(ngram: str, block: int = 0) -> int:
    """The n-gram's 55-bit hash, salted with the level block (block 0: BLAKE2b's default all-zero salt), shifted
    above the level bits."""
    salt = block.to_bytes(hashlib.blake2b.SALT_SIZE, "little")
    digest = int.from_bytes(hashlib.blake2b(ngram.encode("utf-8"), digest_size=8, salt=salt).digest(), "little")
    return (digest >> (64 - _HASH_BITS)) << _LEVEL_BITS


def ngram_key(ngram: str, level: int = 1) -> int:
    """The int64 key of (n-gram, level t >= 1): a 55-bit hash of the n-gram salted with (t - 1) // 256, then
    (t - 1) mod 256 in the low 8 bits."""
    if level < 1:
        raise ValueError(f"level must be at least 1, got {level}")
    block, low = divmod(level - 1, 2 ** _LEVEL_BITS)
    return _hash_bits(ngram, block) | low


@dataclasses.dataclass(frozen=True)
class CiderFeatures:
    """The CIDEr-D rows of N captions, flat and caption-major.

    Attributes:
        keys: int64 [E], one per (caption, n-gram, level) entry.
        hypothesis_weights: float32 [E], the entry's A value.
        reference_weights: float32 [E], the entry's B value.
        entries: int64 [N], entries per caption (caption i owns the next entries[i] rows).
        lengths: int64 [N], each caption's bigram count (CIDEr-D's length).
    """

    keys: np.ndarray
    hypothesis_weights: np.ndarray
    reference_weights: np.ndarray
    entries: np.ndarray
    lengths: np.ndarray

    def caption_slices(self) -> list[slice]:
        """The entry range of each caption."""
        stops = np.cumsum(self.entries)
        return [slice(int(stop - count), int(stop)) for stop, count in zip(stops, self.entries)]


def cider_features(captions: Sequence[str], document_frequency: DocumentFrequency, *,
                   normalize: bool | str = True) -> CiderFeatures:
    """Each caption's CIDEr-D entries under a fixed idf (see the module docstring).

    Args:
        captions: N captions (normalised here as `cider_matrix` does, e.g. PTB normalisation).
        document_frequency: the idf source, e.g. the training split's; n comes from it.
        normalize: as in `cider_matrix`; must match how `document_frequency` was counted.
    """
    name = _normalization_name(normalize)
    if document_frequency.normalization != name:
        raise ValueError(f"document_frequency was counted on {document_frequency.normalization!r}-normalised "
                         f"captions but normalize={normalize!r} gives {name!r}")
    captions = check_captions(captions, "captions")
    n = document_frequency.n
    if not captions:
        empty = np.zeros(0, np.int64)
        return CiderFeatures(empty, np.zeros(0, np.float32), np.zeros(0, np.float32), empty, empty)
    table = _NgramTable(normalize_captions(captions, normalize), n)
    frequency = document_frequency.lookup(table.vocabulary)
    idf = np.log(float(document_frequency.num_documents)) - np.log(np.maximum(1.0, frequency.astype(np.float64)))
    rows, columns, levels, a_values, b_values = _level_entries(table, idf, n)
    # Entries that are zero on both sides (an n-gram in every document, in a caption whose norm is 0) add nothing.
    keep = (a_values != 0) | (b_values != 0)
    rows, columns, levels = rows[keep], columns[keep], levels[keep]
    column_hash = np.fromiter((_hash_bits(gram) for gram in table.vocabulary), dtype=np.int64,
                              count=len(table.vocabulary))
    blocks, low = np.divmod(levels, 2 ** _LEVEL_BITS)
    keys = column_hash[columns] | low
    for entry in np.flatnonzero(blocks):  # an n-gram repeated more than 256 times: its higher levels' salted hashes
        keys[entry] = _hash_bits(table.vocabulary[columns[entry]], int(blocks[entry])) | low[entry]
    return CiderFeatures(
        keys=keys,
        hypothesis_weights=a_values[keep].astype(np.float32),
        reference_weights=b_values[keep].astype(np.float32),
        entries=np.bincount(rows, minlength=len(captions)).astype(np.int64),
        lengths=table.lengths.astype(np.int64))

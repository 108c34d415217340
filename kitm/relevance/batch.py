"""Exact relevance matrices of one batch, built inside the tf.data graph from features stored per record.

Both functions return R [P, Q] with R[p, q] = relevance of caption q to image p (docs/methods.md#relevance-sources),
for the P images and Q captions of a batch (P = Q = B in training: sample p is image p with caption p).

* CIDEr-D with a training corpus's idf (`batch_cider`): each caption is stored as the non-zero entries of its
  rows of A and B (`kitm.relevance.cider_features`), keyed by (n-gram, level). With U the distinct keys of the
  batch, the Q hypotheses are scattered into a dense A [U, Q]; every reference entry e (caption r, key u,
  value b_e) then adds b_e * A[u, :] to S[r, :], one gather and one segment sum. The length penalty and the
  mean over each image's C references follow:
      R[p, q] = 10 / (n C) * sum_c exp(-(l_q - l_{p,c})^2 / (2 sigma^2)) * S[(p, c), q].
  Cost: O(entries x Q) multiply-adds, about 3 M at batch 128 (40 entries per caption, C = 5).
* Sentence-embedding relevance (`batch_sentence_relevance`): the ladder paper's image-caption relevance is the
  cosine of caption q with image p's own caption, a product of stored unit embeddings: R = E_p E_q^T.
"""

from __future__ import annotations

import tensorflow as tf

CIDER_SCALE = 10.0


def batch_cider(hypotheses: dict, references: dict, *, n: int = 4, sigma: float = 6.0) -> tf.Tensor:
    """CIDEr-D of Q hypothesis captions against the reference groups of P images, float32 [P, Q].

    Args:
        hypotheses: {"keys": int64 RaggedTensor [Q, None], "weights": float32 RaggedTensor [Q, None] (A values),
            "lengths": int [Q]}.
        references: {"keys": int64 RaggedTensor [P, C, None], "weights": float32 RaggedTensor [P, C, None]
            (B values), "lengths": int [P, C]}; every image has the same C captions.
        n: the n-gram orders the stored features count (the scores average orders 1..n).
        sigma: the length penalty's standard deviation (6 in CIDEr-D).
    """
    hypothesis_keys = hypotheses["keys"]
    num_hypotheses = hypothesis_keys.nrows(out_type=tf.int32)
    hypothesis_rows = tf.cast(hypothesis_keys.value_rowids(), tf.int32)
    hypothesis_flat = hypothesis_keys.flat_values
    reference_keys = references["keys"]
    num_images = reference_keys.nrows(out_type=tf.int32)
    captions_per_image = tf.shape(references["lengths"])[1]
    # Row of each reference entry in the flat [P * C] list of reference captions.
    reference_rows = tf.cast(reference_keys.values.value_rowids(), tf.int32)
    reference_flat = reference_keys.flat_values

    unique_keys, positions = tf.unique(tf.concat([hypothesis_flat, reference_flat], axis=0), out_idx=tf.int32)
    num_hypothesis_entries = tf.shape(hypothesis_flat)[0]
    hypothesis_positions = positions[:num_hypothesis_entries]
    reference_positions = positions[num_hypothesis_entries:]
    # A caption holds each (n-gram, level) key once, so no two hypothesis entries land on one cell.
    a = tf.scatter_nd(tf.stack([hypothesis_positions, hypothesis_rows], axis=1),
                      tf.cast(hypotheses["weights"].flat_values, tf.float32),
                      tf.stack([tf.shape(unique_keys)[0], num_hypotheses]))
    reference_weights = tf.cast(references["weights"].flat_values, tf.float32)
    products = tf.gather(a, reference_positions) * reference_weights[:, None]  # [reference entries, Q]
    similarity = tf.math.unsorted_segment_sum(products, reference_rows, num_images * captions_per_image)

    hypothesis_lengths = tf.cast(hypotheses["lengths"], tf.float32)
    reference_lengths = tf.reshape(tf.cast(references["lengths"], tf.float32), [-1])
    delta = hypothesis_lengths[None, :] - reference_lengths[:, None]  # [P * C, Q]
    penalty = tf.exp(-tf.square(delta) / (2.0 * sigma * sigma))
    per_reference = tf.reshape(penalty * similarity, [num_images, captions_per_image, num_hypotheses])
    scale = CIDER_SCALE / (n * tf.cast(captions_per_image, tf.float32))
    return scale * tf.reduce_sum(per_reference, axis=1)


def batch_sentence_relevance(image_caption_embeddings: tf.Tensor, caption_embeddings: tf.Tensor) -> tf.Tensor:
    """R[p, q] = cos(caption q, image p's own caption) from unit embeddings [P, D] and [Q, D], float32 [P, Q]."""
    return tf.linalg.matmul(image_caption_embeddings, caption_embeddings, transpose_b=True)

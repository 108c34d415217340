"""Similarity matrices and masks shared by losses and evaluation."""

from __future__ import annotations

import tensorflow as tf


def cosine_similarity_matrix(image_embeddings: tf.Tensor, text_embeddings: tf.Tensor) -> tf.Tensor:
    """`s[p, q] = <x_p, y_q>`: the [B_images, B_captions] cosine matrix of unit-norm embeddings.

    The encoders already L2-normalise their outputs, so the dot product is the cosine; normalising
    again here would hide an encoder that forgot to.
    """
    return tf.matmul(image_embeddings, text_embeddings, transpose_b=True)


def same_image_mask(image_index: tf.Tensor) -> tf.Tensor:
    """`mask[p, q] = image_index[p] == image_index[q]`, bool [B, B].

    When every caption of an image is a separate sample, one image can occur several times in a
    batch; those pairs are positives, not negatives.
    """
    image_index = tf.reshape(image_index, [-1])
    return tf.equal(image_index[:, None], image_index[None, :])


def negative_mask(batch_size_or_similarity: tf.Tensor, image_index: tf.Tensor | None = None) -> tf.Tensor:
    """Bool [B, B] that is True where (p, q) is a negative pair: off the diagonal and, when
    `image_index` is given, not two samples of the same image."""
    similarity = batch_size_or_similarity
    rows = tf.shape(similarity)[0]
    cols = tf.shape(similarity)[1]
    off_diagonal = tf.logical_not(tf.eye(rows, cols, dtype=tf.bool))
    if image_index is None:
        return off_diagonal
    return tf.logical_and(off_diagonal, tf.logical_not(same_image_mask(image_index)))

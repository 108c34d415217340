"""Similarity matrices and masks shared by losses and evaluation (keras.ops: every Keras backend)."""

from __future__ import annotations

from keras import ops


def cosine_similarity_matrix(image_embeddings, text_embeddings):
    """`s[p, q] = <x_p, y_q>`: the [B_images, B_captions] cosine matrix of unit-norm embeddings.

    The encoders already L2-normalise their outputs, so the dot product is the cosine; normalising
    again here would hide an encoder that forgot to. (An einsum rather than `ops.matmul`: Keras' PyTorch backend
    computes a float64 matmul in float32; the einsum is the same product in the inputs' dtype on every backend.)
    """
    return ops.einsum("pd,qd->pq", image_embeddings, text_embeddings)


def same_image_mask(image_index):
    """`mask[p, q] = image_index[p] == image_index[q]`, bool [B, B].

    When every caption of an image is a separate sample, one image can occur several times in a
    batch; those pairs are positives, not negatives.
    """
    image_index = ops.reshape(ops.convert_to_tensor(image_index), (-1,))
    return ops.equal(ops.expand_dims(image_index, 1), ops.expand_dims(image_index, 0))


def diagonal_mask(rows, columns):
    """Bool [rows, columns], True on the main diagonal; `rows` and `columns` may be dynamic (traced) sizes."""
    return ops.equal(ops.expand_dims(ops.arange(rows), 1), ops.expand_dims(ops.arange(columns), 0))


def negative_mask(batch_size_or_similarity, image_index=None):
    """Bool [B, B] that is True where (p, q) is a negative pair: off the diagonal and, when
    `image_index` is given, not two samples of the same image."""
    similarity = ops.convert_to_tensor(batch_size_or_similarity)
    rows, cols = ops.shape(similarity)[0], ops.shape(similarity)[1]
    off_diagonal = ops.logical_not(diagonal_mask(rows, cols))
    if image_index is None:
        return off_diagonal
    return ops.logical_and(off_diagonal, ops.logical_not(same_image_mask(image_index)))

"""The semantic-centre losses as plain per-row functions (Malali & Keller, Eqs. 6-7 and Sec. 3.2; formulas in
kitm.losses.centers), and the gradient scaling that gives the centres their batch-mean step."""

from __future__ import annotations

import tensorflow as tf

from kitm.losses.centers.checks import _non_negative, _pair, _positive_int

DEFAULT_DELTA = 0.1
# Rows of the [N_q, N_q] centre-distance matrix computed at once in the repulsion term.
DEFAULT_REPULSION_CHUNK = 1024


def scale_gradient(value: tf.Tensor, scale) -> tf.Tensor:
    """Identity on the forward pass; multiplies the gradient flowing back into `value` by `scale`."""
    frozen = tf.stop_gradient(value)
    return frozen + tf.cast(scale, value.dtype) * (value - frozen)


def _center_gradient_scale(reduction: str | None, rows: tf.Tensor, dtype) -> tf.Tensor:
    """1/b under reduction "sum" (the centre step is taken on the batch-mean loss, kitm.losses.centers)."""
    if reduction == "sum":
        return 1.0 / tf.maximum(tf.cast(rows, dtype), 1.0)
    return tf.constant(1.0, dtype)


def _squared_distances(points: tf.Tensor, centers: tf.Tensor) -> tf.Tensor:
    """`|p_i - c_j|^2`, [P, C], through the Gram matrix; clipped at 0 against rounding."""
    squared = (tf.reduce_sum(tf.square(points), axis=1)[:, None] + tf.reduce_sum(tf.square(centers), axis=1)[None, :]
               - 2.0 * tf.matmul(points, centers, transpose_b=True))
    return tf.nn.relu(squared)


def semantic_center_terms(image, text, centers, *, delta: float = DEFAULT_DELTA) -> tuple[tf.Tensor, tf.Tensor]:
    """Per-row terms of the center loss (Malali & Keller, Eq. 6): `([|x_p - c_p|^2 - delta]+, [|y_p - c_p|^2 - delta]+)`.

    Args:
      image, text: [B, D] embeddings x_p and y_p.
      centers: [B, D], the centre of row p's image (c_{n_p}, already gathered).
      delta: the hinge's radius, >= 0.
    """
    image, text = _pair(image, text)
    centers = tf.convert_to_tensor(centers, dtype=image.dtype)
    if centers.shape.rank != 2 or not centers.shape.is_compatible_with(image.shape):
        raise ValueError(f"centers must be [B, D] like the embeddings {image.shape}; got shape {centers.shape}.")
    delta = _non_negative("delta", delta)
    # Differences, not the Gram formula: exact where a sample sits on its centre.
    image_term = tf.nn.relu(tf.reduce_sum(tf.square(image - centers), axis=1) - delta)
    text_term = tf.nn.relu(tf.reduce_sum(tf.square(text - centers), axis=1) - delta)
    return image_term, text_term


def semantic_center_loss(image, text, centers, *, delta: float = DEFAULT_DELTA) -> tf.Tensor:
    """Center loss per batch row [B] (Malali & Keller, Eq. 6); its sum is L_C. Arguments as `semantic_center_terms`.

    Example (hand-computed): x = [1, 0], y = [0, 1], c = [0.5, 0.5], delta = 0.1:
    |x - c|^2 = |y - c|^2 = 0.5, so the row's value is 0.4 + 0.4 = 0.8.
    """
    image_term, text_term = semantic_center_terms(image, text, centers, delta=delta)
    return image_term + text_term


def center_repulsion(centers, *, delta: float = DEFAULT_DELTA, chunk_size: int = DEFAULT_REPULSION_CHUNK) -> tf.Tensor:
    """`sum_{k1 != k2} [2 delta - |c_k1 - c_k2|^2]+` over ordered pairs (Malali & Keller, Eq. 7, last term): a scalar.

    Rows of the [N_q, N_q] distance matrix are computed `chunk_size` at a time, so memory stays at
    `chunk_size * N_q` floats for any N_q (the paper goes up to 6000 centres).
    """
    centers = tf.convert_to_tensor(centers)
    if centers.shape.rank != 2:
        raise ValueError(f"centers must be [N_q, D]; got shape {centers.shape}.")
    delta = _non_negative("delta", delta)
    chunk_size = _positive_int("chunk_size", chunk_size)
    count = centers.shape[0]
    if count is None:
        raise ValueError("center_repulsion needs a static number of centres (the first dimension of centers).")
    total = tf.zeros([], centers.dtype)
    for start in range(0, count, chunk_size):  # a loop over chunks, unrolled: N_q is fixed by the layer
        rows = centers[start:start + chunk_size]
        hinge = tf.nn.relu(2.0 * delta - _squared_distances(rows, centers))
        size = rows.shape[0]
        not_self = tf.not_equal(tf.range(start, start + size)[:, None], tf.range(count)[None, :])
        total += tf.reduce_sum(tf.where(not_self, hinge, tf.zeros_like(hinge)))
    return total


def quantized_center_terms(image, text, image_weights, text_weights, centers, *, delta: float = DEFAULT_DELTA,
                           repulsion_weight: float = 1.0,
                           chunk_size: int = DEFAULT_REPULSION_CHUNK) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Per-row terms of the quantized center loss (Malali & Keller, Eq. 7): (image, text, repulsion), each [B].

    `image[p] = sum_j w_x_p(j) [|x_p - c_j|^2 - delta]+`, likewise `text[p]` with y_p and w_y_p, and
    `repulsion[p] = a_c * center_repulsion(centers) / B`: the batch-level repulsion shared evenly by the
    rows so that the per-row values sum to Eq. 7.

    Args:
      image, text: [B, D] embeddings.
      image_weights, text_weights: [B, N_q] soft assignments (softmax outputs; rows sum to 1).
      centers: [N_q, D] quantized centres.
      delta: hinge radius (>= 0); repulsion_weight: a_c (>= 0); chunk_size: see `center_repulsion`.
    """
    image, text = _pair(image, text)
    image_weights, text_weights = _pair(image_weights, text_weights, "image_weights", "text_weights")
    centers = tf.convert_to_tensor(centers, dtype=image.dtype)
    if centers.shape.rank != 2 or not centers.shape[1:].is_compatible_with(image.shape[1:]):
        raise ValueError(f"centers must be [N_q, D] with the embeddings' D ({image.shape}); got {centers.shape}.")
    if not image_weights.shape.is_compatible_with([image.shape[0], centers.shape[0]]):
        raise ValueError(f"image_weights and text_weights must be [B, N_q] = [{image.shape[0]}, {centers.shape[0]}]; "
                         f"got {image_weights.shape}.")
    delta = _non_negative("delta", delta)
    repulsion_weight = _non_negative("repulsion_weight", repulsion_weight)
    image_weights = tf.cast(image_weights, image.dtype)
    text_weights = tf.cast(text_weights, image.dtype)
    image_term = tf.reduce_sum(image_weights * tf.nn.relu(_squared_distances(image, centers) - delta), axis=1)
    text_term = tf.reduce_sum(text_weights * tf.nn.relu(_squared_distances(text, centers) - delta), axis=1)
    rows = tf.cast(tf.shape(image)[0], image.dtype)
    repulsion = repulsion_weight * center_repulsion(centers, delta=delta, chunk_size=chunk_size)
    repulsion_rows = tf.fill(tf.shape(image_term), tf.math.divide_no_nan(repulsion, rows))
    return image_term, text_term, repulsion_rows


def quantized_center_loss(image, text, image_weights, text_weights, centers, *, delta: float = DEFAULT_DELTA,
                          repulsion_weight: float = 1.0, chunk_size: int = DEFAULT_REPULSION_CHUNK) -> tf.Tensor:
    """Quantized center loss per batch row [B] (Malali & Keller, Eq. 7); its sum is L_Q (`quantized_center_terms`)."""
    return tf.add_n(list(quantized_center_terms(image, text, image_weights, text_weights, centers, delta=delta,
                                                repulsion_weight=repulsion_weight, chunk_size=chunk_size)))


def index_cross_entropy_terms(image_logits, text_logits, image_index) -> tuple[tf.Tensor, tf.Tensor]:
    """Per-row sparse softmax cross-entropies of both heads against the image index (Malali & Keller, Sec. 3.2).

    `(-log softmax(image_logits[p])[n_p], -log softmax(text_logits[p])[n_p])`, each [B].
    """
    image_logits, text_logits = _pair(image_logits, text_logits, "image_logits", "text_logits")
    image_index = tf.cast(tf.reshape(tf.convert_to_tensor(image_index), [-1]), tf.int32)
    return (tf.nn.sparse_softmax_cross_entropy_with_logits(labels=image_index, logits=image_logits),
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=image_index, logits=text_logits))


"""The semantic-centre losses as plain per-row functions (Malali & Keller, Eqs. 6-7 and Sec. 3.2; formulas in
kitm.losses.centers), and the gradient scaling that gives the centres their batch-mean step."""

from __future__ import annotations

from keras import ops

from kitm.losses.base import shapes_compatible
from kitm.losses.centers.checks import _non_negative, _pair, _positive_int

DEFAULT_DELTA = 0.1
# Rows of the [N_q, N_q] centre-distance matrix computed at once in the repulsion term.
DEFAULT_REPULSION_CHUNK = 1024


def scale_gradient(value, scale):
    """Identity on the forward pass; multiplies the gradient flowing back into `value` by `scale`."""
    frozen = ops.stop_gradient(value)
    return frozen + ops.cast(scale, value.dtype) * (value - frozen)


def _center_gradient_scale(reduction: str | None, rows, dtype):
    """1/b under reduction "sum" (the centre step is taken on the batch-mean loss, kitm.losses.centers)."""
    if reduction == "sum":
        return 1.0 / ops.maximum(ops.cast(rows, dtype), 1.0)
    return ops.convert_to_tensor(1.0, dtype)


def _squared_distances(points, centers):
    """`|p_i - c_j|^2`, [P, C], through the Gram matrix; clipped at 0 against rounding."""
    # einsum, not ops.matmul: Keras' PyTorch backend computes a float64 matmul in float32 (its dtype promotion maps
    # float64 to float32 off TensorFlow), which would cost the float64 path its precision.
    squared = (ops.sum(ops.square(points), axis=1)[:, None] + ops.sum(ops.square(centers), axis=1)[None, :]
               - 2.0 * ops.einsum("pd,cd->pc", points, centers))
    return ops.relu(squared)


def semantic_center_terms(image, text, centers, *, delta: float = DEFAULT_DELTA) -> tuple:
    """Per-row terms of the center loss (Malali & Keller, Eq. 6): `([|x_p - c_p|^2 - delta]+, [|y_p - c_p|^2 - delta]+)`.

    Args:
      image, text: [B, D] embeddings x_p and y_p.
      centers: [B, D], the centre of row p's image (c_{n_p}, already gathered).
      delta: the hinge's radius, >= 0.
    """
    image, text = _pair(image, text)
    centers = ops.convert_to_tensor(centers, dtype=image.dtype)
    if not shapes_compatible(centers.shape, image.shape):
        raise ValueError(f"centers must be [B, D] like the embeddings {tuple(image.shape)}; got shape "
                         f"{tuple(centers.shape)}.")
    delta = _non_negative("delta", delta)
    # Differences, not the Gram formula: exact where a sample sits on its centre.
    image_term = ops.relu(ops.sum(ops.square(image - centers), axis=1) - delta)
    text_term = ops.relu(ops.sum(ops.square(text - centers), axis=1) - delta)
    return image_term, text_term


def semantic_center_loss(image, text, centers, *, delta: float = DEFAULT_DELTA):
    """Center loss per batch row [B] (Malali & Keller, Eq. 6); its sum is L_C. Arguments as `semantic_center_terms`.

    Example (hand-computed): x = [1, 0], y = [0, 1], c = [0.5, 0.5], delta = 0.1:
    |x - c|^2 = |y - c|^2 = 0.5, so the row's value is 0.4 + 0.4 = 0.8.
    """
    image_term, text_term = semantic_center_terms(image, text, centers, delta=delta)
    return image_term + text_term


def center_repulsion(centers, *, delta: float = DEFAULT_DELTA, chunk_size: int = DEFAULT_REPULSION_CHUNK):
    """`sum_{k1 != k2} [2 delta - |c_k1 - c_k2|^2]+` over ordered pairs (Malali & Keller, Eq. 7, last term): a scalar.

    Rows of the [N_q, N_q] distance matrix are computed `chunk_size` at a time, so memory stays at
    `chunk_size * N_q` floats for any N_q (the paper goes up to 6000 centres).
    """
    centers = ops.convert_to_tensor(centers)
    if len(centers.shape) != 2:
        raise ValueError(f"centers must be [N_q, D]; got shape {tuple(centers.shape)}.")
    delta = _non_negative("delta", delta)
    chunk_size = _positive_int("chunk_size", chunk_size)
    count = centers.shape[0]
    if count is None:
        raise ValueError("center_repulsion needs a static number of centres (the first dimension of centers).")
    total = ops.zeros([], centers.dtype)
    for start in range(0, count, chunk_size):  # a loop over chunks, unrolled: N_q is fixed by the layer
        size = min(chunk_size, count - start)
        rows = centers[start:start + size]
        hinge = ops.relu(2.0 * delta - _squared_distances(rows, centers))
        not_self = ops.not_equal(ops.arange(start, start + size)[:, None], ops.arange(count)[None, :])
        total += ops.sum(ops.where(not_self, hinge, ops.zeros_like(hinge)))
    return total


def quantized_center_terms(image, text, image_weights, text_weights, centers, *, delta: float = DEFAULT_DELTA,
                           repulsion_weight: float = 1.0,
                           chunk_size: int = DEFAULT_REPULSION_CHUNK) -> tuple:
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
    centers = ops.convert_to_tensor(centers, dtype=image.dtype)
    if len(centers.shape) != 2 or not shapes_compatible(centers.shape[1:], image.shape[1:]):
        raise ValueError(f"centers must be [N_q, D] with the embeddings' D ({tuple(image.shape)}); got "
                         f"{tuple(centers.shape)}.")
    if not shapes_compatible(image_weights.shape, (image.shape[0], centers.shape[0])):
        raise ValueError(f"image_weights and text_weights must be [B, N_q] = [{image.shape[0]}, {centers.shape[0]}]; "
                         f"got {tuple(image_weights.shape)}.")
    delta = _non_negative("delta", delta)
    repulsion_weight = _non_negative("repulsion_weight", repulsion_weight)
    image_weights = ops.cast(image_weights, image.dtype)
    text_weights = ops.cast(text_weights, image.dtype)
    image_term = ops.sum(image_weights * ops.relu(_squared_distances(image, centers) - delta), axis=1)
    text_term = ops.sum(text_weights * ops.relu(_squared_distances(text, centers) - delta), axis=1)
    rows = ops.cast(ops.shape(image)[0], image.dtype)
    repulsion = repulsion_weight * center_repulsion(centers, delta=delta, chunk_size=chunk_size)
    repulsion_rows = ops.zeros_like(image_term) + ops.divide_no_nan(repulsion, rows)
    return image_term, text_term, repulsion_rows


def quantized_center_loss(image, text, image_weights, text_weights, centers, *, delta: float = DEFAULT_DELTA,
                          repulsion_weight: float = 1.0, chunk_size: int = DEFAULT_REPULSION_CHUNK):
    """Quantized center loss per batch row [B] (Malali & Keller, Eq. 7); its sum is L_Q (`quantized_center_terms`)."""
    image_term, text_term, repulsion = quantized_center_terms(image, text, image_weights, text_weights, centers,
                                                              delta=delta, repulsion_weight=repulsion_weight,
                                                              chunk_size=chunk_size)
    return image_term + text_term + repulsion


def _sparse_cross_entropy(logits, index):
    """`logsumexp(logits[p]) - logits[p, n_p]`, [B]: no [B, N] one-hot (N is the number of training images, 10^5 on
    COCO), and no `0 * -inf` where a logit is far below the others."""
    target = ops.take_along_axis(logits, index[:, None], axis=1)[:, 0]
    return ops.logsumexp(logits, axis=1) - target


def index_cross_entropy_terms(image_logits, text_logits, image_index) -> tuple:
    """Per-row sparse softmax cross-entropies of both heads against the image index (Malali & Keller, Sec. 3.2).

    `(-log softmax(image_logits[p])[n_p], -log softmax(text_logits[p])[n_p])`, each [B].
    """
    image_logits, text_logits = _pair(image_logits, text_logits, "image_logits", "text_logits")
    image_index = ops.cast(ops.reshape(ops.convert_to_tensor(image_index), [-1]), "int32")
    return _sparse_cross_entropy(image_logits, image_index), _sparse_cross_entropy(text_logits, image_index)


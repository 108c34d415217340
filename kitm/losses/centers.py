"""Semantic centers (Malali & Keller): center loss, quantized center loss, image-index heads.

docs/methods.md#centers. With x_p, y_p the embeddings of image p and caption
p, n_p = `y_true["image_index"][p]` and `[v]+ = max(v, 0)`:

- Center loss (Eq. 6), one centre c_n per training image, shared by the image and its captions:
      L_C = sum_p [|x_p - c_{n_p}|^2 - delta]+  +  [|y_p - c_{n_p}|^2 - delta]+
- Quantized center loss (Eq. 7), N_q << N centres c_j and soft assignments w (a softmax layer,
  `kitm.layers.SoftmaxQuantizedCenters`):
      L_Q = sum_p sum_j w_x_p(j) [|x_p - c_j|^2 - delta]+  +  sum_p sum_j w_y_p(j) [|y_p - c_j|^2 - delta]+
            + a_c sum_{k1 != k2} [2 delta - |c_k1 - c_k2|^2]+
  The last sum runs over ordered pairs (each unordered pair counts twice), a_c = 1.
- Cross-entropy heads (Sec. 3.2): a Dense(N) classifier on each modality predicts the image index n_p;
      L_CE^I + L_CE^T = sum_p -log softmax(W_I x_p + b_I)[n_p] - log softmax(W_T y_p + b_T)[n_p].

The paper leaves delta unspecified; kitm defaults to 0.1 (squared L2 on unit vectors, so a sample may
sit within 0.32 of its centre and quantized centres are pushed to squared distance >= 0.2).

Parameters that belong to the objective, not to the encoders
-----------------------------------------------------------
The centres, the quantizer and the classifier heads exist only to shape training: retrieval and the
served model use the embeddings alone. So each of these losses owns its parameters (as Keras layers)
*and the optimizer that updates them*, and says so through `optimizer_groups()` ->
`[(optimizer, variables)]`. The DualEncoder's training step takes one gradient tape over the weighted
total, applies the model's optimizer to the encoders and each group's optimizer to its variables
(under MirroredStrategy each optimizer all-reduces its gradients across replicas, as the model's
does). This gives the paper's separate centre optimizer (SGD, lr 0.5, Sec. 4.1) without touching the
model's optimizer, and freezing works per part: `model.trainable = False` with the quantizer left
trainable is the paper's phase 2. Create these losses inside `strategy.scope()`, like the model: their
variables and optimizers are built at construction.

Centre learning rate. The paper's "SGD, lr 0.5" is the usual center-loss setting (Wen et al. [37] and
its common implementations), where the centre step is taken on the *batch mean* of the center loss.
kitm's losses are batch sums (reduction "sum"); on a sum, lr 0.5 would move a centre met by one image
and one caption to x + y - c, a reflection about their midpoint that never settles. So with reduction
"sum" the gradient that reaches the centres is divided by the local batch size (the encoders'
gradients are untouched): the centre step is `lr * gradient of the batch-mean loss`, whatever the
batch size or the number of replicas.
"""

from __future__ import annotations

import copy
from typing import Mapping

import keras
import numpy as np
import tensorflow as tf

from kitm.layers.quantized_centers import SoftmaxQuantizedCenters
from kitm.losses.base import RetrievalLoss

__all__ = [
    "DEFAULT_DELTA",
    "semantic_center_terms",
    "semantic_center_loss",
    "center_repulsion",
    "quantized_center_terms",
    "quantized_center_loss",
    "index_cross_entropy_terms",
    "SemanticCenters",
    "ImageIndexHeads",
    "SemanticCenterLoss",
    "QuantizedCenterLoss",
    "ImageIndexCrossEntropy",
]

DEFAULT_DELTA = 0.1
# Rows of the [N_q, N_q] centre-distance matrix computed at once in the repulsion term.
DEFAULT_REPULSION_CHUNK = 1024


# --------------------------------------------------------------------------------------------------
# Checks and small helpers
# --------------------------------------------------------------------------------------------------

def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or int(value) != value or int(value) < 1:
        raise ValueError(f"{name} must be a positive integer; got {value!r}.")
    return int(value)


def _non_negative(name: str, value) -> float:
    value = float(value)
    if not value >= 0:  # also rejects NaN
        raise ValueError(f"{name} must be >= 0; got {value}.")
    return value


def _pair(image, text, name_image: str = "image", name_text: str = "text") -> tuple[tf.Tensor, tf.Tensor]:
    image, text = tf.convert_to_tensor(image), tf.convert_to_tensor(text)
    if image.shape.rank != 2 or text.shape.rank != 2:
        raise ValueError(f"{name_image} and {name_text} must be [B, D]; got shapes {image.shape} and {text.shape}.")
    if not image.shape.is_compatible_with(text.shape):
        raise ValueError(f"{name_image} and {name_text} must have the same shape [B, D]; got {image.shape} and "
                         f"{text.shape}.")
    if not image.dtype.is_floating or image.dtype != text.dtype:
        raise ValueError(f"{name_image} and {name_text} must be floats of one dtype; got {image.dtype.name} and "
                         f"{text.dtype.name}.")
    return image, text


def _embeddings(y_pred, embedding_dim: int, loss_name: str) -> tuple[tf.Tensor, tf.Tensor]:
    if not isinstance(y_pred, Mapping) or "image" not in y_pred or "text" not in y_pred:
        raise ValueError(f"{loss_name} takes y_pred = {{'image': [B, D], 'text': [B, D]}}; got "
                         f"{type(y_pred).__name__} with keys {list(y_pred) if isinstance(y_pred, Mapping) else 'n/a'}.")
    image, text = _pair(y_pred["image"], y_pred["text"], "y_pred['image']", "y_pred['text']")
    if image.shape[-1] is not None and image.shape[-1] != embedding_dim:
        raise ValueError(f"{loss_name} was built for embedding_dim={embedding_dim}; got embeddings of shape "
                         f"{image.shape}.")
    return image, text


def _image_index(y_true, num_images: int, loss_name: str) -> tf.Tensor:
    index = RetrievalLoss.optional(y_true, "image_index")
    if index is None:
        raise ValueError(f"{loss_name} needs y_true['image_index'] (int [B], the training image of each row).")
    index = tf.convert_to_tensor(index)
    if not index.dtype.is_integer:
        raise ValueError(f"y_true['image_index'] must be integers; got dtype {index.dtype.name}.")
    index = tf.cast(tf.reshape(index, [-1]), tf.int32)
    # tf.gather silently returns zeros for an out-of-range index on GPU; say which input is wrong instead.
    tf.debugging.assert_non_negative(index, message=f"{loss_name}: y_true['image_index'] must be >= 0")
    tf.debugging.assert_less(index, num_images,
                             message=f"{loss_name}: y_true['image_index'] must be < num_images={num_images}")
    return index


def scale_gradient(value: tf.Tensor, scale) -> tf.Tensor:
    """Identity on the forward pass; multiplies the gradient flowing back into `value` by `scale`."""
    frozen = tf.stop_gradient(value)
    return frozen + tf.cast(scale, value.dtype) * (value - frozen)


def _center_gradient_scale(reduction: str | None, rows: tf.Tensor, dtype) -> tf.Tensor:
    """1/b under reduction "sum" (the centre step is taken on the batch-mean loss, module docstring)."""
    if reduction == "sum":
        return 1.0 / tf.maximum(tf.cast(rows, dtype), 1.0)
    return tf.constant(1.0, dtype)


def _squared_distances(points: tf.Tensor, centers: tf.Tensor) -> tf.Tensor:
    """`|p_i - c_j|^2`, [P, C], through the Gram matrix; clipped at 0 against rounding."""
    squared = (tf.reduce_sum(tf.square(points), axis=1)[:, None] + tf.reduce_sum(tf.square(centers), axis=1)[None, :]
               - 2.0 * tf.matmul(points, centers, transpose_b=True))
    return tf.nn.relu(squared)


def _optimizer(value, default_factory, name: str):
    if value is None:
        return default_factory()
    if isinstance(value, (str, Mapping)):
        # keras.optimizers.get edits a config dict in place (it lower-cases class_name): give it a copy.
        return keras.optimizers.get(copy.deepcopy(value) if isinstance(value, Mapping) else value)
    if not isinstance(value, keras.optimizers.Optimizer):
        raise ValueError(f"{name} must be a keras optimizer, its name or its config; got {type(value).__name__}.")
    return value


def _serialize_optimizer(optimizer):
    return keras.optimizers.serialize(optimizer) if optimizer is not None else None


# --------------------------------------------------------------------------------------------------
# Plain functions
# --------------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------------
# The parameters these losses own
# --------------------------------------------------------------------------------------------------

@keras.saving.register_keras_serializable(package="kitm")
class SemanticCenters(keras.layers.Layer):
    """The table of unquantized centres c_n, [num_images, embedding_dim]; `call(image_index)` gathers rows.

    Gathering straight from the variable keeps the gradient sparse (`tf.IndexedSlices` over the rows
    of the batch), so a step touches B rows, not the whole table.
    """

    def __init__(self, num_images: int, embedding_dim: int, initializer="zeros", **kwargs):
        super().__init__(**kwargs)
        self.num_images = _positive_int("num_images", num_images)
        self.embedding_dim = _positive_int("embedding_dim", embedding_dim)
        self.initializer = keras.initializers.get(initializer)
        self.centers = self.add_weight(shape=(self.num_images, self.embedding_dim), initializer=self.initializer,
                                       name="centers", trainable=True)

    def call(self, image_index):
        variable = self.centers.value if hasattr(self.centers, "value") else self.centers
        return tf.gather(variable, image_index)

    def get_config(self):
        config = super().get_config()
        config.update(num_images=self.num_images, embedding_dim=self.embedding_dim,
                      initializer=keras.initializers.serialize(self.initializer))
        return config


@keras.saving.register_keras_serializable(package="kitm")
class ImageIndexHeads(keras.layers.Layer):
    """One Dense(num_images) classifier per modality (Malali & Keller, Tables 1-2, "FC (softmax)").

    `call(image, text)` -> (image logits, text logits), each [B, num_images].
    """

    def __init__(self, num_images: int, embedding_dim: int, **kwargs):
        super().__init__(**kwargs)
        self.num_images = _positive_int("num_images", num_images)
        self.embedding_dim = _positive_int("embedding_dim", embedding_dim)
        self.image_head = keras.layers.Dense(self.num_images, name="image_head")
        self.text_head = keras.layers.Dense(self.num_images, name="text_head")
        self.image_head.build((None, self.embedding_dim))
        self.text_head.build((None, self.embedding_dim))
        self.built = True

    def call(self, image, text):
        return self.image_head(image), self.text_head(text)

    def get_config(self):
        config = super().get_config()
        config.update(num_images=self.num_images, embedding_dim=self.embedding_dim)
        return config


class _OwnsParameters:
    """Mixin: a loss that owns trainable layers and their optimizers (module docstring)."""

    def optimizer_groups(self) -> list[tuple[keras.optimizers.Optimizer, list]]:
        """`[(optimizer, trainable variables)]` that the model's training step updates; frozen parts are left out."""
        groups = []
        for optimizer, layer_or_variables in self._parameter_groups():
            variables = [v for v in layer_or_variables if getattr(v, "trainable", True)]
            if variables:
                groups.append((optimizer, variables))
        return groups

    @property
    def trainable_variables(self) -> list:
        return [v for _, variables in self.optimizer_groups() for v in variables]

    def _parameter_groups(self):
        raise TypeError(f"{type(self).__name__} is abstract: subclasses list their (optimizer, parameters) groups")


# --------------------------------------------------------------------------------------------------
# Loss classes
# --------------------------------------------------------------------------------------------------

@keras.saving.register_keras_serializable(package="kitm")
class SemanticCenterLoss(_OwnsParameters, RetrievalLoss):
    """Center loss of Malali & Keller (Eq. 6) with its own [num_images, D] table of centres and their optimizer.

    Uses `y_true["image_index"]` (int [B], in [0, num_images)). Terms: "image" and "text".

    Args:
      num_images: N, the number of training images (one centre each).
      embedding_dim: D, the joint space's size.
      delta: hinge radius (the paper gives no value; kitm: 0.1).
      centers_learning_rate: SGD step on the batch-mean loss (paper: 0.5; module docstring).
      centers_optimizer: any keras optimizer (e.g. SGD with the paper's x0.1 every 15 epochs schedule)
        instead of SGD(centers_learning_rate).
      centers_initializer: initial centres (keras initializer; zeros by default, the paper does not say).
    `centers` is the [N, D] variable; `optimizer_groups()` hands it and its optimizer to the model.
    """

    term_names = ("image", "text")

    def __init__(self, num_images: int, embedding_dim: int, delta: float = DEFAULT_DELTA,
                 centers_learning_rate: float = 0.5, centers_optimizer=None, centers_initializer="zeros",
                 name: str = "centers", reduction: str = "sum", dtype=None):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        self.num_images = _positive_int("num_images", num_images)
        self.embedding_dim = _positive_int("embedding_dim", embedding_dim)
        self.delta = _non_negative("delta", delta)
        self.centers_learning_rate = _non_negative("centers_learning_rate", centers_learning_rate)
        self.table = SemanticCenters(self.num_images, self.embedding_dim, centers_initializer, name=f"{name}_table")
        self.centers_optimizer = _optimizer(centers_optimizer, lambda: keras.optimizers.SGD(self.centers_learning_rate),
                                            "centers_optimizer")
        self._custom_optimizer = centers_optimizer is not None
        self.centers_optimizer.build(self.table.trainable_variables)

    @property
    def centers(self):
        """The [num_images, D] centre variable."""
        return self.table.centers

    def _parameter_groups(self):
        return [(self.centers_optimizer, self.table.trainable_variables)]

    def compute_terms(self, y_true, y_pred):
        image, text = _embeddings(y_pred, self.embedding_dim, type(self).__name__)
        index = _image_index(y_true, self.num_images, type(self).__name__)
        centers = tf.cast(self.table(index), image.dtype)
        centers = scale_gradient(centers, _center_gradient_scale(self.reduction, tf.shape(image)[0], image.dtype))
        image_term, text_term = semantic_center_terms(image, text, centers, delta=self.delta)
        return {"image": image_term, "text": text_term}

    def get_config(self):
        config = super().get_config()
        config.update(num_images=self.num_images, embedding_dim=self.embedding_dim, delta=self.delta,
                      centers_learning_rate=self.centers_learning_rate,
                      centers_optimizer=(_serialize_optimizer(self.centers_optimizer)
                                         if self._custom_optimizer else None),
                      centers_initializer=keras.initializers.serialize(self.table.initializer))
        return config


@keras.saving.register_keras_serializable(package="kitm")
class QuantizedCenterLoss(_OwnsParameters, RetrievalLoss):
    """Quantized center loss of Malali & Keller (Eq. 7) with its `SoftmaxQuantizedCenters` layer and optimizers.

    Needs only `y_pred`. Terms: "image", "text" and "repulsion" (the centre-repulsion term spread evenly
    over the rows). Initialise the centres from the unquantized ones (paper Sec. 4.1) with
    `initialize_from(center_loss.centers)` before the quantized phases.

    Args:
      num_centers: N_q.
      embedding_dim: D.
      delta: hinge radius (kitm default 0.1); repulsion_weight: a_c (paper: 1).
      centers_learning_rate: SGD step for the quantized centres on the batch-mean loss (as
        `SemanticCenterLoss`); centers_optimizer: any keras optimizer instead.
      assignment_optimizer: optimizer of the "N_q FC" assignment layer (default Adam(2e-5), the paper's
        rate for the phases that train it).
      quantizer: an existing `SoftmaxQuantizedCenters(num_centers)` to use instead of a new one.
      chunk_size: rows per chunk of the repulsion's [N_q, N_q] distances.
    """

    term_names = ("image", "text", "repulsion")

    def __init__(self, num_centers: int, embedding_dim: int, delta: float = DEFAULT_DELTA,
                 repulsion_weight: float = 1.0, centers_learning_rate: float = 0.5, centers_optimizer=None,
                 assignment_optimizer=None, quantizer: SoftmaxQuantizedCenters | None = None,
                 chunk_size: int = DEFAULT_REPULSION_CHUNK, name: str = "quantized_centers", reduction: str = "sum",
                 dtype=None):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        self.num_centers = _positive_int("num_centers", num_centers)
        self.embedding_dim = _positive_int("embedding_dim", embedding_dim)
        self.delta = _non_negative("delta", delta)
        self.repulsion_weight = _non_negative("repulsion_weight", repulsion_weight)
        self.centers_learning_rate = _non_negative("centers_learning_rate", centers_learning_rate)
        self.chunk_size = _positive_int("chunk_size", chunk_size)
        if quantizer is None:
            quantizer = SoftmaxQuantizedCenters(self.num_centers, name=f"{name}_quantizer")
        elif not isinstance(quantizer, SoftmaxQuantizedCenters) or quantizer.num_centers != self.num_centers:
            raise ValueError(f"quantizer must be a SoftmaxQuantizedCenters with num_centers={self.num_centers}; got "
                             f"{quantizer!r}.")
        if not quantizer.built:
            quantizer.build((None, self.embedding_dim))
        self.quantizer = quantizer
        self.centers_optimizer = _optimizer(centers_optimizer, lambda: keras.optimizers.SGD(self.centers_learning_rate),
                                            "centers_optimizer")
        self.assignment_optimizer = _optimizer(assignment_optimizer, lambda: keras.optimizers.Adam(2e-5),
                                               "assignment_optimizer")
        self._custom = {"centers_optimizer": centers_optimizer is not None,
                        "assignment_optimizer": assignment_optimizer is not None}
        self.centers_optimizer.build([self.quantizer.centers])
        self.assignment_optimizer.build(self.quantizer.assignment.trainable_variables)

    @property
    def centers(self):
        """The [N_q, D] quantized centre variable."""
        return self.quantizer.centers

    def initialize_from(self, centers, **kmeans_options) -> np.ndarray:
        """k-means of the unquantized centres -> initial quantized centres (see `SoftmaxQuantizedCenters`)."""
        return self.quantizer.initialize_from(centers, **kmeans_options)

    def _parameter_groups(self):
        assignment = self.quantizer.assignment.trainable_variables if self.quantizer.trainable else []
        centers = [self.quantizer.centers] if self.quantizer.trainable else []
        return [(self.assignment_optimizer, assignment), (self.centers_optimizer, centers)]

    def compute_terms(self, y_true, y_pred):
        image, text = _embeddings(y_pred, self.embedding_dim, type(self).__name__)
        image_weights = tf.cast(self.quantizer(image), image.dtype)
        text_weights = tf.cast(self.quantizer(text), image.dtype)
        centers = tf.cast(tf.convert_to_tensor(self.quantizer.centers), image.dtype)
        centers = scale_gradient(centers, _center_gradient_scale(self.reduction, tf.shape(image)[0], image.dtype))
        image_term, text_term, repulsion = quantized_center_terms(
            image, text, image_weights, text_weights, centers, delta=self.delta,
            repulsion_weight=self.repulsion_weight, chunk_size=self.chunk_size)
        # The repulsion is one term per batch, not per row: each of R replicas charges 1/R of it, so that the
        # replicas together weigh it as one device does on the global batch.
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        return {"image": image_term, "text": text_term, "repulsion": repulsion / replicas}

    def get_config(self):
        config = super().get_config()
        config.update(num_centers=self.num_centers, embedding_dim=self.embedding_dim, delta=self.delta,
                      repulsion_weight=self.repulsion_weight, centers_learning_rate=self.centers_learning_rate,
                      centers_optimizer=(_serialize_optimizer(self.centers_optimizer)
                                         if self._custom["centers_optimizer"] else None),
                      assignment_optimizer=(_serialize_optimizer(self.assignment_optimizer)
                                            if self._custom["assignment_optimizer"] else None),
                      quantizer=keras.saving.serialize_keras_object(self.quantizer), chunk_size=self.chunk_size)
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config.get("quantizer"), Mapping):
            config["quantizer"] = keras.saving.deserialize_keras_object(config["quantizer"])
        return cls(**config)


@keras.saving.register_keras_serializable(package="kitm")
class ImageIndexCrossEntropy(_OwnsParameters, RetrievalLoss):
    """L_CE^I + L_CE^T of Malali & Keller (Sec. 3.2): each embedding classified into its image index n_p.

    Owns an `ImageIndexHeads` layer (Dense(num_images) per modality) and its optimizer. Uses
    `y_true["image_index"]`. Terms: "image" and "text".

    Args:
      num_images: N, the number of classes; embedding_dim: D.
      optimizer: the heads' optimizer (default Adam(2e-4), the paper's phase-1 rate; pass one with the
        model's schedule to keep them in step).
    """

    term_names = ("image", "text")

    def __init__(self, num_images: int, embedding_dim: int, optimizer=None, name: str = "index_ce",
                 reduction: str = "sum", dtype=None):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        self.num_images = _positive_int("num_images", num_images)
        self.embedding_dim = _positive_int("embedding_dim", embedding_dim)
        self.heads = ImageIndexHeads(self.num_images, self.embedding_dim, name=f"{name}_heads")
        self.optimizer = _optimizer(optimizer, lambda: keras.optimizers.Adam(2e-4), "optimizer")
        self._custom_optimizer = optimizer is not None
        self.optimizer.build(self.heads.trainable_variables)

    def _parameter_groups(self):
        return [(self.optimizer, self.heads.trainable_variables)]

    def compute_terms(self, y_true, y_pred):
        image, text = _embeddings(y_pred, self.embedding_dim, type(self).__name__)
        index = _image_index(y_true, self.num_images, type(self).__name__)
        image_logits, text_logits = self.heads(image, text)
        image_term, text_term = index_cross_entropy_terms(tf.cast(image_logits, image.dtype),
                                                          tf.cast(text_logits, image.dtype), index)
        return {"image": image_term, "text": text_term}

    def get_config(self):
        config = super().get_config()
        config.update(num_images=self.num_images, embedding_dim=self.embedding_dim,
                      optimizer=_serialize_optimizer(self.optimizer) if self._custom_optimizer else None)
        return config

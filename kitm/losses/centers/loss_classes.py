"""The semantic-centre losses as Keras losses (Malali & Keller): the center loss, the quantized center loss and
the image-index cross-entropy, each with the parameters and optimizers it owns (kitm.losses.centers)."""

from __future__ import annotations

from typing import Mapping

import keras
import numpy as np
from keras import ops

from kitm.distribute.replicas import num_replicas_in_sync
from kitm.layers.quantized_centers import SoftmaxQuantizedCenters
from kitm.losses.base import RetrievalLoss
from kitm.losses.centers.checks import _embeddings, _image_index, _non_negative, _positive_int
from kitm.losses.centers.parameters import (ImageIndexHeads, SemanticCenters, _optimizer, _OwnsParameters,
                                            _serialize_optimizer)
from kitm.losses.centers.terms import (DEFAULT_DELTA, DEFAULT_REPULSION_CHUNK, _center_gradient_scale,
                                       index_cross_entropy_terms, quantized_center_terms, scale_gradient,
                                       semantic_center_terms)


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
      centers_learning_rate: SGD step on the batch-mean loss (paper: 0.5; kitm.losses.centers).
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
        centers = ops.cast(self.table(index), image.dtype)
        centers = scale_gradient(centers, _center_gradient_scale(self.reduction, ops.shape(image)[0], image.dtype))
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
        image_weights = ops.cast(self.quantizer(image), image.dtype)
        text_weights = ops.cast(self.quantizer(text), image.dtype)
        centers = ops.cast(ops.convert_to_tensor(self.quantizer.centers), image.dtype)
        centers = scale_gradient(centers, _center_gradient_scale(self.reduction, ops.shape(image)[0], image.dtype))
        image_term, text_term, repulsion = quantized_center_terms(
            image, text, image_weights, text_weights, centers, delta=self.delta,
            repulsion_weight=self.repulsion_weight, chunk_size=self.chunk_size)
        # The repulsion is one term per batch, not per row: each of R replicas charges 1/R of it, so that the
        # replicas together weigh it as one device does on the global batch.
        replicas = num_replicas_in_sync()
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
        image_term, text_term = index_cross_entropy_terms(ops.cast(image_logits, image.dtype),
                                                          ops.cast(text_logits, image.dtype), index)
        return {"image": image_term, "text": text_term}

    def get_config(self):
        config = super().get_config()
        config.update(num_images=self.num_images, embedding_dim=self.embedding_dim,
                      optimizer=_serialize_optimizer(self.optimizer) if self._custom_optimizer else None)
        return config

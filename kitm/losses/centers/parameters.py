"""The parameters the semantic-centre losses own (kitm.losses.centers, "Parameters that belong to the objective"):
the centre table and the image-index heads as Keras layers, the mixin that hands each group with its optimizer to
the model, and the optimizer arguments' parsing and serialisation."""

from __future__ import annotations

import copy
from typing import Mapping

import keras
from keras import ops

from kitm.losses.centers.checks import _positive_int


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


class SemanticCenters(keras.layers.Layer):
    """The table of unquantized centres c_n, [num_images, embedding_dim]; `call(image_index)` gathers rows.

    Gathering straight from the variable keeps the gradient sparse on TensorFlow (`tf.IndexedSlices` over the
    rows of the batch), so a step touches B rows, not the whole table; JAX and PyTorch get a dense gradient with
    zeros outside those rows.
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
        return ops.take(variable, image_index, axis=0)

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
    """Mixin: a loss that owns trainable layers and their optimizers (kitm.losses.centers)."""

    # Each batch trains these parameters with their own optimizers, which gradient caching's second pass would
    # replay (kitm.losses.base, "what a loss can do").
    supports_gradient_caching = False

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

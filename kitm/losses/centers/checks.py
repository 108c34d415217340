"""The argument checks of the semantic-centre losses: sizes, hinge radii, embedding pairs, y_pred and
y_true["image_index"], each failing with a message that names the argument."""

from __future__ import annotations

from typing import Mapping

import tensorflow as tf

from kitm.losses.base import RetrievalLoss


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

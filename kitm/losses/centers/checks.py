"""The argument checks of the semantic-centre losses: sizes, hinge radii, embedding pairs, y_pred and
y_true["image_index"], each failing with a message that names the argument."""

from __future__ import annotations

from typing import Mapping

import keras
from keras import ops

from kitm.distribute.checks import check_index_range
from kitm.losses.base import RetrievalLoss, shapes_compatible


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or int(value) != value or int(value) < 1:
        raise ValueError(f"{name} must be a positive integer; got {value!r}.")
    return int(value)


def _non_negative(name: str, value) -> float:
    value = float(value)
    if not value >= 0:  # also rejects NaN
        raise ValueError(f"{name} must be >= 0; got {value}.")
    return value


def _dtype(value) -> str:
    return keras.backend.standardize_dtype(value.dtype)


def _is_float(dtype: str) -> bool:
    return "float" in dtype  # float16/32/64 and bfloat16


def _pair(image, text, name_image: str = "image", name_text: str = "text"):
    image, text = ops.convert_to_tensor(image), ops.convert_to_tensor(text)
    if len(image.shape) != 2 or len(text.shape) != 2:
        raise ValueError(f"{name_image} and {name_text} must be [B, D]; got shapes {image.shape} and {text.shape}.")
    if not shapes_compatible(image.shape, text.shape):
        raise ValueError(f"{name_image} and {name_text} must have the same shape [B, D]; got {image.shape} and "
                         f"{text.shape}.")
    if not _is_float(_dtype(image)) or _dtype(image) != _dtype(text):
        raise ValueError(f"{name_image} and {name_text} must be floats of one dtype; got {_dtype(image)} and "
                         f"{_dtype(text)}.")
    return image, text


def _embeddings(y_pred, embedding_dim: int, loss_name: str):
    if not isinstance(y_pred, Mapping) or "image" not in y_pred or "text" not in y_pred:
        raise ValueError(f"{loss_name} takes y_pred = {{'image': [B, D], 'text': [B, D]}}; got "
                         f"{type(y_pred).__name__} with keys {list(y_pred) if isinstance(y_pred, Mapping) else 'n/a'}.")
    image, text = _pair(y_pred["image"], y_pred["text"], "y_pred['image']", "y_pred['text']")
    if image.shape[-1] is not None and image.shape[-1] != embedding_dim:
        raise ValueError(f"{loss_name} was built for embedding_dim={embedding_dim}; got embeddings of shape "
                         f"{tuple(image.shape)}.")
    return image, text


def _image_index(y_true, num_images: int, loss_name: str):
    index = RetrievalLoss.optional(y_true, "image_index")
    if index is None:
        raise ValueError(f"{loss_name} needs y_true['image_index'] (int [B], the training image of each row).")
    index = ops.convert_to_tensor(index)
    if "int" not in _dtype(index):
        raise ValueError(f"y_true['image_index'] must be integers; got dtype {_dtype(index)}.")
    index = ops.cast(ops.reshape(index, [-1]), "int32")
    # A gather does not fail on every backend and device for an out-of-range index (TensorFlow on GPU returns zeros,
    # JAX clips or fills, and keras.ops.take wraps negative indices): say which input is wrong instead.
    too_small, too_large = (f"{loss_name}: y_true['image_index'] must be >= 0",
                            f"{loss_name}: y_true['image_index'] must be < num_images={num_images}")
    checked = check_index_range(index, num_images, lower_message=too_small, upper_message=too_large)
    if checked.checked:
        return checked.values
    # Traced (JAX under jit, torch.compile) or on an accelerator (torch: reading it would wait for the device): send
    # every invalid index to num_images, one past the table, so that JAX's gather fills its row with NaN and
    # torch's raises, rather than reading another image's centre.
    valid = ops.logical_and(ops.greater_equal(index, 0), ops.less(index, num_images))
    return ops.where(valid, index, ops.full_like(index, num_images))

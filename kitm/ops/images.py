"""Image decoding and evaluation views shared by the tf.data pipeline, serving signatures and image features.

One definition of "the image the model sees at evaluation" keeps the three places that need it in step: the input
pipeline's evaluation dataset (`kitm.data.pipeline`), the exported `encode_image` signature (`kitm.serving.export`,
decoding inside the SavedModel graph) and the image-space neighbours built from a backbone
(`kitm.relevance.image_features`). Plain TensorFlow ops (and TF Model Garden's centre crop), usable in `tf.data`
maps and `tf.function` graphs alike.
"""

from __future__ import annotations

import tensorflow as tf
from official.vision.ops import preprocess_ops


def decode_pixels(encoded: tf.Tensor) -> tf.Tensor:
    """PNG/JPEG bytes -> uint8 [H, W, 3], as decoded.

    The views below take these and convert to float after cropping: x / 255 is elementwise, so converting
    the crop gives the same floats as cropping the converted image, and a quarter of the memory traffic
    (the float conversion of the whole decoded image took half the time of a 224 px training view).
    """
    return tf.io.decode_image(encoded, channels=3, expand_animations=False)


def to_unit_float(image: tf.Tensor) -> tf.Tensor:
    """uint8 pixels -> float32 in [0, 1] (x / 255); float32 images pass through unchanged."""
    return tf.image.convert_image_dtype(image, tf.float32)


def decode_image(encoded: tf.Tensor) -> tf.Tensor:
    """PNG/JPEG bytes -> float32 [H, W, 3] in [0, 1]."""
    return to_unit_float(decode_pixels(encoded))


def eval_image(image: tf.Tensor, image_size: int, crop_fraction: float) -> tf.Tensor:
    """Deterministic centre crop (fraction of the shorter side) and resize: float32 [image_size, image_size, 3].

    `image`: uint8 pixels (`decode_pixels`) or float32 in [0, 1] (`decode_image`); the same result either way.
    """
    if crop_fraction < 1.0:
        image = preprocess_ops.center_crop_image(image, center_crop_fraction=crop_fraction)
    image = tf.image.resize(to_unit_float(image), [image_size, image_size], antialias=True)
    return tf.ensure_shape(tf.clip_by_value(image, 0.0, 1.0), [image_size, image_size, 3])


def eval_crops(image: tf.Tensor, image_size: int, crop_fraction: float, num_crops: int, seed) -> tf.Tensor:
    """`num_crops` square crops of side crop_fraction x the shorter side at uniformly random positions, resized:
    float32 [num_crops, image_size, image_size, 3].

    The test-time crops of Malali & Keller (Sec. 4.1, after Huang et al.: 20 random crops, embeddings averaged) at
    the evaluation crop's size, so the crops differ from the centre crop only in position. `seed` (int
    [2]) makes them stateless: an image gets the same crops at every evaluation. Vectorised: one gather per
    axis cuts all crops, one resize scales them.
    """
    shape = tf.shape(image)
    side = tf.cast(crop_fraction * tf.cast(tf.minimum(shape[0], shape[1]), tf.float32), tf.int32)
    upper = tf.stack([shape[0] - side, shape[1] - side]) + 1  # offsets 0 .. H - side (and W - side)
    offsets = tf.random.stateless_uniform([num_crops, 2], seed=seed, minval=0, maxval=2 ** 30, dtype=tf.int32)
    offsets = offsets % upper[None, :]
    span = tf.range(side)
    rows = offsets[:, 0:1] + span[None, :]  # [N, side]
    cols = offsets[:, 1:2] + span[None, :]
    crops = tf.gather(image, rows)  # [N, side, W, 3]
    crops = tf.gather(crops, cols, axis=2, batch_dims=1)  # [N, side, side, 3]
    crops = tf.image.resize(to_unit_float(crops), [image_size, image_size], antialias=True)
    return tf.ensure_shape(tf.clip_by_value(crops, 0.0, 1.0), [num_crops, image_size, image_size, 3])

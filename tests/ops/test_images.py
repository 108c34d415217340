"""kitm.ops.images: decoding to uint8 and converting after the crop gives exactly the floats of decoding to float."""

import dataclasses

import numpy as np
import tensorflow as tf

from kitm.data.pipeline import PipelineConfig, train_image
from kitm.ops.images import decode_image, decode_pixels, eval_crops, eval_image, to_unit_float


def _jpeg(height=75, width=100, seed=0):
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    return tf.io.encode_jpeg(pixels, quality=90)


def test_decode_pixels_is_uint8_and_decode_image_its_unit_float():
    encoded = _jpeg()
    pixels = decode_pixels(encoded)
    assert pixels.dtype == tf.uint8 and pixels.shape == (75, 100, 3)
    floats = decode_image(encoded)
    np.testing.assert_allclose(floats.numpy(), pixels.numpy() / 255.0, rtol=0, atol=1e-7)
    np.testing.assert_array_equal(to_unit_float(floats).numpy(), floats.numpy())  # floats pass through


def test_views_of_uint8_pixels_equal_the_views_of_float_images_bit_for_bit():
    encoded = _jpeg()
    pixels, floats = decode_pixels(encoded), decode_image(encoded)
    for fraction in (1.0, 0.875):
        from_pixels = eval_image(pixels, 32, fraction)
        assert from_pixels.dtype == tf.float32
        np.testing.assert_array_equal(from_pixels.numpy(), eval_image(floats, 32, fraction).numpy())
    seed = tf.constant([3, 4], tf.int64)
    np.testing.assert_array_equal(eval_crops(pixels, 24, 0.8, 5, seed).numpy(),
                                  eval_crops(floats, 24, 0.8, 5, seed).numpy())
    config = dataclasses.replace(PipelineConfig(), image_size=48, crop_area=(0.3, 1.0), flip=True)
    for sample in range(4):
        seed = tf.constant([sample, 7], tf.int64)
        np.testing.assert_array_equal(train_image(pixels, config, seed).numpy(),
                                      train_image(floats, config, seed).numpy())


def test_eval_crops_are_windows_of_the_evaluation_size_at_random_places():
    image = tf.reshape(tf.range(20 * 24 * 3, dtype=tf.float32) / (20 * 24 * 3), [20, 24, 3])
    crops = eval_crops(image, 10, 0.5, 6, tf.constant([1, 2], tf.int64)).numpy()  # side 10, resized to 10
    assert crops.shape == (6, 10, 10, 3)
    windows = {(i, j): image.numpy()[i:i + 10, j:j + 10] for i in range(11) for j in range(15)}
    found = [next(k for k, w in windows.items() if np.allclose(w, crop, atol=1e-6)) for crop in crops]
    assert len(set(found)) > 1  # random places (6 draws from 165)
    np.testing.assert_array_equal(crops, eval_crops(image, 10, 0.5, 6, tf.constant([1, 2], tf.int64)).numpy())
    # Crops of the whole square image are all the evaluation image.
    square = tf.random.stateless_uniform([32, 32, 3], seed=[0, 1])
    whole = eval_crops(square, 16, 1.0, 3, tf.constant([0, 0], tf.int64)).numpy()
    for crop in whole:
        np.testing.assert_allclose(crop, eval_image(square, 16, 1.0).numpy(), atol=1e-6)


"""Phase timing of kitm's training-image path (kitm.data.pipeline.train_image) on 512 JPEGs of 500 x 375, in
images/s through tf.data with 2 parallel calls and batches of 128: decode; + the float32 conversion; + the random
crop; + the antialiased resize to 224 (what kitm did); the resize without antialiasing; kitm's path now (the crop on
uint8 pixels, then float32, then the antialiased resize: the same floats); crop and resize on uint8.
Where `bench_input_pipeline.py` finds kitm slower than a PyTorch DataLoader, this says which phase costs it.
A variant whose output size varies keeps only its first pixel, so that batching does not fail.

    python benchmarks/profile_input_pipeline.py
"""
import os, time
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np, tensorflow as tf
rng = np.random.default_rng(0)
jpegs = [tf.io.encode_jpeg(tf.constant(rng.integers(0, 255, (375, 500, 3), dtype=np.uint8))).numpy() for _ in range(512)]
def crop(image, seed):
    offset, size, _ = tf.image.stateless_sample_distorted_bounding_box(
        tf.shape(image), tf.constant([0.0, 0.0, 1.0, 1.0], shape=[1, 1, 4]), seed=seed,
        min_object_covered=0.8, aspect_ratio_range=(3 / 4, 4 / 3), area_range=(0.8, 1.0), max_attempts=10)
    return tf.slice(image, offset, size)
variants = {
    "decode (uint8; first pixel kept)": lambda b, s: tf.io.decode_jpeg(b, channels=3)[0, 0],
    "decode + float32 (first pixel kept)": lambda b, s: tf.image.convert_image_dtype(tf.io.decode_jpeg(b, channels=3), tf.float32)[0, 0],
    "+ crop (float32; its first pixel kept)": lambda b, s: crop(tf.image.convert_image_dtype(tf.io.decode_jpeg(b, channels=3), tf.float32), s)[0, 0],
    "+ crop + resize antialias (kitm before)": lambda b, s: tf.image.resize(crop(tf.image.convert_image_dtype(tf.io.decode_jpeg(b, channels=3), tf.float32), s), [224, 224], antialias=True),
    "+ crop + resize bilinear, no antialias": lambda b, s: tf.image.resize(crop(tf.image.convert_image_dtype(tf.io.decode_jpeg(b, channels=3), tf.float32), s), [224, 224]),
    "crop uint8, float, resize antialias (kitm now)": lambda b, s: tf.image.resize(tf.image.convert_image_dtype(crop(tf.io.decode_jpeg(b, channels=3), s), tf.float32), [224, 224], antialias=True),
    "crop uint8, resize antialias, then float": lambda b, s: tf.image.resize(crop(tf.io.decode_jpeg(b, channels=3), s), [224, 224], antialias=True) / 255.0,
}
def run(fn):
    ds = tf.data.Dataset.from_tensor_slices(jpegs).enumerate().map(
        lambda i, b: fn(b, tf.stack([i, i])), num_parallel_calls=2).batch(128).prefetch(2)
    for _ in ds: pass  # warm
    times = []
    for _ in range(3):
        t = time.perf_counter()
        for _ in ds: pass
        times.append(time.perf_counter() - t)
    return 512 / np.median(times)
print("load", os.getloadavg())
for name, fn in variants.items():
    print(f"{name:45s} {run(fn):7.1f} images/s")
print("load", os.getloadavg())

"""SavedModel export with signatures on raw inputs: caption strings and encoded image bytes (or features).

The SavedModel needs only TensorFlow and tensorflow-text to load (`import tensorflow_text` registers the
text ops the tokenizer uses); it never imports kitm. Signatures:
- `encode_text(captions: string [N])` -> {"embeddings": float32 [N, D]}
- `encode_image(images: string [M])` (PNG/JPEG bytes; evaluation preprocessing inside the graph) or
  `encode_image(features: float32 [M, F])` for feature models -> {"embeddings": float32 [M, D]}
- `score(captions: string [N], images: ... [M])` -> {"scores": float32 [M, N]}: cosine of image m and caption n.
Empty captions and undecodable images fail with an error that says so.
"""

from __future__ import annotations

import os
import pathlib
import shutil

import keras
import tensorflow as tf

from kitm.data.pipeline import decode_image, eval_image


def _checked_captions(captions):
    stripped = tf.strings.strip(captions)
    check = tf.debugging.Assert(
        tf.reduce_all(tf.strings.length(stripped) > 0),
        ["encode_text: every caption must contain text; got an empty caption in", captions], summarize=8)
    with tf.control_dependencies([check]):
        return tf.identity(captions)


def export_saved_model(model, tokenizer, path: str | os.PathLike, *, image_mode: str = "encoded",
                       image_size: int = 64, eval_crop_fraction: float = 1.0, feature_dim: int | None = None) -> str:
    """Write a SavedModel for `model` (a DualEncoder) and `tokenizer` to `path`, atomically.

    The archive is written under `<path>.tmp` and renamed, so `path` is either absent or complete.
    """
    path = pathlib.Path(path)
    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.track(tokenizer)

    def text_embeddings(captions):
        return model.encode_text(tokenizer(_checked_captions(captions)), training=False)

    if image_mode == "encoded":
        image_spec = tf.TensorSpec([None], tf.string, name="images")

        def image_embeddings(images):
            pixels = tf.map_fn(lambda encoded: eval_image(decode_image(encoded), image_size, eval_crop_fraction),
                               images, fn_output_signature=tf.TensorSpec([image_size, image_size, 3], tf.float32))
            return model.encode_image(pixels, training=False)
    else:
        if feature_dim is None:
            raise ValueError("Feature models need feature_dim for the export signature.")
        image_spec = tf.TensorSpec([None, feature_dim], tf.float32, name="features")

        def image_embeddings(features):
            return model.encode_image(features, training=False)

    archive.add_endpoint("encode_text", lambda captions: {"embeddings": text_embeddings(captions)},
                         input_signature=[tf.TensorSpec([None], tf.string, name="captions")])
    archive.add_endpoint("encode_image", lambda images: {"embeddings": image_embeddings(images)},
                         input_signature=[image_spec])
    archive.add_endpoint(
        "score",
        lambda captions, images: {"scores": tf.matmul(image_embeddings(images), text_embeddings(captions),
                                                      transpose_b=True)},
        input_signature=[tf.TensorSpec([None], tf.string, name="captions"), image_spec])
    tmp = path.with_name(path.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    archive.write_out(str(tmp), verbose=False)
    if path.exists():
        shutil.rmtree(path)
    os.replace(tmp, path)
    return str(path)

"""SavedModel export with signatures on raw inputs: caption strings and encoded image bytes (or features).

The SavedModel needs only TensorFlow and tensorflow-text to load (`import tensorflow_text` registers the
text ops the tokenizer uses); it never imports kitm. Signatures:
- `encode_text(captions: string [N])` -> {"embeddings": float32 [N, D]}
- `encode_image(images: string [M])` (PNG/JPEG/GIF/BMP bytes; the evaluation centre crop and resize inside the
  graph) or `encode_image(features: float32 [M, F])` for feature models -> {"embeddings": float32 [M, D]}
- `score(captions: string [N], images: ... [M])` -> {"scores": float32 [M, N]}: cosine of image m and caption n.

Inputs are checked inside the graph, so TensorFlow Serving's clients get the same messages as Python ones
(an InvalidArgumentError naming the signature and the offending rows): an empty or blank caption; bytes that
are not an image (by their PNG/JPEG/GIF/BMP signature bytes; an image file that is cut short past its header
still fails in TensorFlow's decoder, with its own message); features of the wrong width.

`export_new_version(model, tokenizer, "<run>/export")` writes `<run>/export/<n>/` with n = 1 + the highest
existing version (`kitm.serving.versions`), the layout TensorFlow Serving watches, so a re-export never
overwrites a served model. Every archive is written under a temporary name in the same directory and
renamed into place when complete (`kitm.files.atomic_path` with overwrite=False: never onto an existing version);
the temporaries of killed exports (`<n>.<pid>.tmp` of a process that is gone) are removed first.
"""

from __future__ import annotations

import os
import pathlib

import keras
import tensorflow as tf

from kitm.distribute.backend import backend_name, on_tensorflow
from kitm.files import atomic_path
from kitm.ops.images import decode_pixels, eval_image
from kitm.serving.versions import next_version, remove_stale_exports

# The first bytes of the formats tf.io.decode_image reads.
# The backends whose models cross into a TensorFlow graph: TensorFlow's own, JAX's through jax2tf.
EXPORT_BACKENDS = ("tensorflow", "jax")
_IMAGE_SIGNATURES = ((b"\x89PNG", 4), (b"\xff\xd8\xff", 3), (b"GIF8", 4), (b"BM", 2))


def _checked_captions(captions, signature: str):
    stripped = tf.strings.strip(captions)
    empty = tf.where(tf.strings.length(stripped) == 0)[:, 0]
    check = tf.debugging.Assert(
        tf.size(empty) == 0,
        [f"{signature}: every caption must contain text; got an empty caption at (0-based) rows", empty, "of",
         captions], summarize=8)
    with tf.control_dependencies([check]):
        return tf.identity(captions)


def _checked_images(images, signature: str):
    known = tf.zeros(tf.shape(images), tf.bool)
    for magic, length in _IMAGE_SIGNATURES:
        known = known | tf.equal(tf.strings.substr(images, 0, length), magic)
    bad = tf.where(tf.logical_not(known))[:, 0]
    check = tf.debugging.Assert(
        tf.size(bad) == 0,
        [f"{signature}: images must be encoded PNG, JPEG, GIF or BMP bytes; these (0-based) rows are not:", bad,
         "their first bytes:", tf.gather(tf.strings.substr(images, 0, 8), bad)], summarize=8)
    with tf.control_dependencies([check]):
        return tf.identity(images)


def _checked_features(features, feature_dim: int, signature: str):
    width = tf.shape(features)[1]
    check = tf.debugging.Assert(
        tf.equal(width, feature_dim),
        [f"{signature}: features must be float32 [N, {feature_dim}] (the width the model was trained on); got width",
         width], summarize=4)
    with tf.control_dependencies([check]):
        return tf.ensure_shape(tf.identity(features), [None, feature_dim])


def _unless_empty(embed, inputs, dim: int):
    """`embed()`, or float32 [0, dim] when `inputs` has no rows: a convolution tower given an empty batch fails in
    its kernels (`Incompatible shapes: [16] vs. [0,48,48,3]` from a batch normalisation), and a model converted by
    jax2tf (JAX backend) refuses a batch of 0; every signature answers an empty request with an empty [0, D]."""
    return tf.cond(tf.shape(inputs)[0] > 0, lambda: tf.cast(embed(), tf.float32), lambda: tf.zeros([0, dim]))


def _token_spec(tokenizer):
    """The structure of `tokenizer.tf_tokenize`'s output for a batch of captions: int32 ids [None, L] (or a dict)."""
    probe = tokenizer.tf_tokenize(tf.constant(["a"]))
    return tf.nest.map_structure(lambda ids: tf.TensorSpec([None, *ids.shape[1:]], ids.dtype), probe)


def _numeric_encoders(archive, model, tokenizer, image_spec):
    """(text, image) encoders of tensors for the archive's graph. On TensorFlow, the model's own calls. On JAX the
    model's arithmetic becomes TensorFlow through jax2tf, which takes numbers only: the encoders from token ids and
    from pixels (or features) are endpoints of their own (`encode_tokens`, `encode_pixels`), and the signatures on
    strings tokenize and decode in TensorFlow before calling them."""
    if on_tensorflow():
        return (lambda tokens: model.encode_text(tokens, training=False),
                lambda pixels: model.encode_image(pixels, training=False))
    for resource in _tensorflow_objects(tokenizer):
        archive.track(resource)
    text = archive.add_endpoint("encode_tokens", lambda tokens: model.encode_text(tokens, training=False),
                                input_signature=[_token_spec(tokenizer)])
    image = archive.add_endpoint("encode_pixels", lambda pixels: model.encode_image(pixels, training=False),
                                 input_signature=[image_spec])
    return text, image


def _tensorflow_objects(root, depth: int = 6) -> list:
    """The TensorFlow objects (lookup tables, tf_text resources, variables) held by a layer's attributes, its
    sublayers' included. On JAX a Keras layer is no TensorFlow object, so the export archive, which saves what it
    tracks, would not find the tokenizer's tables: each is tracked by itself."""
    found, seen = [], set()

    def visit(value, left):
        if id(value) in seen or left < 0 or isinstance(value, (str, bytes, int, float, type(None))):
            return
        seen.add(id(value))
        if isinstance(value, tf.__internal__.tracking.Trackable):
            found.append(value)
            return
        if isinstance(value, dict):
            children = list(value.values())
        elif isinstance(value, (list, tuple, set)):
            children = list(value)
        elif isinstance(value, keras.layers.Layer) or hasattr(value, "__dict__") and left == depth:
            children = list(vars(value).values())
        else:
            return
        for child in children:
            visit(child, left - 1)

    visit(root, depth)
    return found


def _add_string_endpoint(archive, name, fn, input_signature):
    """An endpoint of TensorFlow ops (strings in), added as it is on every backend (no jax2tf)."""
    if on_tensorflow():
        archive.add_endpoint(name, fn, input_signature=input_signature)
        return
    function = tf.function(fn, input_signature=input_signature, autograph=False)
    function.get_concrete_function()
    archive.add_endpoint(name, function)


def _archive(model, tokenizer, *, image_mode: str, image_size: int, eval_crop_fraction: float,
             feature_dim: int | None) -> keras.export.ExportArchive:
    if backend_name() not in EXPORT_BACKENDS:  # before Keras' own tracking fails with less to say
        raise NotImplementedError(f"Export runs on the TensorFlow and JAX backends, not {backend_name()}: "
                                  "load the weights under KERAS_BACKEND=tensorflow (or jax) and export there.")
    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.track(tokenizer)
    if image_mode == "encoded":
        pixel_spec = tf.TensorSpec([None, image_size, image_size, 3], tf.float32, name="pixels")
    elif feature_dim is None:
        raise ValueError("Feature models need feature_dim for the export signature.")
    else:
        pixel_spec = tf.TensorSpec([None, feature_dim], tf.float32, name="features")
    encode_tokens, encode_pixels = _numeric_encoders(archive, model, tokenizer, pixel_spec)
    captions_spec = tf.TensorSpec([None], tf.string, name="captions")

    # Each signature checks its inputs (the messages name it), then calls one shared function from checked inputs
    # to embeddings: `score` calls the same two functions as encode_text and encode_image, so the SavedModel holds
    # the tokenizer, the decoding and the towers' graphs once and the export traces them once.
    @tf.function(input_signature=[captions_spec], autograph=False)
    def embed_captions(captions):
        tokens = tokenizer.tf_tokenize(captions)
        # jax2tf's batch dimension is at least 1: an empty request is answered before the model (as for images).
        return _unless_empty(lambda: encode_tokens(tokens), captions, model.embedding_dim)

    def text_embeddings(captions, signature):
        return embed_captions(_checked_captions(captions, signature))

    if image_mode == "encoded":
        image_spec = tf.TensorSpec([None], tf.string, name="images")

        @tf.function(input_signature=[image_spec], autograph=False)
        def embed_images(images):
            pixels = tf.map_fn(lambda encoded: eval_image(decode_pixels(encoded), image_size, eval_crop_fraction),
                               images, fn_output_signature=tf.TensorSpec([image_size, image_size, 3], tf.float32))
            return _unless_empty(lambda: encode_pixels(pixels), pixels, model.embedding_dim)

        def image_embeddings(images, signature):
            return embed_images(_checked_images(images, signature))
    else:
        # Any width is accepted by the signature and checked in the graph, for a message that names it.
        image_spec = tf.TensorSpec([None, None], tf.float32, name="features")
        embed_features = tf.function(encode_pixels, input_signature=[pixel_spec], autograph=False)

        def image_embeddings(features, signature):
            checked = _checked_features(features, feature_dim, signature)
            return embed_features(tf.ensure_shape(checked, [None, feature_dim]))

    _add_string_endpoint(archive, "encode_text",
                         lambda captions: {"embeddings": text_embeddings(captions, "encode_text")}, [captions_spec])
    _add_string_endpoint(archive, "encode_image",
                         lambda images: {"embeddings": image_embeddings(images, "encode_image")}, [image_spec])
    _add_string_endpoint(
        archive, "score",
        lambda captions, images: {"scores": tf.matmul(image_embeddings(images, "score"),
                                                      text_embeddings(captions, "score"), transpose_b=True)},
        [captions_spec, image_spec])
    return archive


def _write_new(archive, path: pathlib.Path) -> None:
    """Write the archive at exactly `path` through a temporary folder beside it, never replacing an existing `path`.

    The temporary, `<path>.<pid>.tmp`, is not a version number, so TF Serving and `kitm.serving.versions` ignore it.
    FileExistsError when `path` exists, before or after writing (the temporary is then removed).
    """
    with atomic_path(path, overwrite=False) as tmp:
        archive.write_out(str(tmp), verbose=False)


def export_saved_model(model, tokenizer, path: str | os.PathLike, *, image_mode: str = "encoded",
                       image_size: int = 64, eval_crop_fraction: float = 1.0, feature_dim: int | None = None) -> str:
    """Write a SavedModel for `model` (a DualEncoder) and `tokenizer` at exactly `path`, atomically.

    The archive is written under a temporary name beside `path` and renamed, so `path` is either absent or
    complete. An existing `path` is never replaced (FileExistsError); `export_new_version` picks a fresh one.
    """
    path = pathlib.Path(path)
    if path.exists():
        raise FileExistsError(f"{path} exists; a SavedModel is never overwritten (export_new_version picks the "
                              "next version number).")
    archive = _archive(model, tokenizer, image_mode=image_mode, image_size=image_size,
                       eval_crop_fraction=eval_crop_fraction, feature_dim=feature_dim)
    try:
        _write_new(archive, path)
    except FileExistsError:
        raise FileExistsError(f"{path} appeared while the SavedModel was written; it was left as it was.") from None
    return str(path)


def export_new_version(model, tokenizer, base: str | os.PathLike, *, image_mode: str = "encoded",
                       image_size: int = 64, eval_crop_fraction: float = 1.0, feature_dim: int | None = None) -> str:
    """Write the SavedModel as `<base>/<n>` with n = 1 + the highest existing version; returns its path.

    If another writer takes version n while this one writes, the rename fails (the directory is not empty)
    and the archive is written again under the next free number.
    """
    base = pathlib.Path(base)
    remove_stale_exports(base)
    archive = _archive(model, tokenizer, image_mode=image_mode, image_size=image_size,
                       eval_crop_fraction=eval_crop_fraction, feature_dim=feature_dim)
    for _ in range(100):
        path = base / str(next_version(base))
        try:
            _write_new(archive, path)
            return str(path)
        except FileExistsError:
            continue
    raise RuntimeError(f"Could not claim a new version directory under {base}.")

"""A trained run's image tower as a frozen feature extractor: pixels in, the run's image embeddings out.

This is how the claims study puts the papers' regime on the synthetic world: SAM and the ladder loss trained on
image features precomputed once by a frozen, separately pretrained network (VSE++'s "precomp" ResNet features).
Here the network is a kitm run trained on a *disjoint* synthetic world (another seed), served through its exported
SavedModel; ``kitm.data.build --dataset=synthetic --image_features_run=<run>`` stores its embeddings in the records
(image mode "feature"), so each later run trains only a small MLP on top and its image side costs nothing per step.

The embeddings come through the SavedModel's ``encode_image`` signature (PNG bytes in, the graph's own decoding,
resizing and crop), so they are exactly what the run serves.
"""

from __future__ import annotations

import io
import os
import pathlib
from collections.abc import Callable

import numpy as np

from kitm.serving.versions import latest_version_dir

__all__ = ["saved_model_image_features", "small_cnn_image_features", "frozen_image_features"]


def _png(image: np.ndarray) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    return buffer.getvalue()


def _export_dir(run_or_export: pathlib.Path) -> pathlib.Path:
    """A SavedModel folder itself, or a run directory's newest export version."""
    if (run_or_export / "saved_model.pb").is_file():
        return run_or_export
    version = latest_version_dir(run_or_export / "export")
    if version is None or not (version / "saved_model.pb").is_file():
        raise FileNotFoundError(
            f"{run_or_export} holds no SavedModel: give a run directory of `python -m kitm.launch` with an export "
            "(export/<n>/saved_model.pb) or a SavedModel folder.")
    return version


def saved_model_image_features(run_or_export: str | os.PathLike, *, batch_size: int = 256
                               ) -> tuple[Callable[[np.ndarray], np.ndarray], dict]:
    """(encode, description): ``encode(images uint8 [N, H, W, 3]) -> float32 [N, D]`` through the run's SavedModel.

    ``description`` names the SavedModel (for the dataset's provenance). The SavedModel must take images (not
    precomputed features): a tower stacked on features has no pixels to read.
    """
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the exported tokenizer's ops)

    export_dir = _export_dir(pathlib.Path(run_or_export))
    loaded = tf.saved_model.load(str(export_dir))
    if "encode_image" not in loaded.signatures:
        raise ValueError(f"The SavedModel at {export_dir} has no encode_image signature.")
    signature = loaded.signatures["encode_image"]
    _, keywords = signature.structured_input_signature
    if "images" not in keywords:
        raise ValueError(f"The SavedModel at {export_dir} encodes precomputed features ({sorted(keywords)}), not "
                         "images: train the frozen tower on a dataset of images.")

    def encode(images: np.ndarray) -> np.ndarray:
        images = np.asarray(images)
        if images.ndim != 4 or images.shape[-1] != 3 or images.dtype != np.uint8:
            raise ValueError(f"images must be uint8 [N, H, W, 3]; got {images.dtype} {images.shape}.")
        chunks = [signature(images=tf.constant([_png(image) for image in images[start:start + batch_size]]))
                  ["embeddings"].numpy() for start in range(0, len(images), batch_size)]
        return np.concatenate(chunks).astype(np.float32, copy=False) if chunks else np.zeros((0, 0), np.float32)

    return encode, {"saved_model": str(export_dir.resolve())}


def small_cnn_image_features(path: str | os.PathLike, *, batch_size: int = 256
                             ) -> tuple[Callable[[np.ndarray], np.ndarray], dict]:
    """(encode, description) through a small_cnn tower file (`kitm.layers.save_image_backbone`, such as the things
    world's shipped tower): ``encode(images uint8 [N, H, W, 3]) -> float32 [N, width]``, the tower's output (the
    features before any projection, as VSE++'s precomputed ResNet features), pixels scaled to [0, 1] as the input
    pipeline scales them. The images must have the side the tower was trained at."""
    import json

    from kitm.layers.image_encoders import SmallConvEncoder, load_image_backbone, small_cnn_weights_path

    resolved = small_cnn_weights_path(str(path))
    with np.load(resolved) as stored:
        architecture = json.loads(str(stored["architecture"]))
    encoder = SmallConvEncoder(filters=architecture["filters"], width=architecture["width"],
                               pooled=architecture["pooled"], name="image_backbone")
    side = int(architecture["image_size"])
    load_image_backbone(encoder, resolved, side)

    def encode(images: np.ndarray) -> np.ndarray:
        images = np.asarray(images)
        if images.ndim != 4 or images.shape[1:] != (side, side, 3) or images.dtype != np.uint8:
            raise ValueError(f"images must be uint8 [N, {side}, {side}, 3] (the tower's side); got {images.dtype} "
                             f"{images.shape}.")
        chunks = [np.asarray(encoder(images[start:start + batch_size].astype(np.float32) / 255.0, training=False))
                  for start in range(0, len(images), batch_size)]
        return np.concatenate(chunks).astype(np.float32, copy=False) if chunks else np.zeros((0, 0), np.float32)

    return encode, {"small_cnn_tower": str(pathlib.Path(resolved).resolve()), "architecture": architecture}


def frozen_image_features(source: str | os.PathLike) -> tuple[Callable[[np.ndarray], np.ndarray], dict]:
    """A frozen image tower by what `source` is: a small_cnn tower file (.npz) or shipped tower name, else a run
    directory or SavedModel folder."""
    from kitm.layers.image_encoders import SHIPPED_TOWERS

    if str(source).endswith(".npz") or str(source) in SHIPPED_TOWERS:
        return small_cnn_image_features(source)
    return saved_model_image_features(source)

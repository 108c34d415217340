"""Image feature spaces for Thomas & Kovashka's "Img NNs" variant: the space in which image-side neighbours are found.

Thomas & Kovashka (Sec. 3.2, "Second variant") replace the text-space neighbour function of their Eq. 5 by nearest
neighbours "in the space of visual (e.g. ResNet) features": x_i and x_i' are neighbours "in the original visual
space before cross-modal training", and y_i, y_i' are their paired texts. kitm finds them by cosine similarity
(`kitm.relevance.nearest_neighbors`, like the text neighbours) in one of three spaces, chosen at build time with
``python -m kitm.data.build --image_neighbors=...``:

* ``features`` (precomputed-feature datasets, VSE++ / SCAN layouts): the stored vectors themselves; SCAN's
  [R, F] region features are averaged over the R regions, the very vector the input pipeline feeds the model
  (`kitm.data.pipeline.image_input`). They are the frozen CNN features the paper means (VSE++: pooled ResNet152;
  SCAN: Faster R-CNN regions).
* ``backbone`` (raw images): the global-average-pooled output of a frozen keras.applications ResNet (the model's
  own `kitm.layers.image_encoders.ResNetEncoder`; ResNet-50 by default, Thomas & Kovashka's image stream) on each image's
  evaluation view (centre crop of `crop_fraction` of the shorter side, resized to `image_size`, as
  `kitm.ops.images.eval_image`). With ``weights="imagenet"`` this is the paper's space: Keras loads the
  ImageNet weights from ~/.keras/models, downloading them once when they are not there. ``weights=None`` gives a
  randomly initialised network: a path for tests and offline machines, not a meaningful space.
* ``pixels`` (raw images, no weights needed): each whole image resized by box averaging (``method="area"``) to
  `pixel_side` x `pixel_side` RGB in [0, 1], flattened, minus the split's mean image. The cosine of two such
  vectors compares the images' coarse colour layouts as deviations from the average picture, so the part every
  image shares (on photos: sky at the top, overall brightness) does not make all pairs look alike; all-positive
  raw pixel vectors have cosines bunched near 1. For photographs this space sees colour layout, not content (use
  ``backbone``). For the synthetic world, flat coloured shapes on a dim background, it needs no weights and is
  meaningful: scenes are near when similar shapes sit at similar places, which is what captions state. Measured
  on a 3,000-scene world at 64 px (2,400 training scenes): the mean exact relevance of a neighbour's captions to
  the image is 0.56 for the 10 nearest and 0.43 for the 200 nearest, against 0.37 for a random other scene and
  0.89 / 0.65 for the truly most relevant 10 / 200 (tests/relevance/test_image_features.py checks the same on a
  small world). Centring on the split's mean changes these figures by less than 0.01 there; side 8 or 32 gives the same.

Features are extracted in chunks of `chunk_images` images, each chunk cached under the build's ``.cache/`` as
soon as it is done (written under a temporary name, then renamed), so a killed build resumes at the first
missing chunk. Decoding and resizing run in a parallel tf.data pipeline, the backbone on batches; a tqdm bar
counts images.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import pathlib
from collections.abc import Sequence
from typing import Union

import numpy as np

from kitm.errors import KitmDataError
from kitm.files import write_bytes_atomically

__all__ = ["IMAGE_NEIGHBOR_SPACES", "BACKBONES", "ImageFiles", "PixelArrays", "StoredFeatures", "ImageInput",
           "ImageNeighborOptions", "ImageFeatureExtractor", "split_image_features", "neighbor_space_embeddings"]

IMAGE_NEIGHBOR_SPACES = ("none", "features", "pixels", "backbone")
BACKBONES = ("resnet50", "resnet152")
_PIXEL_BATCH = 256
_FEATURE_BLOCK = 256


@dataclasses.dataclass(frozen=True, eq=False)
class ImageFiles:
    """One split's encoded images (PNG / JPEG files), in record order."""

    paths: Sequence[str]

    def __len__(self) -> int:
        return len(self.paths)

    def name(self, position: int) -> str:
        return str(self.paths[position])


@dataclasses.dataclass(frozen=True, eq=False)
class PixelArrays:
    """One split's decoded images, uint8 [N, H, W, 3], in record order (the synthetic world)."""

    images: np.ndarray
    keys: Sequence[str] | None = None

    def __len__(self) -> int:
        return len(self.images)

    def name(self, position: int) -> str:
        return self.keys[position] if self.keys is not None else f"image {position}"


@dataclasses.dataclass(frozen=True, eq=False)
class StoredFeatures:
    """One split's precomputed features: `features` [rows, F] or [rows, R, F] (may be memory-mapped), `rows` [N]
    the row of each image in record order, `origin` the file (named in errors)."""

    features: np.ndarray
    rows: np.ndarray
    origin: str

    def __len__(self) -> int:
        return len(self.rows)

    def name(self, position: int) -> str:
        return f"{self.origin} row {int(self.rows[position])}"


ImageInput = Union[ImageFiles, PixelArrays, StoredFeatures]


@dataclasses.dataclass(frozen=True)
class ImageNeighborOptions:
    """Which image space the `image_neighbors` rows are computed in (module docstring), and how.

    Attributes:
        space: "none" (no image-space rows), "features", "pixels" or "backbone".
        pixel_side: side of the downsampled image of the pixel space (16: 768 values).
        backbone: "resnet50" (Thomas & Kovashka) or "resnet152" (VSE++'s).
        weights: "imagenet", None (random weights: tests only) or a Keras weights file.
        image_size: the backbone's input side (224 as in Thomas & Kovashka).
        crop_fraction: centre crop side / shorter side before resizing (0.875 = 224 / 256, the evaluation view).
        batch_size: images per backbone call.
        chunk_images: images per cached chunk (a resumed build redoes at most one chunk).
    """

    space: str = "none"
    pixel_side: int = 16
    backbone: str = "resnet50"
    weights: str | None = "imagenet"
    image_size: int = 224
    crop_fraction: float = 0.875
    batch_size: int = 32
    chunk_images: int = 2048

    def __post_init__(self):
        if self.space not in IMAGE_NEIGHBOR_SPACES:
            raise KitmDataError(f"--image_neighbors={self.space!r}: choose one of {list(IMAGE_NEIGHBOR_SPACES)}.")
        if self.backbone not in BACKBONES:
            raise KitmDataError(f"--image_neighbors_backbone={self.backbone!r}: choose one of {list(BACKBONES)}.")
        for name, value, low in (("image_neighbors_pixels", self.pixel_side, 1),
                                 ("image_neighbors_size", self.image_size, 32),
                                 ("image_neighbors_batch", self.batch_size, 1), ("chunk_images", self.chunk_images, 1)):
            if isinstance(value, bool) or int(value) != value or value < low:
                raise KitmDataError(f"--{name} must be an integer >= {low}; got {value!r}.")
        if not 0 < self.crop_fraction <= 1:
            raise KitmDataError(f"crop_fraction must be in (0, 1]; got {self.crop_fraction}.")
        if self.space == "backbone" and self.weights not in (None, "imagenet") and not os.path.isfile(self.weights):
            raise KitmDataError(f"--image_neighbors_weights={self.weights}: no such weights file (give imagenet, "
                                "none, or a Keras weights file).")

    @property
    def enabled(self) -> bool:
        return self.space != "none"

    def parameters(self) -> dict:
        """What defines the space (build.json, dataset.json): two builds agree on it iff these agree."""
        if self.space == "pixels":
            return {"space": "pixels", "pixel_side": self.pixel_side}
        if self.space == "backbone":
            weights = self.weights if self.weights in (None, "imagenet") else os.path.abspath(self.weights)
            return {"space": "backbone", "backbone": self.backbone, "weights": weights or "none",
                    "image_size": self.image_size, "crop_fraction": self.crop_fraction}
        return {"space": self.space}

    def tag(self) -> str:
        """A short name of the space for cache files (a hash of `parameters`: weights paths hold slashes)."""
        digest = hashlib.sha1(json.dumps(self.parameters(), sort_keys=True).encode()).hexdigest()[:10]
        return f"{self.space}-{digest}"


class ImageFeatureExtractor:
    """Computes image features of `options.space` for a range of a split's images; the backbone is built once."""

    def __init__(self, options: ImageNeighborOptions):
        if not options.enabled:
            raise ValueError("ImageFeatureExtractor needs a space other than 'none'.")
        self.options = options
        self._encode = None

    def check(self, image_input: ImageInput, split: str) -> None:
        """The space must fit what the dataset holds; the error names the flag and the way out."""
        space = self.options.space
        if isinstance(image_input, StoredFeatures):
            if space != "features":
                raise KitmDataError(f"--image_neighbors={space} works on images, but split '{split}' holds "
                                    f"precomputed features ({image_input.origin}): use --image_neighbors=features.")
            if image_input.features.ndim not in (2, 3):
                raise KitmDataError(f"{image_input.origin}: features of shape {image_input.features.shape} are not "
                                    "[rows, F] or [rows, R, F].")
        elif isinstance(image_input, (ImageFiles, PixelArrays)):
            if space == "features":
                raise KitmDataError(f"--image_neighbors=features takes the stored features of precomputed-feature "
                                    f"datasets; split '{split}' holds images: use --image_neighbors=backbone "
                                    "(a frozen ImageNet ResNet) or --image_neighbors=pixels (no weights needed).")
        else:
            raise TypeError(f"Unknown image input {type(image_input).__name__} for split '{split}'.")

    def __call__(self, image_input: ImageInput, start: int, stop: int, bar=None) -> np.ndarray:
        """float32 [stop - start, F]: the features of images start..stop-1 of the split."""
        if isinstance(image_input, StoredFeatures):
            parts = []
            # Sub-blocks bound the memory of region files (256 SCAN images: 75 MB read at once).
            for first in range(start, stop, _FEATURE_BLOCK):
                rows = np.asarray(image_input.rows[first:min(first + _FEATURE_BLOCK, stop)])
                block = np.asarray(image_input.features[rows], dtype=np.float32)
                # SCAN regions [R, F]: their mean, the vector the input pipeline feeds the model.
                parts.append(block.mean(axis=1) if block.ndim == 3 else block)
                if bar is not None:
                    bar.update(len(rows))
            return np.concatenate(parts)
        import tensorflow as tf

        try:
            return self._from_images(image_input, start, stop, bar)
        except tf.errors.InvalidArgumentError as error:
            raise _name_undecodable(image_input, start, stop) or error

    def _from_images(self, image_input, start: int, stop: int, bar) -> np.ndarray:
        import tensorflow as tf

        from kitm.ops.images import decode_image, eval_image

        # Map functions not converted by autograph, as kitm.data.pipeline's: plain TensorFlow ops.
        plain = tf.autograph.experimental.do_not_convert
        if isinstance(image_input, ImageFiles):
            images = tf.data.Dataset.from_tensor_slices([str(path) for path in image_input.paths[start:stop]])
            images = images.map(plain(lambda path: decode_image(tf.io.read_file(path))),
                                num_parallel_calls=tf.data.AUTOTUNE)
        else:
            images = tf.data.Dataset.from_tensor_slices(np.asarray(image_input.images[start:stop])).map(
                plain(lambda image: tf.image.convert_image_dtype(image, tf.float32)),
                num_parallel_calls=tf.data.AUTOTUNE)
        options = self.options
        if options.space == "pixels":
            side = options.pixel_side
            # Box averaging: each output value is the mean of the input pixels its cell covers.
            images = images.map(plain(lambda image: tf.reshape(tf.image.resize(image, [side, side], method="area"),
                                                               [-1])), num_parallel_calls=tf.data.AUTOTUNE)
            encode, batch = (lambda batch: batch), _PIXEL_BATCH
        else:
            images = images.map(plain(lambda image: eval_image(image, options.image_size, options.crop_fraction)),
                                num_parallel_calls=tf.data.AUTOTUNE)
            encode, batch = self._backbone(), options.batch_size
        parts = []
        for chunk in images.batch(batch).prefetch(2):
            parts.append(np.asarray(encode(chunk), dtype=np.float32))
            if bar is not None:
                bar.update(len(parts[-1]))
        return np.concatenate(parts) if parts else np.zeros((0, 0), np.float32)

    def _backbone(self):
        """The frozen ResNet as one traced function of a batch (built on first use, kept for every split)."""
        if self._encode is None:
            import tensorflow as tf

            from kitm.layers.image_encoders import ResNetEncoder

            options = self.options
            try:
                encoder = ResNetEncoder(depth=int(options.backbone[6:]), image_size=options.image_size,
                                        weights=options.weights, trainable_backbone=False,
                                        name="image_neighbor_backbone")
            except Exception as error:  # Keras reports a failed download or a foreign file as a bare Exception
                if options.weights is None:
                    raise
                raise KitmDataError(
                    f"--image_neighbors=backbone: the {options.backbone} weights '{options.weights}' could not be "
                    f"loaded ({error}). Keras looks for the ImageNet weights in ~/.keras/models and downloads them "
                    "there otherwise; on a machine without internet copy the file there, or pass "
                    "--image_neighbors_weights=<weights file>.") from error
            self._encode = tf.function(lambda images: encoder(images, training=False), reduce_retracing=True)
        return self._encode


def _name_undecodable(image_input, start: int, stop: int) -> KitmDataError | None:
    """After a decode failure in tf.data: the first image of the range that PIL cannot read, named."""
    if not isinstance(image_input, ImageFiles):
        return None
    from PIL import Image, UnidentifiedImageError

    for path in image_input.paths[start:stop]:
        try:
            with Image.open(path) as image:
                image.load()
        except (UnidentifiedImageError, OSError, SyntaxError) as error:
            return KitmDataError(f"Image {path} cannot be decoded for the image-space neighbour rows: {error}")
    return None


def _save_atomically(path: pathlib.Path, array: np.ndarray) -> None:
    buffer = io.BytesIO()  # np.save would append ".npy" to a temporary file name
    np.save(buffer, array)
    write_bytes_atomically(path, buffer.getvalue())


def _load_chunk(path: pathlib.Path, rows: int) -> np.ndarray | None:
    try:
        array = np.load(path)
    except (OSError, ValueError):
        return None  # an unreadable cache file is recomputed
    return array if array.ndim == 2 and len(array) == rows else None


def split_image_features(cache_dir: str | os.PathLike, split: str, image_input: ImageInput,
                         extractor: ImageFeatureExtractor, progress: bool = True) -> np.ndarray:
    """float32 [N, F]: the split's image features in record order, computed chunk by chunk, each chunk cached
    (`<cache_dir>/image-<tag>-<split>/<start>-<stop>.npy`) so that a resumed build computes only missing ones."""
    from kitm.progress import progress_bar as tqdm

    extractor.check(image_input, split)
    options = extractor.options
    total = len(image_input)
    folder = pathlib.Path(cache_dir) / f"image-{options.tag()}-{split}"
    folder.mkdir(parents=True, exist_ok=True)
    bounds = [(start, min(start + options.chunk_images, total)) for start in range(0, total, options.chunk_images)]
    cached = {bound: _load_chunk(folder / f"{bound[0]:09d}-{bound[1]:09d}.npy", bound[1] - bound[0])
              for bound in bounds}
    done = sum(stop - start for (start, stop), array in cached.items() if array is not None)
    parts = []
    with tqdm(total=total, initial=done, desc=f"image features ({options.space}, {split})", unit="image",
              disable=not progress) as bar:
        for (start, stop), array in cached.items():
            if array is None:
                array = extractor(image_input, start, stop, bar)
                _save_atomically(folder / f"{start:09d}-{stop:09d}.npy", array)
            parts.append(array)
    return np.concatenate(parts)


def neighbor_space_embeddings(features: np.ndarray, options: ImageNeighborOptions, split: str,
                              image_input: ImageInput) -> np.ndarray:
    """The vectors whose cosines rank the neighbours: pixel features minus the split's mean image, other
    spaces as they are. An image whose vector is zero (no cosine) or not finite is an error naming it."""
    features = np.asarray(features, dtype=np.float32)
    if options.space == "pixels":
        features = features - features.mean(axis=0, dtype=np.float64).astype(np.float32)
    bad = ~np.isfinite(features).all(axis=1)
    if bad.any():
        raise KitmDataError(f"Split '{split}': {image_input.name(int(np.flatnonzero(bad)[0]))} has a NaN or "
                            f"infinite {options.space} feature; image-space neighbours need finite features.")
    zero = ~np.any(features, axis=1)
    if zero.any():
        where = "equals the split's mean image" if options.space == "pixels" else "is a zero vector"
        first = image_input.name(int(np.flatnonzero(zero)[0]))
        raise KitmDataError(f"Split '{split}': the {options.space} feature of {first} {where}, so its cosine to "
                            f"other images is undefined ({int(zero.sum())} such image(s)); choose another "
                            "--image_neighbors space.")
    return features

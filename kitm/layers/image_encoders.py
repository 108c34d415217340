"""Image encoders: a small CNN for the synthetic world, ImageNet ResNets for photos, an MLP for features.

Every encoder takes float32 images in [0, 1] (the input pipeline's output; [B, H, W, 3]) or feature vectors
[B, F], and returns a [B, width] feature; the DualEncoder projects it into the joint space.
"""

from __future__ import annotations

import os
import tempfile

import keras
from keras import layers

from kitm.errors import KitmConfigError, option

IMAGE_ENCODERS = ("small_cnn", "resnet50", "resnet152", "features_mlp")


@keras.saving.register_keras_serializable(package="kitm")
class SmallConvEncoder(keras.layers.Layer):
    """Four conv blocks (conv-BN-ReLU twice, the second with stride 2), then a dense layer over the grid.

    Sized for the 64x64 synthetic scenes, which leave a 4x4 grid of 64 channels. Captions state positions
    ("top left", "left of"), so the grid is flattened and read by a dense layer rather than averaged away. With
    ``pooled`` the dense layer also reads each channel's maximum over the grid: what is in the picture wherever it
    is, which a flattened grid must learn once per cell (the things world's dozens of categories, anywhere).
    """

    def __init__(self, filters=(16, 32, 64, 64), width: int = 256, pooled: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.filters = tuple(int(f) for f in filters)
        self.width = int(width)
        self.pooled = bool(pooled)
        self.blocks = []
        for index, count in enumerate(self.filters):
            self.blocks += [
                layers.Conv2D(count, 3, strides=1, padding="same", use_bias=False, name=f"conv{index}a"),
                layers.BatchNormalization(name=f"bn{index}a"),
                layers.ReLU(),
                layers.Conv2D(count, 3, strides=2, padding="same", use_bias=False, name=f"conv{index}b"),
                layers.BatchNormalization(name=f"bn{index}b"),
                layers.ReLU(),
            ]
        self.flatten = layers.Flatten()
        self.head = layers.Dense(self.width, activation="relu", name="grid_head")

    def build(self, input_shape):
        shape = tuple(input_shape)
        for layer in self.blocks:
            layer.build(shape)
            shape = layer.compute_output_shape(shape)
        flat = self.flatten.compute_output_shape(shape)[-1] + (shape[-1] if self.pooled else 0)
        self.head.build((shape[0], flat))
        self.built = True

    def call(self, images, training=False):
        x = images
        for layer in self.blocks:
            x = layer(x, training=training) if isinstance(layer, layers.BatchNormalization) else layer(x)
        grid = self.flatten(x)
        if self.pooled:
            grid = keras.ops.concatenate([grid, keras.ops.max(x, axis=(1, 2))], axis=-1)
        return self.head(grid)

    def get_config(self):
        config = super().get_config()
        config.update(filters=self.filters, width=self.width, pooled=self.pooled)
        return config


@keras.saving.register_keras_serializable(package="kitm")
class ResNetEncoder(keras.layers.Layer):
    """keras.applications ResNet50 / ResNet152 with global average pooling (VSE++'s image encoder).

    `weights="imagenet"` loads the ImageNet weights (Keras downloads them once into ~/.keras/models, or
    finds them there: :func:`imagenet_weights_path`; offline without them, a KitmConfigError names that file);
    `weights=None` starts from scratch (tests, offline machines); a path loads a file.
    """

    def __init__(self, depth: int = 152, image_size: int = 224, weights: str | None = "imagenet",
                 trainable_backbone: bool = False, **kwargs):
        super().__init__(**kwargs)
        if depth not in (50, 152):
            raise ValueError(f"ResNet depth must be 50 or 152; got {depth}.")
        self.depth, self.image_size, self.weights_source = depth, int(image_size), weights
        self.trainable_backbone = bool(trainable_backbone)
        self.backbone = _resnet_backbone(depth, self.image_size, weights)
        self.backbone.trainable = self.trainable_backbone

    def build(self, input_shape):
        self.built = True  # the backbone was built with its input shape in __init__

    def call(self, images, training=False):
        # The ResNets expect caffe-style input (BGR, mean-subtracted, 0-255).
        x = keras.applications.resnet.preprocess_input(images * 255.0)
        return self.backbone(x, training=training and self.trainable_backbone)

    def get_config(self):
        config = super().get_config()
        config.update(depth=self.depth, image_size=self.image_size, weights=None,
                      trainable_backbone=self.trainable_backbone)
        return config


def _resnet_backbone(depth: int, image_size: int, weights: str | None) -> keras.Model:
    """keras.applications' ResNet{depth} without its top, average-pooled; a failed ImageNet download (no network)
    becomes one KitmConfigError naming the cache file to provide instead of Keras' long traceback."""
    builder = keras.applications.ResNet50 if depth == 50 else keras.applications.ResNet152
    try:
        return builder(include_top=False, weights=weights, pooling="avg", input_shape=(image_size, image_size, 3))
    except Exception as error:  # Keras raises a bare Exception for a failed URL fetch
        cached = imagenet_weights_path(depth)
        if weights != "imagenet" or os.path.exists(cached):
            raise  # not a missing download: a bad weights file, a corrupt cache, ...
        cause = " ".join(str(error).split()) or type(error).__name__
        raise KitmConfigError(
            f"{option('weights')}=imagenet: the ImageNet weights of ResNet{depth} are not in Keras' cache and could "
            f"not be downloaded ({cause}). Keras looks for the file {cached} (KERAS_HOME moves that folder): place "
            f"it there, or pass a weights file ({option('weights')}=/path/to/weights.h5), or train from scratch "
            f"with {option('weights')}=none.") from None


def imagenet_weights_path(depth: int) -> str:
    """The file keras.applications.ResNet{depth}(include_top=False, weights="imagenet") loads: keras.utils.get_file's
    cache, `<KERAS_HOME or ~/.keras>/models/resnet{depth}_weights_tf_dim_ordering_tf_kernels_notop.h5`, or under
    /tmp/.keras when that folder is not writable (get_file's own fallback)."""
    try:  # the folder Keras read from KERAS_HOME when it was imported
        from keras.src.backend.config import keras_home

        base = keras_home()
    except ImportError:  # a Keras without that private accessor: its documented rule
        base = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    base = os.path.expanduser(base)
    if not os.access(base, os.W_OK):
        base = os.path.join("/tmp" if os.path.isdir("/tmp") else tempfile.gettempdir(), ".keras")
    return os.path.join(base, "models", f"resnet{depth}_weights_tf_dim_ordering_tf_kernels_notop.h5")


@keras.saving.register_keras_serializable(package="kitm")
class FeatureMLP(keras.layers.Layer):
    """For precomputed image features (VSE/SCAN style): a two-layer MLP with a residual linear path."""

    def __init__(self, width: int = 1024, dropout: float = 0.1, **kwargs):
        super().__init__(**kwargs)
        self.width, self.dropout_rate = int(width), float(dropout)
        self.linear = layers.Dense(self.width, name="linear")
        self.hidden = layers.Dense(self.width, activation="relu", name="hidden")
        self.out = layers.Dense(self.width, name="out")
        self.dropout = layers.Dropout(self.dropout_rate)

    def build(self, input_shape):
        self.linear.build(input_shape)
        self.hidden.build(input_shape)
        self.out.build(tuple(input_shape[:-1]) + (self.width,))
        self.built = True

    def call(self, features, training=False):
        return self.linear(features) + self.out(self.dropout(self.hidden(features), training=training))

    def get_config(self):
        config = super().get_config()
        config.update(width=self.width, dropout=self.dropout_rate)
        return config


def build_image_encoder(name: str, *, image_size: int = 64, weights: str | None = None,
                        trainable_backbone: bool = False, pooled: bool = False) -> keras.layers.Layer:
    """Encoder by name: one of IMAGE_ENCODERS. small_cnn takes ``pooled`` and, as ``weights``, a weights file of a
    trained small_cnn tower (`save_image_backbone`), loaded here."""
    if name == "small_cnn":
        encoder = SmallConvEncoder(pooled=pooled, name="image_backbone")
        path = small_cnn_weights_path(weights)
        if path is not None:
            load_image_backbone(encoder, path, image_size)
        return encoder
    if name in ("resnet50", "resnet152"):
        return ResNetEncoder(depth=int(name[6:]), image_size=image_size, weights=weights,
                             trainable_backbone=trainable_backbone, name="image_backbone")
    if name == "features_mlp":
        return FeatureMLP(name="image_backbone")
    raise ValueError(f"Unknown image encoder {name!r}; choose one of {IMAGE_ENCODERS}.")



# The small_cnn towers kitm ships, by name (`--weights=<name>`): pretrained on a world of the same generator with
# another seed, as ImageNet weights are pretrained on another data set (docs/demo.md, "The image tower").
SHIPPED_TOWERS = {"things": "things_small_cnn_48.npz"}


def small_cnn_weights_path(weights: str | None) -> str | None:
    """The file `--weights` names for small_cnn: None for none (and for imagenet, which small_cnn has no weights of:
    the launcher's default for other towers), a shipped tower's file by its name, else the path given."""
    if weights is None or weights.lower() in ("none", "imagenet"):
        return None
    if weights in SHIPPED_TOWERS:
        return os.path.join(os.path.dirname(__file__), "pretrained", SHIPPED_TOWERS[weights])
    return weights


def save_image_backbone(encoder: SmallConvEncoder, path: str | os.PathLike, image_size: int) -> None:
    """Write a trained small_cnn tower for `--weights`: an ``.npz`` of its weights in layer order and its
    architecture (filters, width, pooled, image size), written under a temporary name, then renamed."""
    import json

    import numpy as np

    from kitm.files import atomic_path

    if not str(path).endswith(".npz"):
        raise ValueError(f"A small_cnn tower file ends in .npz; got {path}.")
    architecture = {"filters": list(encoder.filters), "width": encoder.width, "pooled": encoder.pooled,
                    "image_size": int(image_size)}
    arrays = {f"weight_{i:03d}": np.asarray(w) for i, w in enumerate(encoder.get_weights())}
    with atomic_path(path, keep_suffix=".npz") as tmp:
        with open(tmp, "wb") as handle:
            np.savez(handle, architecture=np.array(json.dumps(architecture)), **arrays)


def load_image_backbone(encoder: SmallConvEncoder, path: str | os.PathLike, image_size: int) -> None:
    """Load a small_cnn tower file (`save_image_backbone`) into `encoder`, built for `image_size` pixels; a file of
    another architecture or image size is refused, naming both."""
    import json

    import numpy as np

    if not os.path.isfile(path):
        raise KitmConfigError(f"{option('weights')}={path}: no such file (small_cnn takes none or the .npz file of a "
                              "trained small_cnn tower).")
    try:
        with np.load(path) as stored:
            architecture = json.loads(str(stored["architecture"]))
            weights = [stored[key] for key in sorted(k for k in stored.files if k.startswith("weight_"))]
    except (OSError, ValueError, KeyError) as error:
        raise KitmConfigError(f"{option('weights')}={path} is not a small_cnn tower file: {error}") from None
    wanted = {"filters": list(encoder.filters), "width": encoder.width, "pooled": encoder.pooled,
              "image_size": int(image_size)}
    if architecture != wanted:
        raise KitmConfigError(f"{option('weights')}={path} holds a small_cnn tower of {architecture}, but this run "
                              f"builds {wanted} (--image_size, --small_cnn_pooled).")
    encoder.build((None, image_size, image_size, 3))
    encoder.set_weights(weights)

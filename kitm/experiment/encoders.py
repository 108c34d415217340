"""The encoder registry: `image_encoder` and the text tower by name, built from the model settings.

`IMAGE_ENCODERS` maps a name to `build(config) -> keras.layers.Layer` (images or feature vectors -> [B, F]);
`TEXT_ENCODERS` maps a name to `build(config, vocabulary_size) -> keras.layers.Layer` (token ids -> [B, F]).
`register_image_encoder` / `register_text_encoder` add a user's own tower; the dual encoder projects either into the
joint space (`kitm.models.DualEncoder`).
"""

from __future__ import annotations

from collections.abc import Callable

from kitm.errors import KitmConfigError, option
from kitm.experiment.config import ExperimentConfig


def _papers_image_encoder(name: str):
    def build(config: ExperimentConfig):
        from kitm.layers import build_image_encoder

        model = config.model
        weights = None if model.weights.lower() == "none" else model.weights
        return build_image_encoder(name, image_size=config.data.image_size, weights=weights,
                                   trainable_backbone=model.finetune_backbone)

    return build


def _gru_text_encoder(config: ExperimentConfig, vocabulary_size: int):
    from kitm.layers import GRUTextEncoder

    return GRUTextEncoder(vocabulary_size, config.model.word_dim, config.model.text_units,
                          bidirectional=config.model.text_bidirectional, name="text_backbone")


# The papers' towers: a small CNN (the synthetic world), ResNets (ImageNet weights; VSE++, SAM, the ladder loss),
# an MLP on precomputed features (VSE/SCAN features); word embeddings + a bidirectional GRU (or a forward one,
# --text_bidirectional=false, as the VSE++ reference code).
IMAGE_ENCODERS: dict[str, Callable[[ExperimentConfig], object]] = {
    name: _papers_image_encoder(name) for name in ("small_cnn", "resnet50", "resnet152", "features_mlp")}
TEXT_ENCODERS: dict[str, Callable[[ExperimentConfig, int], object]] = {"gru": _gru_text_encoder}
# The towers that start from pretrained weights and can be fine-tuned after a frozen start.
PRETRAINED_IMAGE_ENCODERS = {"resnet50", "resnet152"}


def register_image_encoder(name: str, build: Callable[[ExperimentConfig], object], *,
                           pretrained: bool = False) -> None:
    if name in IMAGE_ENCODERS:
        raise KitmConfigError(f"An image encoder named {name!r} is already registered.")
    IMAGE_ENCODERS[name] = build
    if pretrained:
        PRETRAINED_IMAGE_ENCODERS.add(name)


def register_text_encoder(name: str, build: Callable[[ExperimentConfig, int], object]) -> None:
    if name in TEXT_ENCODERS:
        raise KitmConfigError(f"A text encoder named {name!r} is already registered.")
    TEXT_ENCODERS[name] = build


def build_image_encoder(config: ExperimentConfig):
    name = config.model.image_encoder
    if name not in IMAGE_ENCODERS:
        raise KitmConfigError(f"{option('image_encoder')}={name}: unknown; choose from {', '.join(IMAGE_ENCODERS)}.")
    return IMAGE_ENCODERS[name](config)


def build_text_encoder(config: ExperimentConfig, vocabulary_size: int, name: str = "gru"):
    return TEXT_ENCODERS[name](config, vocabulary_size)

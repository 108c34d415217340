"""keras-hub presets for kitm's towers: loading one by handle or local directory, its family and its image constants.

A preset is named by a keras-hub handle (`clip_vit_base_patch32`, `siglip_base_patch16_224`, `bert_small_en_uncased`,
`kaggle://...`, `hf://...`) or by a local directory written with `save_to_preset` (what offline machines and the
tests use: `kitm.layers.hub_tiny.save_tiny_preset`). Handles download on first use into keras-hub's cache
(KERAS_HOME); offline, or for a name keras-hub does not know, `load_backbone` raises one KitmConfigError that names
the preset, says that handles download on first use, and how to use a local preset directory instead.

The family of a preset (clip, siglip, vit, dinov2, resnet, bert) decides how its tower pools and how its tokenizer
packs captions (`kitm.layers.hub_towers`, `kitm.layers.hub_tokenizers`). Image normalisation comes from the preset's
own `image_converter.json` (keras-hub's `x * scale + offset` on [0, 255] pixels) when it has one, else from the
family's published constants below.
"""

from __future__ import annotations

import os

from kitm.errors import KitmConfigError, option

# The families kitm knows, by keras-hub class name (backbones, and the encoders inside CLIP / SigLIP).
_FAMILY_OF_CLASS = {
    "CLIPBackbone": "clip", "CLIPVisionEncoder": "clip", "CLIPTextEncoder": "clip",
    "SigLIPBackbone": "siglip", "SigLIPVisionEncoder": "siglip", "SigLIPTextEncoder": "siglip",
    "SigLIP2Backbone": "siglip",
    "ViTBackbone": "vit", "DINOV2Backbone": "dinov2", "ResNetBackbone": "resnet", "BertBackbone": "bert",
}
IMAGE_FAMILIES = ("clip", "siglip", "vit", "dinov2", "resnet")
TEXT_FAMILIES = ("clip", "siglip", "bert")
JOINT_FAMILIES = ("clip", "siglip")

_IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
# (mean, std) on [0, 1] pixels, as each family's reference preprocessing publishes them: OpenAI CLIP's constants;
# SigLIP and the keras-hub ViT presets map [0, 1] to [-1, 1]; DINOv2 and the ResNets use ImageNet statistics.
FAMILY_NORMALIZATION = {
    "clip": ((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)),
    "siglip": ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),
    "vit": ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),
    "dinov2": _IMAGENET,
    "resnet": _IMAGENET,
}


def is_local_preset(preset: str) -> bool:
    return os.path.isdir(os.path.expanduser(str(preset)))


def _offline_or_unknown(preset: str, setting: str, error: Exception) -> KitmConfigError:
    cause = " ".join(str(error).split())[:300] or type(error).__name__
    return KitmConfigError(
        f"{option(setting)}={preset}: keras-hub could not load this preset ({type(error).__name__}: {cause}). A preset "
        f"named by handle (e.g. clip_vit_base_patch32, siglip_base_patch16_224, bert_small_en_uncased, or "
        f"kaggle://... / hf://...) downloads on first use into keras-hub's cache (KERAS_HOME), so it needs the "
        f"network the first time and must be a name keras-hub knows (keras_hub.models.Backbone.presets). Offline, "
        f"save the preset once where it can be downloaded (keras_hub.models.Backbone.from_preset(handle)"
        f".save_to_preset(dir), and the tokenizer's / image converter's save_to_preset(dir)) and pass that local "
        f"directory: {option(setting)}=/path/to/preset_dir.")


def load_backbone(preset: str, setting: str):
    """The keras-hub backbone of `preset` (handle or local directory), or a KitmConfigError naming `setting`."""
    import keras_hub

    preset = str(preset)
    if not preset:
        raise KitmConfigError(f"{option(setting)} is empty: give a keras-hub preset handle or a local preset "
                              "directory.")
    local = is_local_preset(preset)
    if local and not os.path.isfile(os.path.join(os.path.expanduser(preset), "config.json")):
        raise KitmConfigError(f"{option(setting)}={preset}: the directory has no config.json; a local preset is a "
                              "directory written by keras-hub's save_to_preset.")
    try:
        return keras_hub.models.Backbone.from_preset(os.path.expanduser(preset) if local else preset)
    except KitmConfigError:
        raise
    except Exception as error:  # keras-hub raises ValueError (unknown name) or requests/Kaggle errors (offline)
        if local:
            raise
        raise _offline_or_unknown(preset, setting, error) from None


def _saved_tokenizer(folder: str):
    """The tokenizer a local preset folder holds, read as keras-hub's preset loader reads it (tokenizer.json, then its
    assets); None without one. keras-hub's `Tokenizer.from_preset` picks the class from the backbone's, and for a
    CLIP or SigLIP text encoder saved alone (kitm.serving.hub_presets; its tokenizers name the joint backbones) finds
    none."""
    import json

    import keras

    config = os.path.join(folder, "tokenizer.json")
    if not os.path.isfile(config):
        return None
    with open(config) as handle:
        tokenizer = keras.saving.deserialize_keras_object(json.load(handle))
    tokenizer.load_preset_assets(folder)
    return tokenizer


def load_tokenizer(preset: str, setting: str):
    """The keras-hub tokenizer saved with `preset` (its vocabulary / merges / SentencePiece model)."""
    import keras_hub

    local = is_local_preset(preset)
    try:
        return keras_hub.tokenizers.Tokenizer.from_preset(os.path.expanduser(preset) if local else preset)
    except Exception as error:
        saved = _saved_tokenizer(os.path.expanduser(preset)) if local else None
        if saved is not None:
            return saved
        if local:
            raise KitmConfigError(f"{option(setting)}={preset}: the preset has no usable tokenizer "
                                  f"({type(error).__name__}: {error}); save one with the tokenizer's "
                                  "save_to_preset(dir).") from None
        raise _offline_or_unknown(preset, setting, error) from None


def family_of(model, preset: str, setting: str, allowed: tuple[str, ...]) -> str:
    name = type(model).__name__
    family = _FAMILY_OF_CLASS.get(name)
    if family not in allowed:
        raise KitmConfigError(f"{option(setting)}={preset} is a keras-hub {name}; this setting takes presets of the "
                              f"families {', '.join(allowed)}.")
    return family


def image_normalization(preset: str, family: str) -> tuple[list[float], list[float], tuple | None]:
    """(scale, offset, image_size) mapping [0, 1] pixels to the backbone's input: `x * scale + offset`.

    From the preset's image converter when it has one (keras-hub's scale/offset act on [0, 255]), else from
    FAMILY_NORMALIZATION (image_size None: unknown)."""
    converter = None
    try:
        import keras_hub

        converter = keras_hub.layers.ImageConverter.from_preset(
            os.path.expanduser(preset) if is_local_preset(preset) else preset)
    except Exception:  # no image_converter.json: the family's constants
        converter = None
    if converter is not None and converter.scale is not None:
        scale = [float(s) * 255.0 for s in _per_channel(converter.scale)]
        offset = [float(o) for o in _per_channel(converter.offset if converter.offset is not None else 0.0)]
        size = tuple(converter.image_size) if converter.image_size is not None else None
        return scale, offset, size
    mean, std = FAMILY_NORMALIZATION[family]
    return [1.0 / s for s in std], [-m / s for m, s in zip(mean, std)], None


def _per_channel(value) -> list[float]:
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    return values * 3 if len(values) == 1 else values

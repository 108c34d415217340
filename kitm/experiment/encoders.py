"""The encoder registry: `image_encoder` and the text tower by name, built from the model settings.

`IMAGE_ENCODERS` maps a name to `build(config) -> keras.layers.Layer` (images or feature vectors -> [B, F]);
`TEXT_ENCODERS` maps a name to `build(config, vocabulary_size) -> keras.layers.Layer` (token ids -> [B, F]).
`register_image_encoder` / `register_text_encoder` add a user's own tower; the dual encoder projects either into the
joint space (`kitm.models.DualEncoder`).
"""

from __future__ import annotations

from collections.abc import Callable

from kitm.distribute.backend import backend_name, on_tensorflow
from kitm.errors import KitmConfigError, option
from kitm.experiment.config import ExperimentConfig


def _papers_image_encoder(name: str):
    def build(config: ExperimentConfig):
        from kitm.layers import build_image_encoder

        model = config.model
        weights = None if model.weights.lower() == "none" else model.weights
        return build_image_encoder(name, image_size=config.data.image_size, weights=weights,
                                   trainable_backbone=model.finetune_backbone, pooled=model.small_cnn_pooled)

    return build


def _gru_text_encoder(config: ExperimentConfig, vocabulary_size: int):
    from kitm.layers import GRUTextEncoder

    # Trimming each batch's padding (GRUTextEncoder) gives data-dependent shapes that XLA cannot compile.
    xla = str(config.training.jit_compile).lower() == "true"
    if config.model.text_recurrence == "packed" and xla:
        raise KitmConfigError(f"{option('text_recurrence')}=packed runs a loop over data-dependent row counts, "
                              f"which XLA cannot compile: use {option('text_recurrence')}=masked with "
                              f"{option('jit_compile')}=true.")
    return GRUTextEncoder(vocabulary_size, config.model.word_dim, config.model.text_units,
                          bidirectional=config.model.text_bidirectional,
                          trim_padding=not xla,
                          recurrence=config.model.text_recurrence,  # auto: packed, masked under XLA
                          name="text_backbone")


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


# keras-hub towers (kitm.layers.hub_towers): a preset handle or local preset directory per tower, or one CLIP /
# SigLIP preset for both (joint_preset).
HUB = "hub"
# The contrastive losses' settings that take the joint preset's temperature (log scale t, logits = exp(t) * cosine)
# and SigLIP's bias, when the objective section has them and they were not given explicitly.


def uses_hub_text(config: ExperimentConfig) -> bool:
    return config.model.text_encoder == HUB or bool(config.model.joint_preset)


def uses_hub_image(config: ExperimentConfig) -> bool:
    return config.model.image_encoder == HUB or bool(config.model.joint_preset)


def resolve_hub_settings(config: ExperimentConfig) -> ExperimentConfig:
    """Check the tower settings against each other; with `joint_preset`, both towers are keras-hub ones."""
    model = config.model
    if model.text_encoder not in TEXT_ENCODERS:
        raise KitmConfigError(f"{option('text_encoder')}={model.text_encoder}: unknown; choose from "
                              f"{', '.join(TEXT_ENCODERS)}.")
    for name, value in (("image_tower_lr_multiplier", model.image_tower_lr_multiplier),
                        ("text_tower_lr_multiplier", model.text_tower_lr_multiplier)):
        if not value >= 0:
            raise KitmConfigError(f"{option(name)}={value}: a learning-rate multiplier is >= 0.")
    if model.joint_preset:
        for name in ("image_preset", "text_preset"):
            if config.get(name):
                raise KitmConfigError(f"{option('joint_preset')} gives both towers; drop {option(name)} (or drop "
                                      f"{option('joint_preset')} and give {option('image_preset')} and "
                                      f"{option('text_preset')}).")
        for name in ("image_encoder", "text_encoder"):
            if name in config.explicit and config.get(name) != HUB:
                raise KitmConfigError(f"{option('joint_preset')} makes both towers keras-hub ones; drop "
                                      f"{option(name)}={config.get(name)} (or set it to {HUB}).")
        config = config.fill(image_encoder=HUB, text_encoder=HUB)
        _check_lora(config)
        return config
    if model.image_encoder == HUB and not model.image_preset:
        raise KitmConfigError(f"{option('image_encoder')}={HUB} needs {option('image_preset')}: a keras-hub preset "
                              "handle (e.g. clip_vit_base_patch32, vit_base_patch16_224_imagenet, "
                              "dinov2_small, resnet_50_imagenet) or a local preset directory.")
    if model.text_encoder == HUB and not model.text_preset:
        raise KitmConfigError(f"{option('text_encoder')}={HUB} needs {option('text_preset')}: a keras-hub preset "
                              "handle (e.g. clip_vit_base_patch32, siglip_base_patch16_224, bert_small_en_uncased) "
                              "or a local preset directory.")
    for name, tower in (("image_preset", "image_encoder"), ("text_preset", "text_encoder")):
        if config.get(name) and config.get(tower) != HUB:
            raise KitmConfigError(f"{option(name)} is read by {option(tower)}={HUB} only; got {option(tower)}="
                                  f"{config.get(tower)}.")
    _check_lora(config)
    return config


def lora_towers(config: ExperimentConfig) -> list[str]:
    """The towers `lora_rank` adapts ("image_encoder", "text_encoder"): the keras-hub ones not frozen; none when it
    is 0."""
    model = config.model
    if not model.lora_rank:
        return []
    return [tower for tower, hub, frozen in (("image_encoder", uses_hub_image(config), model.freeze_image_tower),
                                             ("text_encoder", uses_hub_text(config), model.freeze_text_tower))
            if hub and not frozen]


def _check_lora(config: ExperimentConfig) -> None:
    """LoRA adapts keras-hub towers that train: at least one must."""
    model = config.model
    if model.lora_rank and not lora_towers(config):
        raise KitmConfigError(f"{option('lora_rank')}={model.lora_rank} adapts keras-hub towers that train; this run "
                              f"has none ({option('image_encoder')}={model.image_encoder}, "
                              f"{option('text_encoder')}={model.text_encoder}, {option('freeze_image_tower')}="
                              f"{model.freeze_image_tower}, {option('freeze_text_tower')}={model.freeze_text_tower}).")


def _text_preset(config: ExperimentConfig) -> tuple[str, str]:
    return (config.model.joint_preset, "joint_preset") if config.model.joint_preset else (
        config.model.text_preset, "text_preset")


def _preset_config(preset: str, setting: str) -> dict:
    """The preset's config.json (for a handle, only that file is fetched)."""
    import json

    from kitm.layers import hub_presets

    try:
        from keras_hub.src.utils.preset_utils import get_file

        path = get_file(preset, "config.json") if not hub_presets.is_local_preset(preset) else None
    except Exception as error:
        raise hub_presets._offline_or_unknown(preset, setting, error) from None
    import os

    path = path or os.path.join(os.path.expanduser(preset), "config.json")
    if not os.path.isfile(path):
        raise KitmConfigError(f"{option(setting)}={preset}: the directory has no config.json; a local preset is a "
                              "directory written by keras-hub's save_to_preset.")
    with open(path) as handle:
        return json.load(handle)


def build_hub_tokenizer(config: ExperimentConfig):
    """The text preset's tokenizer packing captions into its backbone's inputs (kitm.layers.hub_tokenizers).

    Captions keep `max_caption_length` tokens, start and end included, at most the encoder's position count; SigLIP's
    text encoder adds its position embeddings to all of them, so its captions are always padded to that count."""
    from kitm.layers.hub_presets import TEXT_FAMILIES, _FAMILY_OF_CLASS, load_tokenizer
    from kitm.layers.hub_tokenizers import HubCaptionTokenizer

    preset, setting = _text_preset(config)
    described = _preset_config(preset, setting)
    family = _FAMILY_OF_CLASS.get(described.get("class_name", ""))
    if family not in TEXT_FAMILIES:
        raise KitmConfigError(f"{option(setting)}={preset} is a keras-hub {described.get('class_name')}; text towers "
                              f"come from the families {', '.join(TEXT_FAMILIES)}.")
    inner = described["config"]
    inner = inner.get("text_encoder", {}).get("config", inner)
    positions = int(inner.get("max_sequence_length") or config.data.max_caption_length)
    length = positions if family == "siglip" else min(config.data.max_caption_length, positions)
    return HubCaptionTokenizer(load_tokenizer(preset, setting), family, length, name="tokenizer")


def load_joint_preset(config: ExperimentConfig):
    """The `joint_preset` (a `kitm.layers.hub_towers.JointPreset`: both towers' backbone, its joint space and
    temperature), or None without one. Load it under the strategy's scope, before anything is built from the
    configuration: what it implies (`hand_over_logit_scale`) is settled first."""
    if not config.model.joint_preset:
        return None
    from kitm.layers.hub_presets import JOINT_FAMILIES, family_of, load_backbone
    from kitm.layers.hub_towers import JointPreset

    preset = config.model.joint_preset
    backbone = load_backbone(preset, "joint_preset")
    joint = JointPreset(backbone, family_of(backbone, preset, "joint_preset", JOINT_FAMILIES), preset)
    model = config.model
    if "embedding_dim" in config.explicit and model.embedding_dim != joint.embedding_dim:
        raise KitmConfigError(f"{option('joint_preset')}={preset} has a {joint.embedding_dim}-dimensional joint "
                              f"space; drop {option('embedding_dim')}={model.embedding_dim}.")
    return joint


def build_towers(config: ExperimentConfig, tokenizer, joint=None):
    """(image_encoder, text_encoder, joint) for the model; joint is a `kitm.layers.hub_towers.JointPreset` when the
    towers come from `joint_preset` (it then sets the projections; `load_joint_preset`'s, or loaded here), else
    None. Build under the strategy's scope."""
    if not config.model.joint_preset:
        vocabulary_size = getattr(tokenizer, "vocabulary_size", 0)
        return build_image_encoder(config), build_text_encoder(config, vocabulary_size,
                                                               config.model.text_encoder), None
    joint = joint if joint is not None else load_joint_preset(config)
    return (_hub_image_tower(config, joint.backbone, joint.preset, "joint_preset", joint.family),
            _hub_text_tower(joint.backbone, joint.family), joint)


def _hub_image_tower(config: ExperimentConfig, backbone, preset: str, setting: str, family: str):
    from kitm.layers.hub_presets import image_normalization
    from kitm.layers.hub_towers import HubImageTower, _sub_backbone, check_image_size

    scale, offset, _ = image_normalization(preset, family)
    tower = HubImageTower(_sub_backbone(backbone, "image"), family, scale, offset, name="image_backbone")
    check_image_size(tower, config.data.image_size, preset, setting)
    return tower


def _hub_text_tower(backbone, family: str):
    from kitm.layers.hub_towers import HubTextTower, _sub_backbone

    return HubTextTower(_sub_backbone(backbone, "text"), family, name="text_backbone")


def _hub_image_encoder(config: ExperimentConfig):
    from kitm.layers.hub_presets import IMAGE_FAMILIES, family_of, load_backbone

    preset = config.model.image_preset
    backbone = load_backbone(preset, "image_preset")
    return _hub_image_tower(config, backbone, preset, "image_preset",
                            family_of(backbone, preset, "image_preset", IMAGE_FAMILIES))


def _hub_text_encoder(config: ExperimentConfig, vocabulary_size: int):
    from kitm.layers.hub_presets import TEXT_FAMILIES, family_of, load_backbone

    preset = config.model.text_preset
    backbone = load_backbone(preset, "text_preset")
    return _hub_text_tower(backbone, family_of(backbone, preset, "text_preset", TEXT_FAMILIES))


IMAGE_ENCODERS[HUB] = _hub_image_encoder
TEXT_ENCODERS[HUB] = _hub_text_encoder
PRETRAINED_IMAGE_ENCODERS.add(HUB)


def apply_tower_training(config: ExperimentConfig, model) -> None:
    """Freeze the towers the settings freeze, and give the other keras-hub towers low-rank adapters where
    `lora_rank` asks (before the optimizer is built: frozen weights get no slots; and before a checkpoint is
    restored: it holds the adapters)."""
    if config.model.freeze_image_tower:
        model.image_encoder.trainable = False
    if config.model.freeze_text_tower:
        model.text_encoder.trainable = False
    towers = lora_towers(config)
    if towers:
        from kitm.layers.hub_towers import enable_lora

        for tower in towers:
            enable_lora(getattr(model, tower), config.model.lora_rank)


def make_optimizer(config: ExperimentConfig, model, learning_rate, **kwargs):
    """Adam: Keras' or the fused one (kitm.training.fused_adam; `fused_update`, auto = on the TensorFlow backend),
    with per-tower rates where a tower learning-rate multiplier is not 1 (kitm.training.tower_learning_rates)."""
    import keras

    from kitm.training.fused_adam import FusedAdam
    from kitm.training.tower_learning_rates import FusedTowerLearningRateAdam, TowerLearningRateAdam

    model_settings = config.model
    fused = str(config.training.fused_update).lower()
    if fused not in ("auto", "true", "false"):
        raise KitmConfigError(f"{option('fused_update')}={config.training.fused_update}: expected auto, true or "
                              "false.")
    tensorflow_backend = on_tensorflow()
    if fused == "true" and not tensorflow_backend:
        raise KitmConfigError(f"{option('fused_update')}=true: the fused Adam kernel is TensorFlow's, and Keras runs "
                              f"on {backend_name()}; use {option('fused_update')}=auto (Keras' Adam there).")
    fused = fused == "true" or (fused == "auto" and tensorflow_backend)
    if model_settings.image_tower_lr_multiplier == 1.0 and model_settings.text_tower_lr_multiplier == 1.0:
        return (FusedAdam if fused else keras.optimizers.Adam)(learning_rate, **kwargs)
    optimizer = (FusedTowerLearningRateAdam if fused else TowerLearningRateAdam)(learning_rate, **kwargs)
    optimizer.set_multiplier(model.image_encoder.trainable_variables, model_settings.image_tower_lr_multiplier)
    optimizer.set_multiplier(model.text_encoder.trainable_variables, model_settings.text_tower_lr_multiplier)
    return optimizer


def hand_over_logit_scale(config: ExperimentConfig, joint) -> ExperimentConfig:
    """`config` with the joint preset's temperature (and SigLIP's bias) as the contrastive losses' starting values,
    where they were not given explicitly. The preset stores the log scale t (CLIP and SigLIP both use exp(t)); the
    settings take exp(t): CLIP's goes to `logit_scale_init` (InfoNCE, graded InfoNCE), SigLIP's to
    `siglip_logit_scale_init` and its bias to `siglip_bias_init`."""
    import math

    if getattr(joint, "family", "clip") == "siglip":
        pretrained = {"siglip_logit_scale_init": math.exp(joint.logit_scale), "siglip_bias_init": joint.logit_bias}
    else:
        pretrained = {"logit_scale_init": math.exp(joint.logit_scale)}
    values = {name: value for name, value in pretrained.items() if value is not None and name not in config.explicit}
    return config.fill(**values) if values else config

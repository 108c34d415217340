"""Towers from keras-hub presets: image and text encoders that start from pretrained weights, and one CLIP or SigLIP
preset that gives both towers, their projections and the logit scale.

`HubImageTower` takes what every kitm image tower takes, float32 images in [0, 1] at `image_size` [B, H, W, 3], and
applies the preset's own normalisation inside the layer (`x * scale + offset`, from the preset's image converter or
the family's constants, `kitm.layers.hub_presets`), so training, evaluation and the exported SavedModel all see it.
It pools the backbone's output the way the family does: CLIP, ViT and DINOv2 take the class token, ResNet averages
its feature map, SigLIP's vision encoder is already pooled (its attention-pooling head).

`HubTextTower` takes the dict of backbone inputs that `kitm.layers.hub_tokenizers.HubCaptionTokenizer` makes in the
tf.data pipeline ({"token_ids"} for CLIP and SigLIP; plus "segment_ids" and "padding_mask" for BERT) and pools:
CLIP at the end-of-text token (keras-hub's CLIPTextPooler: the position of the largest id), SigLIP already pooled
and projected, BERT (and MiniLM-style BERT presets) by the mean over the unmasked tokens, as sentence-transformers
pools its MiniLM encoders (BERT's pooled [CLS] output was trained for next-sentence prediction, not similarity).

`JointPreset` holds a CLIP or SigLIP backbone whose two encoders become the two towers; `initialize_projections`
copies its projections into kitm's DualEncoder (CLIP: `vision_projection` / `text_projection`, bias-free, so the
DualEncoder's biases start at 0; SigLIP: its encoders already end in the joint space, so the projections start as
the identity), and `logit_scale` / `logit_bias` are the pretrained temperature (log scale, as the preset stores it)
and SigLIP's bias, for the contrastive losses (`kitm.experiment.encoders.hand_over_logit_scale`).
"""

from __future__ import annotations

import dataclasses

import keras
import numpy as np
from keras import ops

from kitm.errors import KitmConfigError, option
from kitm.layers.flat_projections import flatten_projections


def _sub_backbone(backbone, side: str):
    """The image or text encoder inside a CLIP / SigLIP backbone; any other backbone is itself."""
    encoder = getattr(backbone, "vision_encoder" if side == "image" else "text_encoder", None)
    return encoder if encoder is not None else backbone


@keras.saving.register_keras_serializable(package="kitm")
class HubImageTower(keras.layers.Layer):
    """Images in [0, 1] [B, H, W, 3] -> the backbone's pooled feature [B, W].

    Args:
        backbone: a keras-hub image backbone or encoder (CLIPVisionEncoder, SigLIPVisionEncoder, ViTBackbone,
            DINOV2Backbone, ResNetBackbone).
        family: clip, siglip, vit, dinov2 or resnet (decides the pooling).
        scale, offset: per-channel normalisation of [0, 1] pixels, `x * scale + offset`.
    """

    POOLING = {"clip": "first_token", "vit": "first_token", "dinov2": "first_token", "resnet": "average",
               "siglip": "pooled"}

    def __init__(self, backbone, family: str, scale=(1.0, 1.0, 1.0), offset=(0.0, 0.0, 0.0), **kwargs):
        super().__init__(**kwargs)
        if isinstance(backbone, dict):
            backbone = keras.saving.deserialize_keras_object(backbone)
        self.backbone = backbone
        flatten_projections(backbone)  # the attention projections' cheaper gradient (kitm.layers.flat_projections)
        self.family = str(family)
        self.scale = [float(s) for s in scale]
        self.offset = [float(o) for o in offset]
        self.pooling = self.POOLING[self.family]
        self._dict_input = isinstance(backbone.input, dict)

    @property
    def image_shape(self):
        return tuple(getattr(self.backbone, "image_shape", None) or (None, None, 3))

    def build(self, input_shape):
        self.built = True  # the backbone is built

    def call(self, images, training=False):
        x = ops.cast(images, self.compute_dtype) * ops.convert_to_tensor(self.scale, self.compute_dtype) + (
            ops.convert_to_tensor(self.offset, self.compute_dtype))
        out = self.backbone({"images": x} if self._dict_input else x, training=training)
        if self.pooling == "first_token":
            return out[:, 0, :]
        if self.pooling == "average":
            return ops.mean(out, axis=(1, 2))
        return out

    def get_config(self):
        config = super().get_config()
        config.update(backbone=keras.saving.serialize_keras_object(self.backbone), family=self.family,
                      scale=self.scale, offset=self.offset)
        return config


@keras.saving.register_keras_serializable(package="kitm")
class HubTextTower(keras.layers.Layer):
    """The tokenizer's dict of backbone inputs -> the pooled text feature [B, W] (module docstring).

    Args:
        backbone: a keras-hub text backbone or encoder (CLIPTextEncoder, SigLIPTextEncoder, BertBackbone).
        family: clip, siglip or bert.
    """

    def __init__(self, backbone, family: str, **kwargs):
        super().__init__(**kwargs)
        if isinstance(backbone, dict):
            backbone = keras.saving.deserialize_keras_object(backbone)
        self.backbone = backbone
        flatten_projections(backbone)
        self.family = str(family)
        self.input_names = tuple(sorted(backbone.input)) if isinstance(backbone.input, dict) else ("token_ids",)

    @property
    def max_sequence_length(self) -> int | None:
        return getattr(self.backbone, "max_sequence_length", None)

    def build(self, input_shape):
        self.built = True

    def call(self, tokens, training=False):
        inputs = {name: tokens[name] for name in self.input_names}
        out = self.backbone(inputs, training=training)
        if self.family == "clip":  # keras-hub's CLIPTextPooler: the end-of-text token has the largest id
            eos = ops.cast(ops.argmax(tokens["token_ids"], axis=-1), "int32")
            return ops.take_along_axis(out, eos[:, None, None], axis=1)[:, 0, :]
        if self.family == "bert":
            mask = ops.cast(tokens["padding_mask"], out["sequence_output"].dtype)[..., None]
            total = ops.sum(out["sequence_output"] * mask, axis=1)
            return total / ops.maximum(ops.sum(mask, axis=1), 1.0)
        return out

    def get_config(self):
        config = super().get_config()
        config.update(backbone=keras.saving.serialize_keras_object(self.backbone), family=self.family)
        return config


# keras-hub's `Backbone.default_lora_layer_names()`: the attention query and value projections of its families.
LORA_LAYER_NAMES = ("query_dense", "value_dense", "query", "value")


def enable_lora(tower, rank: int) -> int:
    """Low-rank adapters on a hub tower (LoRA, Hu et al. 2021): every weight of its backbone frozen, then each
    attention query and value projection `W` replaced by `W + (alpha / rank) A B` with trainable A [in, rank]
    (He-uniform) and B [rank, out] (zeros, so training starts from the pretrained tower), alpha = rank; the layer's
    bias trains too. This is keras-hub's `Backbone.enable_lora` rule (the layers its `default_lora_layer_names`
    names), applied to the tower's own backbone, which for a CLIP or SigLIP preset is an encoder inside the joint
    backbone rather than a keras-hub Backbone. Keras computes the layer's kernel as the merged sum, so the flattened
    projections (kitm.layers.flat_projections), the SavedModel and a saved `.keras` file use the merged weights.

    Returns the number of adapted layers; raises KitmConfigError when the backbone has none."""
    backbone = tower.backbone
    names = tuple(backbone.default_lora_layer_names()) if hasattr(backbone, "default_lora_layer_names") else (
        LORA_LAYER_NAMES)
    layers = list(backbone._flatten_layers(include_self=False))
    for layer in layers:
        layer.trainable = False
    adapted = 0
    for layer in layers:
        if layer.name in names and layer.weights and hasattr(layer, "enable_lora"):
            layer.trainable = True
            layer.enable_lora(int(rank))
            adapted += 1
    if not adapted:
        raise KitmConfigError(f"{option('lora_rank')}: the {tower.name} has no attention projection named "
                              f"{' or '.join(names)} to adapt (its backbone is a {type(backbone).__name__}).")
    return adapted


def check_image_size(tower: HubImageTower, image_size: int, preset: str, setting: str) -> None:
    """A preset with a fixed input size (the ViTs' position embeddings) runs at that size only."""
    height, width = tower.image_shape[:2]
    if height is not None and (height != image_size or width != image_size):
        raise KitmConfigError(
            f"{option(setting)}={preset} takes {height}x{width} images, but {option('image_size')}={image_size}: "
            f"set {option('image_size')}={height} (the pipeline resizes to it and the preset's patch grid and "
            "position embeddings are fixed to it).")


@dataclasses.dataclass
class JointPreset:
    """A CLIP or SigLIP backbone whose encoders become both towers (module docstring)."""

    backbone: object
    family: str
    preset: str

    @property
    def embedding_dim(self) -> int:
        if self.family == "clip":
            return int(self.backbone.projection_dim)
        return int(self.backbone.vision_encoder.output.shape[-1])

    @property
    def logit_scale(self) -> float:
        head = self.backbone.clip_head if self.family == "clip" else self.backbone.siglip_head
        return float(keras.ops.convert_to_numpy(head.logit_scale))

    @property
    def logit_bias(self) -> float | None:
        if self.family != "siglip":
            return None
        return float(keras.ops.convert_to_numpy(self.backbone.siglip_head.logit_bias))

    def projection_kernels(self) -> tuple[np.ndarray, np.ndarray]:
        if self.family == "clip":
            return (keras.ops.convert_to_numpy(self.backbone.vision_projection.kernel),
                    keras.ops.convert_to_numpy(self.backbone.text_projection.kernel))
        eye = np.eye(self.embedding_dim, dtype=np.float32)
        return eye, eye

    def initialize_projections(self, model) -> None:
        """Set a built DualEncoder's projections to the preset's (biases 0), so it starts in its joint space."""
        for dense, kernel in zip((model.image_projection, model.text_projection), self.projection_kernels()):
            if tuple(dense.kernel.shape) != kernel.shape:
                raise KitmConfigError(
                    f"{option('joint_preset')}={self.preset}: its projection is {kernel.shape}, the model's "
                    f"{tuple(dense.kernel.shape)}; leave {option('embedding_dim')} unset (the preset's is "
                    f"{self.embedding_dim}).")
            dense.kernel.assign(kernel.astype(np.float32))
            dense.bias.assign(np.zeros(dense.bias.shape, np.float32))

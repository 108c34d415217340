"""Tiny random-weight keras-hub presets saved to a local directory: the offline path of tests and flagfiles.

`save_tiny_preset(directory, "clip")` builds a CLIP (or SigLIP, or BERT) configuration of a few thousand weights,
with a tokenizer whose vocabulary covers `words` (whole words plus every letter, so any caption tokenizes) and the
family's image converter, and writes them with keras-hub's `save_to_preset`. The image-only families (vit, dinov2,
resnet) get a backbone and the family's image converter, no tokenizer; their image size is `image_size` (ViT,
DINOv2: fixed patch grid and position embeddings) or free (ResNet, like keras-hub's ResNet presets: any size).
The directory is then a preset like a downloaded one: `--joint_preset=<directory>`, `--image_preset=<directory>`,
`--text_preset=<directory>` run with no network. The weights are random: it exercises the machinery, not the
pretrained joint space.
"""

from __future__ import annotations

import os
import string

from kitm.layers.hub_presets import FAMILY_NORMALIZATION

DEFAULT_WORDS = ("a", "an", "the", "of", "and", "in", "on", "to", "with", "is", "that", "small", "large", "big",
                 "red", "green", "blue", "yellow", "white", "black", "circle", "square", "triangle", "shape", "shapes",
                 "left", "right", "above", "below", "top", "bottom", "center", "middle", "picture", "one", "two",
                 "three", "dog", "cat", "man", "woman", "photo")
_CHARACTERS = string.ascii_lowercase + string.digits + ".,'-:;!?"


def _clip_tokenizer(words):
    """A byte-pair vocabulary: every character (alone and word-final), and each word built by successive merges;
    the end-of-text token takes the largest id (CLIP's text pooling looks for it with argmax)."""
    import keras_hub

    vocabulary: dict[str, int] = {}
    merges: list[str] = []

    def add(token):
        vocabulary.setdefault(token, len(vocabulary))

    for char in _CHARACTERS:
        add(char)
        add(char + "</w>")
    for word in sorted({w.lower() for w in words if w.isalnum() and len(w) > 1}):
        prefix = word[0]
        for index, char in enumerate(word[1:], start=1):
            last = index == len(word) - 1
            piece = char + ("</w>" if last else "")
            merge = f"{prefix} {piece}"
            if merge not in merges:
                merges.append(merge)
            prefix += piece
            add(prefix)
    add("<|startoftext|>")
    add("<|endoftext|>")
    return keras_hub.tokenizers.CLIPTokenizer(vocabulary=vocabulary, merges=merges)


def _bert_tokenizer(words):
    import keras_hub

    vocabulary = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocabulary += list(_CHARACTERS) + ["##" + c for c in _CHARACTERS]
    vocabulary += sorted({w.lower() for w in words if w.isalnum() and len(w) > 1} - set(vocabulary))
    return keras_hub.tokenizers.BertTokenizer(vocabulary=vocabulary, lowercase=True)


def _siglip_tokenizer(words, vocabulary_size: int = 96):
    import io

    import keras_hub
    import sentencepiece

    text = " ".join(words) + " " + " ".join(_CHARACTERS)
    proto = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter([text] * 4), model_writer=proto, vocab_size=vocabulary_size, model_type="unigram",
        pad_id=0, eos_id=1, unk_id=2, bos_id=-1, pad_piece="<pad>", eos_piece="</s>", unk_piece="<unk>",
        hard_vocab_limit=False, minloglevel=2)
    return keras_hub.tokenizers.SigLIPTokenizer(proto=proto.getvalue())


def _image_converter(family: str, image_size: int):
    import keras_hub

    mean, std = FAMILY_NORMALIZATION[family]
    cls = {"clip": keras_hub.layers.CLIPImageConverter, "siglip": keras_hub.layers.SigLIPImageConverter,
           "vit": keras_hub.layers.ViTImageConverter, "dinov2": keras_hub.layers.DINOV2ImageConverter,
           "resnet": keras_hub.layers.ResNetImageConverter}[family]
    return cls(image_size=(image_size, image_size), scale=[1.0 / (255.0 * s) for s in std],
               offset=[-m / s for m, s in zip(mean, std)])


def save_tiny_preset(directory, family: str = "clip", *, image_size: int = 32, patch_size: int = 8,
                     hidden_dim: int = 16, num_layers: int = 1, num_heads: int = 2, projection_dim: int = 16,
                     max_sequence_length: int = 32, words=DEFAULT_WORDS, seed: int = 0) -> str:
    """Write a tiny random-weight preset of `family` (clip, siglip, bert, vit, dinov2 or resnet) into `directory`;
    returns its path. ResNet ignores the transformer sizes: one basic block of 64 filters (keras-hub requires the
    first stack's 64) after a 64-filter stem, so its feature is 64 wide."""
    import keras
    import keras_hub

    keras.utils.set_random_seed(seed)
    os.makedirs(directory, exist_ok=True)
    intermediate = 2 * hidden_dim
    if family == "clip":
        tokenizer = _clip_tokenizer(words)
        backbone = keras_hub.models.CLIPBackbone(
            vision_encoder=keras_hub.models.CLIPVisionEncoder(
                patch_size=patch_size, hidden_dim=hidden_dim, num_layers=num_layers, num_heads=num_heads,
                intermediate_dim=intermediate, image_shape=(image_size, image_size, 3)),
            text_encoder=keras_hub.models.CLIPTextEncoder(
                vocabulary_size=tokenizer.vocabulary_size(), embedding_dim=hidden_dim, hidden_dim=hidden_dim,
                num_layers=num_layers, num_heads=num_heads, intermediate_dim=intermediate,
                max_sequence_length=max_sequence_length),
            projection_dim=projection_dim)
    elif family == "siglip":
        tokenizer = _siglip_tokenizer(words)
        backbone = keras_hub.models.SigLIPBackbone(
            vision_encoder=keras_hub.models.SigLIPVisionEncoder(
                patch_size=patch_size, hidden_dim=hidden_dim, num_layers=num_layers, num_heads=num_heads,
                intermediate_dim=intermediate, image_shape=(image_size, image_size, 3)),
            text_encoder=keras_hub.models.SigLIPTextEncoder(
                vocabulary_size=tokenizer.vocabulary_size(), embedding_dim=hidden_dim, hidden_dim=hidden_dim,
                num_layers=num_layers, num_heads=num_heads, intermediate_dim=intermediate,
                max_sequence_length=max_sequence_length))
    elif family == "bert":
        tokenizer = _bert_tokenizer(words)
        backbone = keras_hub.models.BertBackbone(
            vocabulary_size=tokenizer.vocabulary_size(), num_layers=num_layers, num_heads=num_heads,
            hidden_dim=hidden_dim, intermediate_dim=intermediate, max_sequence_length=max_sequence_length)
    elif family == "vit":
        tokenizer = None
        backbone = keras_hub.models.ViTBackbone(
            image_shape=(image_size, image_size, 3), patch_size=patch_size, num_layers=num_layers,
            num_heads=num_heads, hidden_dim=hidden_dim, mlp_dim=intermediate)
    elif family == "dinov2":
        tokenizer = None
        backbone = keras_hub.models.DINOV2Backbone(
            patch_size=patch_size, num_layers=num_layers, hidden_dim=hidden_dim, num_heads=num_heads,
            intermediate_dim=intermediate, image_shape=(image_size, image_size, 3),
            position_embedding_shape=(image_size, image_size, 3))
    elif family == "resnet":
        tokenizer = None
        backbone = keras_hub.models.ResNetBackbone(
            input_conv_filters=[64], input_conv_kernel_sizes=[3], stackwise_num_filters=[64],
            stackwise_num_blocks=[1], stackwise_num_strides=[1], block_type="basic_block")
    else:
        raise ValueError(f"family must be clip, siglip, bert, vit, dinov2 or resnet; got {family!r}.")
    backbone.save_to_preset(str(directory))
    if tokenizer is not None:
        tokenizer.save_to_preset(str(directory))
    if family != "bert":
        _image_converter(family, image_size).save_to_preset(str(directory))
    return str(directory)

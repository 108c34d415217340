"""A trained dual encoder's keras-hub towers as keras-hub presets: the form the Hugging Face and Kaggle hubs take.

`save_tower_presets(model, tokenizer, directory)` writes

- `<directory>/image/`: the image tower's backbone as a keras-hub preset (`Backbone.save_to_preset`: config.json,
  metadata.json, model.weights.h5), which `keras_hub.models.Backbone.from_preset("<directory>/image")` loads;
- `<directory>/text/`: the text tower's backbone and its tokenizer (`Tokenizer.save_to_preset`: tokenizer.json and
  its assets; `Backbone.from_preset("<directory>/text")` loads the backbone; keras-hub's `Tokenizer.from_preset`
  loads the tokenizer of a whole backbone such as BERT's, while that of a CLIP or SigLIP text encoder saved alone is
  read from its tokenizer.json and assets, as keras-hub's loader reads them: `load_tower_presets` and kitm's
  `--text_preset=<directory>/text` do);
- `<directory>/kitm_heads.json` and `kitm_heads.npz`: what kitm adds on top of the backbones, so that the preset
  gives the model's embeddings: each tower's family (its pooling: CLIP's class token or end-of-text token, SigLIP's
  pooled output, BERT's masked mean, ResNet's average), the image normalisation `x * scale + offset` of [0, 1]
  pixels, the tokenizer's sequence length, and the joint projections (`kernel`, `bias`) that the embeddings are
  L2-normalised after. `load_tower_presets(directory)` builds the kitm DualEncoder back from them.

A tower trained with LoRA (`--lora_rank`) is saved with its adapters merged into the kernels (Keras' weights files
store the merged kernel), so the preset is a plain backbone of the family. Upload (`keras_hub.upload_preset(
"hf://<user>/<name>", "<directory>/image")`, or `kaggle://...`) needs a network and the hub's credentials: documented
(docs/fine-tuning-clip.md), not tested. The folder is written under a temporary name and renamed when complete.
"""

from __future__ import annotations

import json
import os
import pathlib

import keras
import numpy as np

from kitm.files import atomic_path

HEADS_FILE = "kitm_heads.json"
PROJECTIONS_FILE = "kitm_heads.npz"


def _hub_towers(model):
    from kitm.layers.hub_towers import HubImageTower, HubTextTower

    image, text = model.image_encoder, model.text_encoder
    if not isinstance(image, HubImageTower) or not isinstance(text, HubTextTower):
        raise ValueError(f"Only keras-hub towers save as keras-hub presets; this model's towers are "
                         f"{type(image).__name__} and {type(text).__name__} (kitm.layers.hub_towers: "
                         "--image_encoder / --text_encoder naming a preset, or --joint_preset).")
    return image, text


def save_tower_presets(model, tokenizer, directory: str | os.PathLike) -> str:
    """Write `model`'s (a DualEncoder with keras-hub towers) two towers and `tokenizer` (a HubCaptionTokenizer) as
    keras-hub presets in a new folder `directory` (module docstring); returns its path."""
    image, text = _hub_towers(model)
    directory = pathlib.Path(directory)
    if directory.exists():
        raise FileExistsError(f"{directory} exists; presets are written into a new folder.")
    heads = {"embedding_dim": model.embedding_dim,
             "image": {"family": image.family, "scale": image.scale, "offset": image.offset},
             "text": {"family": text.family, "sequence_length": int(tokenizer.sequence_length),
                      "tokenizer_family": tokenizer.family},
             "embedding": "L2-normalise(pool(backbone(inputs)) @ kernel + bias) for each tower"}
    projections = {f"{side}_{name}": keras.ops.convert_to_numpy(weight)
                   for side, layer in (("image", model.image_projection), ("text", model.text_projection))
                   for name, weight in zip(("kernel", "bias"), layer.weights)}
    with atomic_path(directory, overwrite=False) as tmp:
        tmp.mkdir(parents=True)
        image.backbone.save_to_preset(str(tmp / "image"))
        text.backbone.save_to_preset(str(tmp / "text"))
        tokenizer.tokenizer.save_to_preset(str(tmp / "text"))
        (tmp / HEADS_FILE).write_text(json.dumps(heads, indent=2) + "\n")
        np.savez(tmp / PROJECTIONS_FILE, **projections)
    return str(directory)


def load_tower_presets(directory: str | os.PathLike):
    """(DualEncoder, HubCaptionTokenizer) from a folder `save_tower_presets` wrote: the backbones and the tokenizer
    by keras-hub's `from_preset`, kitm's pooling, normalisation and projections from kitm_heads.*."""
    import keras_hub

    from kitm.layers.hub_presets import load_tokenizer
    from kitm.layers.hub_tokenizers import HubCaptionTokenizer
    from kitm.layers.hub_towers import HubImageTower, HubTextTower
    from kitm.models import DualEncoder

    directory = pathlib.Path(directory)
    heads = json.loads((directory / HEADS_FILE).read_text())
    image_backbone = keras_hub.models.Backbone.from_preset(str(directory / "image"))
    text_backbone = keras_hub.models.Backbone.from_preset(str(directory / "text"))
    tokenizer = HubCaptionTokenizer(load_tokenizer(str(directory / "text"), "text_preset"),
                                    heads["text"]["tokenizer_family"], heads["text"]["sequence_length"])
    image = HubImageTower(image_backbone, heads["image"]["family"], heads["image"]["scale"], heads["image"]["offset"])
    text = HubTextTower(text_backbone, heads["text"]["family"])
    model = DualEncoder(image, text, heads["embedding_dim"], name="dual_encoder")
    # One example builds the model; a backbone of any image size (ResNet) gets 64 px for it.
    height, width, channels = (size or 64 for size in image.image_shape)
    length = heads["text"]["sequence_length"]
    model.build_from_inputs({"image": keras.KerasTensor((1, height, width, channels)),
                             "tokens": {name: keras.KerasTensor((1, length), "int32") for name in text.input_names}})
    with np.load(directory / PROJECTIONS_FILE) as saved:
        for side, layer in (("image", model.image_projection), ("text", model.text_projection)):
            layer.set_weights([saved[f"{side}_kernel"], saved[f"{side}_bias"]])
    return model, tokenizer

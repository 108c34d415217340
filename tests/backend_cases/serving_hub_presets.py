"""A backend case: a DualEncoder with keras-hub towers (a tiny random CLIP preset as the joint preset, its projections
from numpy; the image tower with LoRA adapters) saved as keras-hub presets (kitm.serving.hub_presets) and built back, on the active backend: the loaded
model's embeddings equal the saved model's, and `keras_hub.models.Backbone.from_preset` alone loads each tower's
backbone with the trained weights (issue 47, item 4). Each backend draws the tiny preset's random weights with its
own generator, so the backends' models differ; what each saves, it loads back."""

import os
import tempfile

import keras
import numpy as np

from kitm.layers.hub_tiny import save_tiny_preset
from kitm.serving.hub_presets import load_tower_presets, save_tower_presets


def cases():
    import keras_hub

    from kitm.experiment import experiment_config
    from kitm.experiment.encoders import build_hub_tokenizer, build_towers
    from kitm.layers.hub_towers import enable_lora
    from kitm.models import DualEncoder

    keras.config.set_floatx("float32")  # a served model's precision (run.py sets float64 for each case it runs)
    rng = np.random.default_rng(0)
    pixels = rng.uniform(size=(3, 32, 32, 3)).astype("float32")
    token_ids = np.array([[1, 5, 9, 2, 0, 0], [1, 7, 2, 0, 0, 0], [1, 4, 6, 8, 3, 2]], "int32")
    with tempfile.TemporaryDirectory() as folder:
        preset = save_tiny_preset(os.path.join(folder, "clip"), "clip", max_sequence_length=6)
        config = experiment_config("synthetic", joint_preset=preset, image_size=32, max_caption_length=6)
        tokenizer = build_hub_tokenizer(config)
        image_encoder, text_encoder, _ = build_towers(config, tokenizer)
        model = DualEncoder(image_encoder, text_encoder, 8)
        model({"image": pixels[:1], "tokens": {"token_ids": token_ids[:1]}})
        weights = np.random.default_rng(1)
        for layer in (model.image_projection, model.text_projection):
            layer.set_weights([weights.normal(scale=0.3, size=tuple(w.shape)).astype("float32") for w in layer.weights])
        # The image tower trained with LoRA: its adapters (B drawn non-zero, as after training) merge into the saved
        # kernels, so the preset is a plain backbone.
        enable_lora(model.image_encoder, 2)
        for variable in model.image_encoder.weights:
            if "lora" in variable.path:
                variable.assign(weights.normal(scale=0.3, size=tuple(variable.shape)).astype("float32"))
        tokens = {"token_ids": token_ids}
        saved = save_tower_presets(model, tokenizer, os.path.join(folder, "presets"))
        loaded, loaded_tokenizer = load_tower_presets(saved)
        alone = keras_hub.models.Backbone.from_preset(os.path.join(saved, "image"))
        # The saved towers as kitm's own --image_preset / --text_preset: the towers of a new run start from them.
        again = experiment_config("synthetic", image_encoder="hub", image_preset=os.path.join(saved, "image"),
                                  text_encoder="hub", text_preset=os.path.join(saved, "text"), image_size=32,
                                  max_caption_length=6)
        again_tokenizer = build_hub_tokenizer(again)
        again_image, again_text, _ = build_towers(again, again_tokenizer)
        results = {
            "image": keras.ops.convert_to_numpy(model.encode_image(pixels)),
            "text": keras.ops.convert_to_numpy(model.encode_text(tokens)),
            "loaded_image": keras.ops.convert_to_numpy(loaded.encode_image(pixels)),
            "loaded_text": keras.ops.convert_to_numpy(loaded.encode_text(tokens)),
            "backbone": keras.ops.convert_to_numpy(model.image_encoder.backbone({"images": pixels})),
            "backbone_alone": keras.ops.convert_to_numpy(alone({"images": pixels})),
            "tower": keras.ops.convert_to_numpy(model.image_encoder(pixels)),
            "tower_again": keras.ops.convert_to_numpy(again_image(pixels)),
            "text_tower": keras.ops.convert_to_numpy(model.text_encoder(tokens)),
            "text_tower_again": keras.ops.convert_to_numpy(again_text(tokens)),
            "tokenizer_again": np.array(float(again_tokenizer.vocabulary_size == tokenizer.vocabulary_size)),
            "lora_saved": np.array(float(not any("lora" in v.path for v in alone.weights))),
            "files": np.array(float(sorted(os.listdir(saved)) == ["image", "kitm_heads.json", "kitm_heads.npz",
                                                                  "text"])),
            "tokenizer": np.array(float(loaded_tokenizer.sequence_length == 6
                                        and loaded_tokenizer.vocabulary_size == tokenizer.vocabulary_size)),
        }
    return results

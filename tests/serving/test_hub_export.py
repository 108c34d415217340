"""The SavedModel of a keras-hub-tower model: raw strings and encoded image bytes in, the preset's tokenizer and image
normalisation inside the graph, loadable by TensorFlow + tensorflow-text alone, embeddings equal to the Keras
model's."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

SERVE = """
import json, sys
import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401
served = tf.saved_model.load(sys.argv[1])
captions = tf.constant(json.loads(sys.argv[2]))
images = tf.constant([open(path, "rb").read() for path in json.loads(sys.argv[3])])
np.save(sys.argv[4], served.encode_text(captions)["embeddings"].numpy())
np.save(sys.argv[5], served.encode_image(images)["embeddings"].numpy())
print(json.dumps({"kitm": "kitm" in sys.modules, "keras_hub": "keras_hub" in sys.modules}))
"""


@pytest.mark.slow
def test_a_joint_clip_model_serves_its_keras_embeddings_without_kitm_or_keras_hub(tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras_home"))
    from kitm.experiment import experiment_config
    from kitm.experiment.encoders import build_hub_tokenizer, build_towers
    from kitm.layers.hub_tiny import save_tiny_preset
    from kitm.models import DualEncoder
    from kitm.ops.images import decode_image, eval_image
    from kitm.serving import export_saved_model

    preset = save_tiny_preset(tmp_path / "clip", "clip")
    config = experiment_config("synthetic", joint_preset=preset, image_size=32)
    tokenizer = build_hub_tokenizer(config)
    image_encoder, text_encoder, joint = build_towers(config, tokenizer)
    model = DualEncoder(image_encoder, text_encoder, joint.embedding_dim)
    captions = ["a red circle", "the blue square above a small triangle", "Two shapes!"]
    model({"image": tf.zeros([1, 32, 32, 3]), "tokens": tokenizer(tf.constant(captions[:1]))})
    joint.initialize_projections(model)
    paths = []
    for index, size in enumerate([(40, 40), (32, 48)]):
        pixels = tf.cast(tf.random.stateless_uniform([*size, 3], [index, 1], 0, 255), tf.uint8)
        paths.append(str(tmp_path / f"{index}.png"))
        tf.io.write_file(paths[-1], tf.io.encode_png(pixels))
    export = export_saved_model(model, tokenizer, tmp_path / "export", image_size=32, eval_crop_fraction=1.0)

    expected_text = model.encode_text(tokenizer(tf.constant(captions))).numpy()
    pixels = tf.stack([eval_image(decode_image(tf.io.read_file(path)), 32, 1.0) for path in paths])
    expected_image = model.encode_image(pixels).numpy()

    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    served = subprocess.run([sys.executable, "-c", SERVE, export, json.dumps(captions), json.dumps(paths),
                             str(tmp_path / "text.npy"), str(tmp_path / "image.npy")], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=300)
    assert served.returncode == 0, served.stderr
    assert json.loads(served.stdout.strip().splitlines()[-1]) == {"kitm": False, "keras_hub": False}
    text_gap = np.abs(np.load(tmp_path / "text.npy") - expected_text).max()
    image_gap = np.abs(np.load(tmp_path / "image.npy") - expected_image).max()
    print(f"max abs difference: text {text_gap:.2e}, image {image_gap:.2e}")
    assert text_gap < 1e-5 and image_gap < 1e-5

"""Export (issue 6, item 4): versioned SavedModels under <run>/export/<n>, the three signatures as
saved_model_cli lists them, served embeddings equal to the Keras model's in a process without kitm, and input
checks inside the graph (empty captions, bytes that are no image, features of the wrong width)."""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest



@pytest.fixture(scope="module")
def prod_run(production_run):
    return production_run


def _saved_model_cli(export_dir, cwd):
    """`saved_model_cli show --dir ... --all`: the script installed with tensorflow beside this Python, else its
    module."""
    script = pathlib.Path(sys.executable).with_name("saved_model_cli")
    command = [str(script)] if script.is_file() else [sys.executable, "-m", "tensorflow.python.tools.saved_model_cli"]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([*command, "show", "--dir", str(export_dir), "--all"], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=300)


@pytest.mark.slow
def test_launcher_writes_version_1_atomically_and_prints_it(prod_run):
    run_dir, result = prod_run
    export = run_dir / "export"
    assert f"SavedModel: {export / '1'}" in result.stdout
    assert json.loads((run_dir / "summary.json").read_text())["export"] == str(export / "1")
    assert sorted(p.name for p in export.iterdir()) == ["1"]  # no temporary directory left behind
    assert (export / "1" / "saved_model.pb").is_file()


@pytest.mark.slow
def test_an_empty_image_batch_gives_empty_embeddings_like_an_empty_caption_batch(prod_run):
    """encode_image on zero images answered `Incompatible shapes: [16] vs. [0,48,48,3]` (the CNN's batch
    normalisation on an empty batch) where encode_text returns [0, D]; now both return [0, D], score [0, N] / [M, 0]."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401 (registers the tokenizer's ops)

    run_dir, _ = prod_run
    loaded = tf.saved_model.load(str(run_dir / "export" / "1"))
    empty, caption = tf.constant([], tf.string), tf.constant(["a red circle"])
    assert loaded.signatures["encode_image"](images=empty)["embeddings"].shape == (0, 32)
    assert loaded.signatures["encode_text"](captions=empty)["embeddings"].shape == (0, 32)
    assert loaded.signatures["score"](captions=caption, images=empty)["scores"].shape == (0, 1)
    from kitm.data.synthetic_records import encode_png

    png = tf.constant([encode_png(np.full((40, 40, 3), 90, np.uint8))] * 2)
    image = loaded.signatures["encode_image"](images=png)["embeddings"].numpy()
    assert image.shape == (2, 32) and np.allclose(np.linalg.norm(image, axis=1), 1, atol=1e-5)
    assert loaded.signatures["score"](captions=empty, images=png)["scores"].shape == (2, 0)


@pytest.mark.slow
def test_saved_model_cli_lists_the_three_signatures(prod_run, tmp_path):
    run_dir, _ = prod_run
    result = _saved_model_cli(run_dir / "export" / "1", tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    blocks = {name: out.split(f"signature_def['{name}']:")[1].split("signature_def[")[0]
              for name in ("encode_text", "encode_image", "score")}
    assert "inputs['captions']" in blocks["encode_text"] and "DT_STRING" in blocks["encode_text"]
    assert "outputs['embeddings']" in blocks["encode_text"] and "shape: (-1, 32)" in blocks["encode_text"]
    assert "inputs['images']" in blocks["encode_image"] and "DT_STRING" in blocks["encode_image"]
    assert "shape: (-1, 32)" in blocks["encode_image"]
    assert "inputs['captions']" in blocks["score"] and "inputs['images']" in blocks["score"]
    assert "outputs['scores']" in blocks["score"] and "shape: (-1, -1)" in blocks["score"]
    assert all("Method name is: tensorflow/serving/predict" in block for block in blocks.values())


@pytest.mark.slow
def test_served_embeddings_equal_the_keras_model_and_bad_inputs_are_named(prod_run, tmp_path, serve_in_fresh_python):
    import tensorflow as tf
    from PIL import Image

    from kitm.data import synthetic
    from kitm.ops.images import decode_image, eval_image
    from kitm.data.synthetic_records import encode_png
    from kitm.layers import CaptionTokenizer, GRUTextEncoder, SmallConvEncoder
    from kitm.models import DualEncoder

    run_dir, _ = prod_run
    world = synthetic.generate_world(12, seed=3, image_size=32, world="shapes")
    paths = []
    for i in range(2):
        paths.append(tmp_path / f"scene{i}.png")
        paths[-1].write_bytes(encode_png(world.images[i]))
    # A non-square JPEG: the graph's centre crop (0.875 of the shorter side) and resize do real work.
    paths.append(tmp_path / "wide.jpg")
    Image.fromarray(np.concatenate([world.images[2], world.images[3][:, :8]], axis=1)).save(paths[-1], quality=95)
    captions = ["a small red circle", "A blue square left of a green triangle.", "zzz unknown words"]
    out = tmp_path / "served.npz"
    result = serve_in_fresh_python(run_dir / "export" / "1", json.dumps(captions),
                                   json.dumps([str(p) for p in paths]), out, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    errors = json.loads(result.stdout.strip().splitlines()[-1])
    assert "encode_text: every caption must contain text" in errors["empty"] and "[1]" in errors["empty"]
    assert "encode_image: images must be encoded PNG, JPEG, GIF or BMP bytes" in errors["not_image"]
    assert "rows are not:] [1]" in errors["not_image"].replace("\n", " ")
    assert errors["truncated"] != "accepted"  # a cut PNG passes the header check; TensorFlow's decoder refuses it
    assert "score: images must be encoded" in errors["score_not_image"]
    served = np.load(out)

    # The Keras model restored from the run's last checkpoint, fed the evaluation preprocessing.
    tokenizer = CaptionTokenizer(str(run_dir / "vocabulary.txt"), 32)
    model = DualEncoder(SmallConvEncoder(), GRUTextEncoder(tokenizer.vocabulary_size, 16, 16), 32, name="dual_encoder")
    model({"image": tf.zeros([1, 32, 32, 3]), "tokens": tf.zeros([1, 32], tf.int32)})
    model.load_weights(str(run_dir / "checkpoints" / "last.weights.h5"))
    text = model.encode_text(tokenizer(tf.constant(captions))).numpy()
    pixels = tf.stack([eval_image(decode_image(p.read_bytes()), 32, 0.875) for p in paths])
    image = model.encode_image(pixels).numpy()
    np.testing.assert_allclose(served["text"], text, atol=1e-5)
    np.testing.assert_allclose(served["image"], image, atol=1e-5)
    np.testing.assert_allclose(served["scores"], image @ text.T, atol=1e-5)




@pytest.mark.slow
def test_the_onnx_towers_embed_as_the_saved_model(prod_run, onnx_towers_against_saved_model):
    """`--export_onnx` (issue 47, item 3): onnx/1 beside export/1 holds the two towers and what goes into them; under
    onnxruntime they give the SavedModel's embeddings (1e-5) for captions tokenised and images cropped (0.875 of
    the shorter side) and resized as its preprocessing.json says."""
    from kitm.data import synthetic
    from kitm.data.synthetic_records import encode_png

    run_dir, result = prod_run
    folder = run_dir / "onnx" / "1"
    assert f"ONNX towers: {folder}" in result.stdout
    assert sorted(p.name for p in (run_dir / "onnx").iterdir()) == ["1"]  # no temporary left behind
    assert sorted(p.name for p in folder.iterdir()) == ["image_tower.onnx", "preprocessing.json", "text_tower.onnx",
                                                        "vocabulary.txt"]
    described = json.loads((folder / "preprocessing.json").read_text())
    assert described["image_tower"]["inputs"] == {"pixels": {"shape": ["N", 32, 32, 3], "dtype": "float32"}}
    assert described["text_tower"]["inputs"] == {"token_ids": {"shape": ["N", 32], "dtype": "int32"}}
    assert described["eval_crop_fraction"] == 0.875 and described["embedding_dim"] == 32
    world = synthetic.generate_world(4, seed=5, image_size=40, world="shapes")
    pngs = [encode_png(world.images[i]) for i in range(3)]
    captions = ["a small red circle", "A blue square left of a green triangle.", "zzz unknown words", "big"]
    text, image = onnx_towers_against_saved_model(run_dir, captions, pngs)
    assert text < 1e-5 and image < 1e-5, (text, image)

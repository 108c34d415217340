"""The launcher on Keras' PyTorch backend (issue 33, item 2: `fit` where Keras supports it, else a clear refusal):
`KERAS_BACKEND=torch python -m kitm.launch` trains the tiny model from the tf.data pipeline, validates and scores
the test split; its weights file loads into the TensorFlow model. The SavedModel export, which Keras cannot trace
from a PyTorch model, is refused before anything runs, naming --export."""

import json
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("torch")


@pytest.mark.slow
def test_the_launcher_trains_and_evaluates_on_pytorch(tiny_synthetic, tiny_flags, subprocess_env, repo_root,
                                                      tmp_path):
    import tensorflow as tf

    from kitm.layers import CaptionTokenizer, GRUTextEncoder, SmallConvEncoder
    from kitm.models import DualEncoder

    run_dir = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "kitm.launch", *tiny_flags, f"--data_dir={tiny_synthetic}",
                           f"--run_dir={run_dir}", "--epochs=2", "--eval_every_epochs=2", "--projector_samples=8",
                           "--export=false"],
                          env=subprocess_env(KERAS_BACKEND="torch"), cwd=repo_root, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    loss = summary["history"]["loss"]
    assert len(loss) == 2 and loss[1] < loss[0] and summary["optimizer_steps"] == 12
    assert any(key.startswith("val") for key in summary["history"]) and summary["test"]["t2i_R@10"] > 0
    assert list(run_dir.rglob("projector_config.pbtxt"))  # the embedding projector's callback too

    # The weights file is the same on every backend: it loads into the TensorFlow model, and gives finite embeddings.
    tokenizer = CaptionTokenizer(str(run_dir / "vocabulary.txt"), 32)
    model = DualEncoder(SmallConvEncoder(), GRUTextEncoder(tokenizer.vocabulary_size, 16, 16), 32, name="dual_encoder")
    model({"image": tf.zeros([1, 32, 32, 3]), "tokens": tf.zeros([1, 32], tf.int32)})
    model.load_weights(str(run_dir / "checkpoints" / "last.weights.h5"))
    text = model.encode_text(tokenizer(tf.constant(["a small red circle"]))).numpy()
    assert np.isfinite(text).all() and np.linalg.norm(text) == pytest.approx(1.0, abs=1e-5)


REFUSED_ON_TORCH = [
    ([], "--export: the SavedModel export runs on the TensorFlow and JAX backends, not on torch (Keras cannot "
         "trace a torch model into TensorFlow). Train here with --export=false"),
    (["--export=false", "--cpu_devices=2"], "--cpu_devices=2 on the torch backend: the launcher splits the CPU into "
                                            "devices on TensorFlow and JAX only"),
    (["--export=false", "--strategy=multi_worker"], "--strategy=multi_worker on the torch backend: the launcher "
                                                    "distributes with tf.distribute on TensorFlow and "
                                                    "keras.distribution.DataParallel on JAX; use --strategy=default "
                                                    "here, or KERAS_BACKEND=tensorflow."),
]


def test_what_the_launcher_cannot_do_on_pytorch_is_refused_before_the_run_naming_the_flag(
        tiny_synthetic, tiny_flags, launch_refused_on, tmp_path):
    argument_lists = [[*tiny_flags, f"--data_dir={tiny_synthetic}", f"--run_dir={tmp_path / f'run{i}'}",
                       "--epochs=1", *flags] for i, (flags, _) in enumerate(REFUSED_ON_TORCH)]
    for i, ((flags, message), outcome) in enumerate(zip(REFUSED_ON_TORCH, launch_refused_on("torch",
                                                                                            argument_lists))):
        assert outcome["code"] == 2, (flags, outcome)
        assert f"kitm.launch: error: {message}" in outcome["stderr"], (flags, outcome)
        assert "Traceback" not in outcome["stderr"]
        assert not (tmp_path / f"run{i}").exists()

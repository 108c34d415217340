"""A run with both towers and the joint space from one local CLIP preset (tiny random weights, saved with
keras-hub's save_to_preset), all offline: train on the tiny synthetic world, evaluate, export, serve the SavedModel
in a Python that imports only TensorFlow and tensorflow-text."""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

SERVE = """
import json, sys
import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tokenizer's ops)
served = tf.saved_model.load(sys.argv[1])
text = served.encode_text(tf.constant(["a red circle", "two small squares"]))["embeddings"].numpy()
png = tf.io.encode_png(tf.cast(tf.random.uniform([40, 40, 3], 0, 255, seed=1), tf.uint8)).numpy()
image = served.encode_image(tf.constant([png]))["embeddings"].numpy()
scores = served.score(tf.constant(["a red circle", "two small squares"]), tf.constant([png]))["scores"].numpy()
print(json.dumps({"text": text.shape, "image": image.shape, "norms": np.linalg.norm(text, axis=1).tolist(),
                  "score_gap": float(np.abs(scores - image @ text.T).max()),
                  "kitm": "kitm" in sys.modules, "keras_hub": "keras_hub" in sys.modules}))
"""


def _flagfile_config(flagfile, *extra):
    """The configuration `python -m kitm.launch --flagfile=<flagfile> <extra>` runs (the launcher's translation)."""
    from kitm import launch

    launch.FLAGS.unparse_flags()
    try:
        launch.FLAGS(["kitm.launch", f"--flagfile={ROOT / 'launch' / flagfile}", *extra])
        return launch.experiment_config()
    finally:
        launch.FLAGS.unparse_flags()


@pytest.fixture
def tiny_clip(tiny_synthetic, tmp_path, monkeypatch):
    """A local CLIP preset with tiny random weights (keras-hub's save_to_preset), and an empty Keras cache."""
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras_home"))  # nothing downloaded or found
    monkeypatch.chdir(ROOT)  # the graded flagfile names launch/clip_finetune.flags relative to the checkout
    from kitm.data.pipeline import training_captions
    from kitm.layers.hub_tiny import save_tiny_preset
    from kitm.layers.tokenizer import build_vocabulary

    words = build_vocabulary(training_captions(tiny_synthetic, "train"))
    return save_tiny_preset(tmp_path / "tiny_clip", "clip", image_size=32, words=words)


def _quick(tiny_synthetic, run_dir):
    return [f"--dataset=synthetic", f"--data_dir={tiny_synthetic}", f"--run_dir={run_dir}", "--epochs=1",
            "--batch_size=16", "--image_size=32", "--projector_samples=0", "--progress=false",
            "--learning_rate=1e-3", "--warmup_epochs=0.25", "--image_tower_lr_multiplier=0.1",
            "--captions_per_step=sample", "--collapse_threshold=0"]


@pytest.mark.slow
def test_the_clip_finetune_flagfile_trains_evaluates_exports_and_serves_offline(tiny_synthetic, tiny_clip, tmp_path):
    from kitm.experiment import run

    config = _flagfile_config("clip_finetune.flags", f"--joint_preset={tiny_clip}", "--eval_every_epochs=0",
                              *_quick(tiny_synthetic, tmp_path / "run"))
    assert config.objective.loss == ("infonce",)
    summary = run(config)
    assert summary["flags"]["image_encoder"] == "hub" and summary["flags"]["text_encoder"] == "hub"
    assert summary["flags"]["embedding_dim"] == 16  # the preset's projection size
    assert summary["test"]["i2t_R@1"] >= 0 and summary["epochs_run"] == 1
    assert "infonce/logit_scale" in summary["history"]  # the learned temperature, logged
    assert not (tmp_path / "run" / "vocabulary.txt").exists()  # the preset's tokenizer, not kitm's vocabulary

    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    served = subprocess.run([sys.executable, "-c", SERVE, summary["export"]], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=300)
    assert served.returncode == 0, served.stderr
    result = json.loads(served.stdout.strip().splitlines()[-1])
    assert result["text"] == [2, 16] and result["image"] == [1, 16]
    assert max(abs(n - 1) for n in result["norms"]) < 1e-5 and result["score_gap"] < 1e-5
    assert not result["kitm"] and not result["keras_hub"]


def test_the_graded_clip_flagfile_builds_graded_infonce_on_the_clip_flagfile(tiny_synthetic, tiny_clip, tmp_path):
    # Its training runs below, on two devices with global negatives.
    config = _flagfile_config("clip_finetune_graded.flags", f"--joint_preset={tiny_clip}", "--relevance=truth",
                              "--eval_relevance=truth", *_quick(tiny_synthetic, tmp_path / "run"))
    clip = _flagfile_config("clip_finetune.flags", f"--joint_preset={tiny_clip}",
                            *_quick(tiny_synthetic, tmp_path / "run"))
    assert config.objective.loss == ("graded_infonce",) and config.objective.graded_tau == 0.05
    assert config.model == clip.model and config.training == clip.training


@pytest.mark.slow
def test_the_graded_clip_flagfile_trains_on_two_devices_with_global_negatives(tiny_synthetic, tiny_clip, tmp_path,
                                                                              launch):
    # Two logical CPU devices (a fresh process: they are split before TensorFlow starts), graded InfoNCE with global
    # negatives (each replica's rows scored against the whole batch's, graded by the whole batch's relevance rows;
    # the synthetic world's exact relevance stands in for the sentence-embedding rows the flagfile reads) and
    # gradient caching in chunks of 4 of each replica's 8 rows, scored with the exact relevance.
    run_dir = tmp_path / "run"
    result = launch([f"--flagfile={ROOT / 'launch' / 'clip_finetune_graded.flags'}", f"--joint_preset={tiny_clip}",
                     "--eval_every_epochs=0", "--export=false", "--relevance=truth", "--eval_relevance=truth",
                     "--strategy=mirrored", "--cpu_devices=2", "--negatives=global", "--grad_cache_chunk=4",
                     *_quick(tiny_synthetic, run_dir)], timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["replicas"] == 2 and summary["flags"]["negatives"] == "global"
    assert summary["flags"]["grad_cache_chunk"] == 4 and summary["flags"]["loss"] == ["graded_infonce"]
    assert summary["epochs_run"] == 1 and np.isfinite(summary["final_train_metrics"]["loss"])
    assert "graded_infonce/logit_scale" in summary["history"]
    assert summary["test"]["i2t_NCS@1"] >= 0  # scored with the exact relevance

"""Runs with both towers and the joint space from one local CLIP preset (tiny random weights, saved with keras-hub's
save_to_preset), all offline, on the tiny synthetic world: the graded flagfile fine-tunes on two devices with global
negatives; the CLIP flagfile with LoRA adapters is killed, resumed with its adapters, evaluated, exported, and served
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
    return ["--dataset=synthetic", f"--data_dir={tiny_synthetic}", f"--run_dir={run_dir}", "--epochs=1",
            "--batch_size=16", "--image_size=32", "--projector_samples=0", "--progress=false",
            "--learning_rate=1e-3", "--warmup_epochs=0.25", "--image_tower_lr_multiplier=0.1",
            "--captions_per_step=sample", "--collapse_threshold=0"]


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


@pytest.mark.slow
def test_the_clip_finetune_flagfile_with_lora_trains_resumes_after_a_kill_exports_and_serves_offline(
        tiny_synthetic, tiny_clip, tmp_path, kitm_popen, kitm_python, monkeypatch):
    # clip_finetune.flags with --lora_rank: the adapters train, a SIGKILL after the first backup resumes with them,
    # the run evaluates and exports, and the SavedModel serves in a Python without kitm or keras-hub. (Full
    # fine-tuning of the joint preset through the launcher: the graded flagfile's two-device run below.)
    import signal
    import time

    from kitm.training.lora_state import ADAPTERS

    run_dir = tmp_path / "run"
    # 6 steps (one epoch), a backup every 2 steps; killed at the first one.
    command = ["-m", "kitm.launch", f"--flagfile={ROOT / 'launch' / 'clip_finetune.flags'}",
               f"--joint_preset={tiny_clip}", "--eval_every_epochs=0", *_quick(tiny_synthetic, run_dir),
               "--lora_rank=2", "--backup_every_steps=2", "--export_presets"]
    metadata = run_dir / "backup" / "training_metadata.json"
    # Without the fixture's empty KERAS_HOME (the preset is a local directory either way): the runs then fork from the
    # suite's server instead of starting a fresh interpreter each.
    monkeypatch.delenv("KERAS_HOME", raising=False)
    first = kitm_popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 400
        while not metadata.exists() and first.poll() is None and time.time() < deadline:
            time.sleep(0.02)
        assert metadata.exists(), "no backup appeared: " + (first.stdout.read() if first.poll() is not None else "")
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
    killed_at = json.loads(metadata.read_text())["step"]
    with np.load(run_dir / "backup" / ADAPTERS) as adapters:
        assert int(adapters["step"]) == killed_at
        b = [adapters[key] for key in adapters.files if key.endswith("/b")]
    assert b and any(np.abs(x).max() > 0 for x in b)  # B starts at zero: the adapters trained

    second = kitm_python(command, cwd=ROOT)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-5000:]
    assert f"Resumed from the backup at step {killed_at} of 6." in second.stdout
    assert "fresh adapters" not in second.stdout  # restored as they were, not merged and drawn again
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["optimizer_steps"] == 6 and summary["flags"]["lora_rank"] == 2
    parameters = summary["parameters"]
    assert 0 < parameters["trainable"] < parameters["non_trainable"], parameters
    assert summary["peak_memory"]["host_peak_rss_bytes"] > 0
    assert summary["flags"]["image_encoder"] == "hub" and summary["flags"]["text_encoder"] == "hub"
    assert summary["flags"]["embedding_dim"] == 16  # the preset's projection size
    assert summary["flags"]["loss"] == ["infonce"] and "infonce/logit_scale" in summary["history"]
    assert summary["test"]["i2t_R@1"] >= 0
    assert not (run_dir / "vocabulary.txt").exists()  # the preset's tokenizer, not kitm's vocabulary

    # The export (its adapted layers computing W + A B) serves in a Python that imports only TensorFlow.
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    served = subprocess.run([sys.executable, "-c", SERVE, summary["export"]], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=300)
    assert served.returncode == 0, served.stderr
    result = json.loads(served.stdout.strip().splitlines()[-1])
    assert result["text"] == [2, 16] and result["image"] == [1, 16]
    assert max(abs(n - 1) for n in result["norms"]) < 1e-5 and result["score_gap"] < 1e-5
    assert not result["kitm"] and not result["keras_hub"]

    # --export_presets: the towers as keras-hub presets (the adapters merged) give the SavedModel's embeddings.
    import tensorflow as tf
    import tensorflow_text  # noqa: F401 (the SavedModel's tokenizer ops)

    from kitm.data.synthetic_records import encode_png
    from kitm.ops.images import decode_image, eval_image
    from kitm.serving.hub_presets import load_tower_presets

    assert f"keras-hub presets: {run_dir / 'presets' / '1'}" in second.stdout
    model, tokenizer = load_tower_presets(run_dir / "presets" / "1")
    captions = tf.constant(["a red circle", "two small squares above a large triangle"])
    png = tf.constant([encode_png(np.full((40, 36, 3), 120, np.uint8))])
    size = summary["flags"]["image_size"]
    exported = tf.saved_model.load(summary["export"])
    np.testing.assert_allclose(model.encode_text(tokenizer(captions)).numpy(),
                               exported.encode_text(captions)["embeddings"].numpy(), atol=1e-5)
    pixels = tf.stack([eval_image(decode_image(png[0]), size, summary["flags"]["eval_crop_fraction"])])
    np.testing.assert_allclose(model.encode_image(pixels).numpy(), exported.encode_image(png)["embeddings"].numpy(),
                               atol=1e-5)

"""End to end: the launcher trains under MirroredStrategy on 2 logical CPUs, logs, evaluates and exports;
the SavedModel serves raw inputs in a process that never imports kitm; bad flags stop with clear messages; a run
whose embeddings collapse warns, logs and stops (--collapse_threshold, --stop_on_collapse); contradictory training
controls (fine-tuning without a pretrained backbone, a warm-up without the cosine schedule) are refused."""

import json

import numpy as np
import pytest


@pytest.fixture(scope="module")
def mirrored_run(tiny_synthetic, tmp_path_factory, launch, tiny_flags):
    run_dir = tmp_path_factory.mktemp("runs") / "mirrored"
    result = launch([*tiny_flags, f"--data_dir={tiny_synthetic}", f"--run_dir={run_dir}", "--epochs=2",
                      "--eval_every_epochs=1", "--strategy=mirrored", "--cpu_devices=2", "--fold_images=6"])
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return run_dir, result


@pytest.mark.slow
def test_mirrored_run_trains_evaluates_and_writes_everything(mirrored_run):
    run_dir, result = mirrored_run
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["replicas"] == 2
    assert summary["epochs_run"] == 2 and summary["steps_per_epoch"] == 96 // 16
    assert np.isfinite(summary["final_train_metrics"]["loss"])
    assert set(summary["test"]) >= {"i2t_R@1", "i2t_R@5", "i2t_R@10", "t2i_R@1", "t2i_R@5", "t2i_R@10",
                                    "i2t_NCS@1", "t2i_SR@10"}  # the synthetic world's truth gives NCS and SR
    # --fold_images=6: R@K on the 2 folds of the 12 test images (K <= 6 only), and mAP@R on the extended positives.
    # A 12-image test split: the launcher's own test table says what it cannot measure, as kitm.eval does.
    assert "kitm: warning: the set scored has 12 image(s) and 60 caption(s)" in result.stderr
    assert {"fold6_i2t_R@1", "fold6_t2i_R@5", "fold6_rsum", "i2t_mAP_at_R", "t2i_R_precision"} <= set(summary["test"])
    assert "fold6_i2t_R@10" not in summary["test"] and summary["flags"]["fold_images"] == 6
    with np.load(run_dir / summary["test_per_query"]) as per_query:
        assert summary["test_per_query"] == "summary.per_query.npz"
        for name in per_query.files:
            assert float(np.nanmean(per_query[name])) == summary["test"][name], name
        assert "fold6_i2t_R@1" in per_query.files and "i2t_medr" not in per_query.files
    assert summary["flags"]["strategy"] == "mirrored"
    assert "text->image" in result.stdout
    for name in ("vocabulary.txt", "checkpoints/last.weights.h5", "evaluations.jsonl", "export/1/saved_model.pb"):
        assert (run_dir / name).exists(), name
    lines = (run_dir / "evaluations.jsonl").read_text().splitlines()
    assert [json.loads(line)["epoch"] for line in lines] == [1, 2]


@pytest.mark.slow
def test_tensorboard_has_every_loss_term_learning_rate_and_recall(mirrored_run):
    import tensorflow as tf

    run_dir, _ = mirrored_run
    tags = {}
    for writer in ("train", "validation"):
        tags[writer] = set()
        for event_file in (run_dir / "logs" / writer).glob("events.out.tfevents.*"):
            for record in tf.data.TFRecordDataset(str(event_file)):
                event = tf.compat.v1.Event.FromString(record.numpy())
                tags[writer].update(value.tag for value in event.summary.value)
    assert {"epoch_loss", "epoch_triplet/i2t", "epoch_triplet/t2i", "epoch_learning_rate"} <= tags["train"]
    # Keras' TensorBoard callback writes the "val_" figures to the validation writer without the prefix.
    assert {"epoch_i2t_R@1", "epoch_t2i_R@10", "epoch_rsum", "epoch_i2t_NCS@1"} <= tags["validation"]
    assert any(tag.startswith("retrieval_top5/") for tag in tags["validation"])  # the top-5 image summaries


@pytest.mark.slow
def test_saved_model_serves_raw_inputs_without_kitm(mirrored_run, tmp_path, serve_in_fresh_python):
    import tensorflow as tf

    import kitm  # noqa: F401
    from kitm.ops.images import decode_image
    from kitm.layers import CaptionTokenizer, GRUTextEncoder, SmallConvEncoder
    from kitm.models import DualEncoder

    run_dir, _ = mirrored_run
    captions = ["a small red circle", "A blue square left of a green triangle.", "something unknown entirely"]
    image_paths = []
    from kitm.data import synthetic
    from kitm.data.synthetic_records import encode_png

    world = synthetic.generate_world(12, seed=3, image_size=32, world="shapes")
    for i in range(3):
        path = tmp_path / f"scene{i}.png"
        path.write_bytes(encode_png(world.images[i]))
        image_paths.append(str(path))
    out = tmp_path / "served.npz"
    result = serve_in_fresh_python(run_dir / "export" / "1", json.dumps(captions), json.dumps(image_paths), out,
                                   cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    served = np.load(out)
    assert "every caption must contain text" in json.loads(result.stdout.strip().splitlines()[-1])["empty"]

    # The same embeddings from the Keras model restored from the run's last checkpoint.
    tokenizer = CaptionTokenizer(str(run_dir / "vocabulary.txt"), 32)
    model = DualEncoder(SmallConvEncoder(), GRUTextEncoder(tokenizer.vocabulary_size, 16, 16), 32, name="dual_encoder")
    model({"image": tf.zeros([1, 32, 32, 3]), "tokens": tf.zeros([1, 32], tf.int32)})
    model.load_weights(str(run_dir / "checkpoints" / "last.weights.h5"))
    text = model.encode_text(tokenizer(tf.constant(captions))).numpy()
    image = model.encode_image(tf.stack([decode_image(open(p, "rb").read()) for p in image_paths])).numpy()
    np.testing.assert_allclose(served["text"], text, atol=1e-5)
    np.testing.assert_allclose(served["image"], image, atol=1e-5)
    np.testing.assert_allclose(served["scores"], image @ text.T, atol=1e-5)


def test_missing_dataset_names_the_files_and_the_build_command(tmp_path, launch):
    result = launch(["--flagfile=launch/coco.flags", f"--data_dir={tmp_path / 'coco'}", "--progress=false"])
    assert result.returncode == 2
    assert f"{tmp_path / 'coco' / 'dataset.json'}" in result.stderr
    assert "python -m kitm.data.build --dataset=karpathy" in result.stderr and "dataset_coco.json" in result.stderr


def test_unknown_flag_in_a_flagfile_is_named(tmp_path, launch):
    flagfile = tmp_path / "bad.flags"
    flagfile.write_text("--dataset=synthetic\n--learnin_rate=0.1\n")
    result = launch([f"--flagfile={flagfile}"])
    assert result.returncode != 0 and "learnin_rate" in result.stderr


def test_impossible_values_are_named(tiny_synthetic, tmp_path, launch_refused, tiny_flags):
    assert "--margin=-0.2: must be >= 0 (a hinge margin" in launch_refused(["--margin=-0.2"])
    stderr = launch_refused([*tiny_flags, f"--data_dir={tiny_synthetic}", f"--run_dir={tmp_path}", "--batch_size=512"])
    assert "--batch_size=512 is larger than the 96 training samples" in stderr


def test_corrupt_shard_stops_the_run_naming_the_shard(tiny_synthetic, tmp_path, launch, tiny_flags):
    import shutil

    data_dir = tmp_path / "synthetic"
    shutil.copytree(tiny_synthetic, data_dir)
    info = json.loads((data_dir / "dataset.json").read_text())
    shard = data_dir / info["splits"]["train"]["shards"][1]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, so only reading finds it
    shard.write_bytes(bytes(data))
    result = launch([*tiny_flags, f"--data_dir={data_dir}", f"--run_dir={tmp_path / 'run'}", "--epochs=1",
                      "--eval_every_epochs=0", "--export=false"])
    assert result.returncode == 2, result.stderr[-3000:]
    assert shard.name in result.stderr and "corrupt" in result.stderr


def test_launcher_refuses_contradictory_training_controls(tiny_synthetic, tmp_path, launch_refused):
    base = ["--dataset=synthetic", "--image_size=32", f"--data_dir={tiny_synthetic}", f"--run_dir={tmp_path}",
            "--batch_size=16", "--progress=false", "--epochs=2"]
    stderr = launch_refused([*base, "--finetune_after_epochs=1"])
    assert "--finetune_after_epochs needs a pretrained backbone" in stderr and "small_cnn" in stderr
    stderr = launch_refused([*base, "--warmup_epochs=1"])
    assert "the warm-up is part of the cosine schedule" in stderr and "--lr_schedule=cosine" in stderr


@pytest.mark.slow
def test_launcher_warns_logs_and_stops_on_collapse(tiny_synthetic, tmp_path, launch, tiny_flags):
    run_dir = tmp_path / "run"
    # Every run "collapses" under a threshold of 0.0001: the warning path is exercised deterministically.
    result = launch([*tiny_flags, f"--data_dir={tiny_synthetic}", f"--run_dir={run_dir}", "--epochs=3",
                      "--eval_every_epochs=0", "--export=false", "--collapse_threshold=0.0001", "--stop_on_collapse"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert "the embeddings collapsed in epoch 1" in result.stderr and "--hardest_warmup_epochs" in result.stderr
    assert "this run's embeddings collapsed" in result.stderr  # repeated at the end, where it is seen
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["collapse"]["collapsed_epoch"] == 1 and summary["collapse"]["stopped"]
    assert summary["epochs_run"] == 1
    assert 0 < summary["final_train_metrics"]["collapse/image_cosine"] <= 1
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "logs" / "train"), size_guidance={"tensors": 0})
    events.Reload()
    assert {"epoch_collapse/image_cosine", "epoch_collapse/text_cosine"} <= set(events.Tags()["tensors"])

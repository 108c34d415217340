"""The launcher on Keras' JAX backend (issue 33, item 2): `KERAS_BACKEND=jax python -m kitm.launch` trains the tiny
model from the tf.data pipeline, evaluates it and exports a SavedModel whose signatures on raw captions and image
bytes give the embeddings of the same weights loaded into the TensorFlow model (the model's arithmetic crosses to
TensorFlow through jax2tf; tokenizing and decoding stay TensorFlow ops)."""

import importlib.util
import json

import numpy as np
import pytest

pytest.importorskip("jax")


# One device's run on JAX, read by two tests: the export's (below) and the two-device comparison's (its baseline).
# The triplet and the ladder together: a loss that gathers on TensorFlow and one that cannot, both over the global
# array on JAX.
# A third of the training images (32: 2 steps an epoch, 4 in all): the device and process comparisons below hold to
# 1e-5 for a few steps; over more steps float32's rounding in another order grows (see the two-device test).
ONE_DEVICE = ["--epochs=2", "--eval_every_epochs=2", "--projector_samples=8", "--loss=triplet,ladder",
              "--train_fraction=0.34"]
STEPS = 4
# The one-device run also writes its ONNX towers where jax2onnx is installed (kitm.serving.onnx).
ONNX = ["--export_onnx"] if importlib.util.find_spec("jax2onnx") else []


@pytest.fixture(scope="module")
def one_device_run(tiny_synthetic, tiny_flags, subprocess_env, repo_root, tmp_path_factory):
    import subprocess
    import sys

    run_dir = tmp_path_factory.mktemp("jax_one_device") / "run"
    done = subprocess.run([sys.executable, "-m", "kitm.launch", *tiny_flags, f"--data_dir={tiny_synthetic}",
                           f"--run_dir={run_dir}", *ONE_DEVICE, *ONNX],
                          env=subprocess_env(KERAS_BACKEND="jax"), cwd=repo_root, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    return run_dir


@pytest.mark.slow
def test_the_launcher_trains_evaluates_and_exports_on_jax(one_device_run):
    import tensorflow as tf

    from kitm.data import synthetic
    from kitm.data.synthetic_records import encode_png
    from kitm.layers import CaptionTokenizer, GRUTextEncoder, SmallConvEncoder
    from kitm.models import DualEncoder
    from kitm.ops.images import decode_image, eval_image

    run_dir = one_device_run
    summary = json.loads((run_dir / "summary.json").read_text())
    assert len(summary["history"]["loss"]) == 2 and summary["history"]["loss"][1] < summary["history"]["loss"][0]
    assert summary["test"]["t2i_R@10"] > 0 and (run_dir / "export" / "1" / "saved_model.pb").is_file()
    # The demo's callbacks on JAX too: the validation retrieval every 2 epochs and the embedding projector.
    assert "val/i2t_R@1" in summary["history"] or any(key.startswith("val") for key in summary["history"])
    assert list(run_dir.rglob("projector_config.pbtxt"))

    served = tf.saved_model.load(str(run_dir / "export" / "1"))
    captions = ["a small red circle", "A blue square left of a green triangle.", "zzz unknown words"]
    world = synthetic.generate_world(4, seed=3, image_size=32, world="shapes")
    images = [encode_png(world.images[i]) for i in range(2)]
    served_text = served.signatures["encode_text"](captions=tf.constant(captions))["embeddings"].numpy()
    served_image = served.signatures["encode_image"](images=tf.constant(images))["embeddings"].numpy()
    scores = served.signatures["score"](captions=tf.constant(captions), images=tf.constant(images))["scores"]

    # The same weights (a .weights.h5 file is the same on every backend) in the TensorFlow model.
    tokenizer = CaptionTokenizer(str(run_dir / "vocabulary.txt"), 32)
    model = DualEncoder(SmallConvEncoder(), GRUTextEncoder(tokenizer.vocabulary_size, 16, 16), 32, name="dual_encoder")
    model({"image": tf.zeros([1, 32, 32, 3]), "tokens": tf.zeros([1, 32], tf.int32)})
    model.load_weights(str(run_dir / "checkpoints" / "last.weights.h5"))
    text = model.encode_text(tokenizer(tf.constant(captions))).numpy()
    image = model.encode_image(tf.stack([eval_image(decode_image(png), 32, 1.0) for png in images])).numpy()
    np.testing.assert_allclose(served_text, text, atol=1e-5)
    np.testing.assert_allclose(served_image, image, atol=1e-5)
    np.testing.assert_allclose(scores.numpy(), image @ text.T, atol=1e-5)
    empty = served.signatures["encode_text"](captions=tf.constant([], tf.string))["embeddings"]
    assert empty.shape == (0, 32)


@pytest.mark.slow
def test_the_onnx_towers_of_a_jax_run_embed_as_its_saved_model(one_device_run, onnx_towers_against_saved_model):
    """`--export_onnx` on JAX (jax2onnx; issue 47, item 3): the towers under onnxruntime give the SavedModel's
    embeddings (its arithmetic through jax2tf) to 1e-5."""
    pytest.importorskip("jax2onnx")
    from kitm.data import synthetic
    from kitm.data.synthetic_records import encode_png

    world = synthetic.generate_world(4, seed=5, image_size=32, world="shapes")
    text, image = onnx_towers_against_saved_model(one_device_run, ["a small red circle", "zzz unknown", "a"],
                                                  [encode_png(world.images[i]) for i in range(3)])
    assert text < 1e-5 and image < 1e-5, (text, image)


@pytest.mark.slow
def test_the_semantic_centres_procedure_runs_its_three_phases_on_jax(tmp_path, subprocess_env, repo_root):
    """launch/centers.flags on JAX: the three phases (unquantized centres, the quantizer alone from k-means, end to
    end with adaptive margins), the losses' own optimizers and state, each phase's state saved."""
    import subprocess
    import sys

    from kitm.data.synthetic_records import build_synthetic

    world = tmp_path / "synthetic"
    build_synthetic(world, num_scenes=60, seed=3, image_size=32, num_shards=2, progress=False, relevance=("cider",), world="shapes")
    run_dir = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "kitm.launch", f"--flagfile={repo_root / 'launch' / 'centers.flags'}",
                           "--dataset=synthetic", "--image_size=32", "--embedding_dim=32", "--word_dim=16",
                           "--text_units=16", "--batch_size=16", "--eval_every_epochs=0", "--export=false",
                           "--progress=false", "--captions_per_step=sample", f"--data_dir={world}",
                           f"--run_dir={run_dir}", "--center_phase_epochs=1,2,1", "--num_quantized_centers=8",
                           "--margin_update_every=1"],
                          env=subprocess_env(KERAS_BACKEND="jax"), cwd=repo_root, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    phases = json.loads((run_dir / "summary.json").read_text())["center_phases"]
    assert [phase["finished"] for phase in phases["phases"]] == [True, True, True]
    assert phases["quantizer_init"]["method"] == "kmeans" and phases["quantizer_init"]["clusters"] == 8
    first, second, third = (phase["final_metrics"] for phase in phases["phases"])
    assert np.isfinite(first["centers/image"]) and np.isfinite(second["quantized/image"])
    assert "triplet/margin_x" in third and np.isfinite(third["loss"])
    assert list((run_dir / "loss_state").glob("state-*"))


@pytest.mark.slow
def test_a_run_killed_on_jax_resumes_with_the_planned_steps(tiny_synthetic, tiny_flags, subprocess_env, repo_root,
                                                           tmp_path):
    """SIGKILL after the first mid-epoch backup, then the same command: the run resumes there and ends with the
    planned 18 steps (tests/end_to_end/test_resume.py on TensorFlow), the hardest-negative warm-up's count included
    (--hardest_warmup_epochs: the losses' step count on JAX is set from the restored optimizer's)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    run_dir = tmp_path / "run"
    command = [sys.executable, "-m", "kitm.launch", *tiny_flags, f"--data_dir={tiny_synthetic}", f"--run_dir={run_dir}",
               "--epochs=3", "--eval_every_epochs=0", "--backup_every_steps=5", "--export=false",
               "--max_violation=true", "--hardest_warmup_epochs=1"]
    env = subprocess_env(KERAS_BACKEND="jax")
    metadata = run_dir / "backup" / "training_metadata.json"
    process = subprocess.Popen(command, cwd=repo_root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
    try:
        deadline = time.time() + 600
        while not metadata.exists() and process.poll() is None and time.time() < deadline:
            time.sleep(0.02)
        assert metadata.exists(), "no backup appeared: " + (process.stdout.read() if process.poll() is not None else "")
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    killed_at = json.loads(metadata.read_text())["step"]
    assert killed_at in (5, 10, 15)
    result = subprocess.run(command, cwd=repo_root, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-4000:]
    assert f"Resumed from the backup at step {killed_at} of 18." in result.stdout
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["resumed_from_step"] == killed_at and summary["optimizer_steps"] == 18
    assert np.isfinite(summary["history"]["loss"]).all()


@pytest.fixture(scope="module")
def two_device_run(tiny_synthetic, tiny_flags, subprocess_env, repo_root, tmp_path_factory):
    """`one_device_run`'s flags on 2 host devices of one process (--strategy=mirrored --cpu_devices=2): the launcher's
    stdout and the run directory."""
    import subprocess
    import sys

    run_dir = tmp_path_factory.mktemp("jax_two_devices") / "run"
    done = subprocess.run([sys.executable, "-m", "kitm.launch", *tiny_flags, f"--data_dir={tiny_synthetic}",
                           f"--run_dir={run_dir}", *ONE_DEVICE, "--export=false", "--strategy=mirrored",
                           "--cpu_devices=2"],
                          cwd=repo_root, env=subprocess_env(KERAS_BACKEND="jax"), capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return done.stdout, run_dir


def checkpoint_weights(run_dir) -> dict:
    """Every array of the run's last checkpoint (the model's weights and the optimizer's state) by its h5 path."""
    import h5py

    found = {}
    with h5py.File(run_dir / "checkpoints" / "last.weights.h5", "r") as file:
        file.visititems(lambda name, item: found.__setitem__(name, item[()]) if isinstance(item, h5py.Dataset)
                        else None)
    return found


def assert_trained_alike(run, reference, rtol):
    """The same steps, and the same total and objectives' parts epoch by epoch (ladder/level_k: each rung's loss)."""
    assert run["optimizer_steps"] == reference["optimizer_steps"] == STEPS
    for key in ("loss", "triplet/i2t", "triplet/t2i", "ladder/level_1", "ladder/level_2"):
        np.testing.assert_allclose(run["history"][key], reference["history"][key], rtol=rtol, err_msg=key)


def assert_same_weights(run_dir, reference_dir, atol):
    """The same weights and optimizer state in the two runs' last checkpoints."""
    weights, reference = checkpoint_weights(run_dir), checkpoint_weights(reference_dir)
    assert weights.keys() == reference.keys() and len(reference) > 10
    for name, value in reference.items():
        np.testing.assert_allclose(weights[name], value, atol=atol, err_msg=name)


@pytest.mark.slow
def test_the_launcher_on_two_jax_devices_trains_as_one_device_with_the_whole_batch(one_device_run, two_device_run):
    """--strategy=mirrored on JAX is keras.distribution.DataParallel (kitm.distribute.data_parallel): on 2 host
    devices (--cpu_devices=2) the batch's rows are split over them while each loss runs over the global batch, so
    after a few steps the run's losses and weights are those of one device with the whole batch (`one_device_run`):
    the triplet (global negatives) and the ladder (a loss that cannot gather on TensorFlow, here computed over the
    global array).

    Only to rounding, and for a few steps: the devices' sums (BatchNorm's batch moments, the gradients) add in
    another order in float32, about 1e-5 of a gradient's scale a step, and Adam divides each coordinate by its own
    running scale, so a coordinate whose gradient is that small moves by a rounding-sized fraction of the learning
    rate. Measured on the project's machine (AMD EPYC, AVX-512): 12 steps on these 32 images keep the weights within
    2.4e-6; 12 steps on all 96 training images drift to 2.8e-3 (on the previous machine, within 1e-5)."""
    stdout, run_dir = two_device_run
    one = json.loads((one_device_run / "summary.json").read_text())
    two = json.loads((run_dir / "summary.json").read_text())
    assert "2 replica(s); global batch 16" in stdout
    assert (one["replicas"], two["replicas"]) == (1, 2)
    assert two["flags"]["negatives"] == "global" and one["flags"]["negatives"] == "local"
    assert_trained_alike(two, one, rtol=1e-5)
    assert_same_weights(run_dir, one_device_run, atol=1e-5)
    for key in ("i2t_R@10", "t2i_R@10", "i2t_NCS@10"):
        np.testing.assert_allclose(two["test"][key], one["test"][key], atol=2.0, err_msg=key)


@pytest.mark.slow
def test_two_jax_processes_train_as_one_process_with_the_whole_batch(one_device_run, two_device_run, tiny_synthetic,
                                                                      tiny_flags, jax_processes, tmp_path):
    """--strategy=multi_worker on JAX (kitm.distribute.processes; issue 46, item 2): two processes on this machine,
    gloo between them, each feeding its half of every global batch (with its rows of the batch's [B, B] relevance),
    train the model of one process with the whole batch: after a few steps the same losses, each objective's parts,
    weights and optimizer state as one device (`one_device_run`, 1e-5: the rounding of the two-device test), and the
    very same as one process on two devices (`two_device_run`: the same sums in the same order, 1e-7; the process
    boundary changes nothing). The chief validates, tests and exports on a local copy of the model and writes the run
    directory, the other process writes nothing there."""
    run_dir = tmp_path / "run"
    codes, (chief, other) = jax_processes.run(
        [*tiny_flags, f"--data_dir={tiny_synthetic}", f"--run_dir={run_dir}", *ONE_DEVICE], tmp_path)
    assert codes == [0, 0], chief[-3000:] + other[-3000:]
    one = json.loads((one_device_run / "summary.json").read_text())
    two_devices = json.loads((two_device_run[1] / "summary.json").read_text())
    two = json.loads((run_dir / "summary.json").read_text())
    assert two["workers"] == {"count": 2, "chief": True} and two["replicas"] == 2
    # Each process decoded only its own rows' images (kitm.data.own_rows): 8 of each global batch's 16.
    assert two["input"]["images_decoded_per_batch"] == 8.0 and two["input"]["batches"] >= STEPS
    assert_trained_alike(two, one, rtol=1e-5)
    assert_same_weights(run_dir, one_device_run, atol=1e-5)
    assert_trained_alike(two, two_devices, rtol=1e-7)
    assert_same_weights(run_dir, two_device_run[1], atol=1e-7)
    assert any(key.startswith("val") for key in two["history"])  # validated on the chief's local copy
    assert (run_dir / "export" / "1" / "saved_model.pb").is_file() and list(run_dir.rglob("projector_config.pbtxt"))
    # The other process wrote into a temporary directory of its own, removed at its end.
    assert f"removed at its end; the chief writes {run_dir}." in other and "Run summary" not in other


REFUSED_ON_JAX = [
    (["--strategy=mirrored", "--cpu_devices=2", "--negatives=local"],
     "--negatives=local: on the jax backend the 2 devices split one loss computation over the global batch"),
    (["--strategy=mirrored", "--cpu_devices=2", "--batch_size=15"],
     "--batch_size=15 must be divisible by the 2 devices keras.distribution.DataParallel splits it over"),
    (["--strategy=multi_worker"], "--strategy=multi_worker on JAX needs the processes: "
                                  "--coordinator_address=host:port (process 0's), --num_processes and --process_id"),
    (["--strategy=multi_worker", "--coordinator_address=127.0.0.1:1"],
     "--coordinator_address, --num_processes and --process_id describe the processes together; give all three"),
]

def test_what_the_launcher_cannot_distribute_on_jax_is_one_line_naming_the_flag(tiny_synthetic, tiny_flags,
                                                                                launch_refused_on, tmp_path):
    argument_lists = [[*tiny_flags, f"--data_dir={tiny_synthetic}", f"--run_dir={tmp_path / f'run{i}'}",
                       "--epochs=1", "--export=false", *flags] for i, (flags, _) in enumerate(REFUSED_ON_JAX)]
    for i, ((flags, message), outcome) in enumerate(zip(REFUSED_ON_JAX, launch_refused_on("jax", argument_lists))):
        assert outcome["code"] == 2, (flags, outcome)
        assert f"kitm.launch: error: {message}" in outcome["stderr"], (flags, outcome)
        assert "Traceback" not in outcome["stderr"]
        assert not (tmp_path / f"run{i}" / "summary.json").exists()


def test_a_run_in_a_python_process_leaves_its_keras_distribution_as_it_found_it(subprocess_env, repo_root, tmp_path):
    """kitm.experiment.run with strategy="mirrored" sets DataParallel for the run and restores the process's
    distribution afterwards, also when the run stops on an error (here: no dataset at data_dir)."""
    import subprocess
    import sys

    script = f"""
import keras
from kitm.errors import KitmError
from kitm.experiment import experiment_config, run
config = experiment_config("coco", strategy="mirrored", cpu_devices=2, data_dir={str(tmp_path / 'none')!r},
                           run_dir={str(tmp_path / 'run')!r})
try:
    run(config)
except KitmError as error:
    print("refused:", type(error).__name__)
print("devices:", len(keras.distribution.list_devices()), "distribution:", keras.distribution.distribution())
"""
    done = subprocess.run([sys.executable, "-c", script], env=subprocess_env(KERAS_BACKEND="jax"), cwd=repo_root,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "refused:" in done.stdout
    assert "devices: 2 distribution: None" in done.stdout, done.stdout

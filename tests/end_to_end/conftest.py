"""Settings of the end-to-end runs: the production run shared by test_export.py and test_monitoring.py, the
serving client that loads an export in a process without kitm, and the ONNX towers' check against the SavedModel."""

import os
import pathlib
import subprocess
import sys

import pytest

SERVING_SCRIPT = pathlib.Path(__file__).resolve().with_name("serving_script.py")

# The tiny model (tests/conftest.py TINY_FLAGS) with the production controls switched on: a warm-up + cosine
# schedule, test-time crops (0.875 crops of the 32 px scenes, so the crops differ), a 6-image projector.
PRODUCTION_FLAGS = ["--dataset=synthetic", "--image_size=32", "--flip=false", "--embedding_dim=32", "--word_dim=16",
                    "--text_units=16", "--batch_size=16", "--learning_rate=1e-3", "--relevance=truth",
                    "--progress=false", "--epochs=2", "--eval_every_epochs=1", "--eval_crop_fraction=0.875",
                    "--lr_schedule=cosine", "--warmup_steps=3", "--test_crops=2", "--projector_samples=6",
                    "--captions_per_step=sample", "--export_onnx"]


@pytest.fixture(scope="session")
def production_run(tiny_synthetic, tmp_path_factory, launch):
    """(run_dir, CompletedProcess) of one tiny launcher run with the production controls, shared by
    test_export.py and test_monitoring.py: session-scoped, so the ~40 s run happens once per process, and
    tests/conftest.py (SHARED_RUN_GROUPS) sends both modules to the same xdist worker."""
    run_dir = tmp_path_factory.mktemp("production") / "run"
    result = launch([*PRODUCTION_FLAGS, f"--data_dir={tiny_synthetic}", f"--run_dir={run_dir}"])
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return run_dir, result


@pytest.fixture(scope="session")
def serve_in_fresh_python():
    """`serve_in_fresh_python(export_dir, captions_json, image_paths_json, out, *, cwd, timeout=300)`: run
    serving_script.py in a new interpreter (a CompletedProcess)."""
    def serve(export_dir, captions_json, image_paths_json, out, *, cwd, timeout=300):
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        return subprocess.run([sys.executable, str(SERVING_SCRIPT), *map(str, (export_dir, captions_json,
                                                                                  image_paths_json, out))],
                              capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)
    return serve


class JaxProcesses:
    """Launcher runs as several JAX processes on this machine (`--strategy=multi_worker`, kitm.distribute.processes),
    each one's output in `log_dir/process<i>.txt` (a pipe nobody reads could fill and block it)."""

    def __init__(self, env: dict, cwd: pathlib.Path):
        self.env, self.cwd = env, cwd

    @staticmethod
    def commands(arguments: list, processes: int = 2) -> list:
        """The launcher's command of each process, joining at a free local port."""
        import socket

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            address = f"127.0.0.1:{probe.getsockname()[1]}"
        return [[sys.executable, "-m", "kitm.launch", *arguments, "--strategy=multi_worker",
                 f"--coordinator_address={address}", f"--num_processes={processes}", f"--process_id={index}"]
                for index in range(processes)]

    def start(self, commands: list, log_dir: pathlib.Path) -> list:
        started = []
        for index, command in enumerate(commands):
            log = open(log_dir / f"process{index}.txt", "w")
            started.append((subprocess.Popen(command, cwd=self.cwd, env=self.env, stdout=log,
                                             stderr=subprocess.STDOUT), log))
        return started

    @staticmethod
    def finish(started: list, timeout: float) -> list:
        """The processes' exit codes (any still running after `timeout` killed)."""
        codes = []
        try:
            for process, _ in started:
                codes.append(process.wait(timeout=timeout))
        finally:
            for process, log in started:
                if process.poll() is None:
                    process.kill()
                log.close()
        return codes

    def run(self, arguments: list, log_dir: pathlib.Path, timeout: float = 900) -> tuple[list, list]:
        """(exit codes, outputs) of the processes run to their end."""
        codes = self.finish(self.start(self.commands(arguments), log_dir), timeout)
        return codes, [(log_dir / f"process{index}.txt").read_text() for index in range(len(codes))]


@pytest.fixture
def jax_processes(subprocess_env, repo_root) -> JaxProcesses:
    return JaxProcesses(subprocess_env(KERAS_BACKEND="jax"), repo_root)


@pytest.fixture(scope="session")
def onnx_towers_against_saved_model():
    """`compare(run_dir, captions, pngs) -> (text difference, image difference)`: the largest absolute differences
    between the embeddings of the run's ONNX towers (onnx/1, under onnxruntime on the CPU) and its SavedModel's
    (export/1) for the same captions and images, the towers' inputs made as the folder's preprocessing.json says."""
    def compare(run_dir, captions, pngs):
        import json

        import numpy as np
        import onnxruntime
        import tensorflow as tf
        import tensorflow_text  # noqa: F401 (registers the tokenizer's ops)

        from kitm.layers import CaptionTokenizer
        from kitm.ops.images import decode_pixels, eval_image

        folder = pathlib.Path(run_dir) / "onnx" / "1"
        described = json.loads((folder / "preprocessing.json").read_text())
        tokenizer = CaptionTokenizer(str(folder / "vocabulary.txt"), described["max_length"])
        token_ids = tokenizer(tf.constant(captions)).numpy()
        pixels = np.stack([eval_image(decode_pixels(png), described["image_size"],
                                      described["eval_crop_fraction"]).numpy() for png in pngs])

        def run(tower, name, values):
            session = onnxruntime.InferenceSession(str(folder / described[tower]["file"]),
                                                   providers=["CPUExecutionProvider"])
            return session.run(["embeddings"], {name: values})[0]

        served = tf.saved_model.load(str(pathlib.Path(run_dir) / "export" / "1"))
        text = served.signatures["encode_text"](captions=tf.constant(captions))["embeddings"].numpy()
        image = served.signatures["encode_image"](images=tf.constant(pngs))["embeddings"].numpy()
        return (float(np.abs(run("text_tower", "token_ids", token_ids) - text).max()),
                float(np.abs(run("image_tower", "pixels", pixels) - image).max()))
    return compare

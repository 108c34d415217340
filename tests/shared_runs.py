"""One tiny launcher run shared by tests/test_export.py and tests/test_monitoring.py (a module-scoped fixture
is per module; this cache makes the ~40 s run happen once per session). tests/ is on sys.path under pytest.
The cache is per process: under pytest-xdist, tests/conftest.py sends both modules to the same worker
(USERS below), so the run still happens once."""

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]

# test_launch.py's tiny model, with the production controls switched on: a warm-up + cosine schedule,
# test-time crops (0.875 crops of the 32 px scenes, so the crops differ), a 6-image projector.
PRODUCTION_FLAGS = ["--dataset=synthetic", "--image_size=32", "--flip=false", "--embedding_dim=32", "--word_dim=16",
                    "--text_units=16", "--batch_size=16", "--learning_rate=1e-3", "--relevance=truth",
                    "--progress=false", "--epochs=2", "--eval_every_epochs=1", "--eval_crop_fraction=0.875",
                    "--lr_schedule=cosine", "--warmup_steps=3", "--test_crops=2", "--projector_samples=6",
                    "--captions_per_step=sample"]

# The test modules that call production_run: one xdist work unit (tests/conftest.py).
USERS = ("test_export.py", "test_monitoring.py")

_RUNS: dict = {}


def launch(args, cwd=ROOT, timeout=600):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "kitm.launch", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def production_run(tiny_synthetic, tmp_path_factory):
    """(run_dir, CompletedProcess) of the shared run, made on first use."""
    key = str(tiny_synthetic)
    if key not in _RUNS:
        run_dir = tmp_path_factory.mktemp("production") / "run"
        result = launch([*PRODUCTION_FLAGS, f"--data_dir={tiny_synthetic}", f"--run_dir={run_dir}"])
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
        _RUNS[key] = (run_dir, result)
    return _RUNS[key]

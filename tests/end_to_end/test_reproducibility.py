"""End to end: two launcher runs with the same --seed log the same epoch losses (the data order, the augmentation
and the initialisation follow the seed)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest


@pytest.fixture(scope="module")
def flip_flags(tiny_flags):
    """The launcher's tiny run with flips on (they draw random numbers too)."""
    return [flag if flag != "--flip=false" else "--flip=true" for flag in tiny_flags]


def _run(flags, root, tiny_synthetic, run_dir, seed):
    return subprocess.Popen(
        [sys.executable, "-m", "kitm.launch", *flags, f"--data_dir={tiny_synthetic}", f"--run_dir={run_dir}",
         "--epochs=1", "--eval_every_epochs=0", "--export=false", f"--seed={seed}"],
        cwd=root, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)


@pytest.mark.slow
def test_two_runs_with_the_same_seed_give_the_same_losses(tiny_synthetic, tmp_path, flip_flags, repo_root):
    runs = {name: _run(flip_flags, repo_root, tiny_synthetic, tmp_path / name, seed) for name, seed in (("a", 3), ("b", 3))}
    histories = {}
    for name, process in runs.items():
        out, err = process.communicate(timeout=600)
        assert process.returncode == 0, out[-2000:] + err[-4000:]
        histories[name] = json.loads((tmp_path / name / "summary.json").read_text())["history"]
    assert set(histories["a"]) >= {"loss", "triplet/i2t", "triplet/t2i"}
    for key, values in histories["a"].items():
        np.testing.assert_allclose(histories["b"][key], values, rtol=0, atol=1e-6, err_msg=key)


TWO_RUNS_IN_ONE_PROCESS = """
import json
import sys

from kitm.experiment import experiment_config, run

data_dir, run_root = sys.argv[1], sys.argv[2]
for name in ("first", "second"):
    config = experiment_config("synthetic", data_dir=data_dir, run_dir=f"{run_root}/{name}", epochs=1, batch_size=16,
                               image_size=32, flip=True, eval_every_epochs=0, export=False, projector_samples=0,
                               progress=False, seed=3)
    print(json.dumps(run(config)["history"]))
"""


@pytest.mark.slow
def test_two_python_runs_in_one_process_give_the_same_losses(tiny_synthetic, tmp_path, repo_root, run_python):
    """The first run of a process imports the input pipeline's dependencies, the second does not; both start from
    the same weights (kitm.training.reproducibility)."""
    result = run_python(TWO_RUNS_IN_ONE_PROCESS, tiny_synthetic, tmp_path, cwd=repo_root, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    first, second = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert set(first) >= {"loss", "triplet/i2t", "triplet/t2i"}
    assert first == second

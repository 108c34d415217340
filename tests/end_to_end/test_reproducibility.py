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

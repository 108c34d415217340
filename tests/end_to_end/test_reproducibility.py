"""End to end: runs with the same --seed log the same epoch losses (the data order, the augmentation and the
initialisation follow the seed): a launcher run, and two runs one after the other in one Python process (the first
run of a process imports the input pipeline's dependencies, the second does not; both start from the same weights,
kitm.training.reproducibility), all with the same settings."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

# The launcher's tiny run with flips on (they draw random numbers too), one epoch, seed 3; as flags and as settings.
SETTINGS = {"dataset": "synthetic", "image_size": 32, "flip": True, "eval_crop_fraction": 1.0, "embedding_dim": 32,
            "word_dim": 16, "text_units": 16, "batch_size": 16, "learning_rate": 1e-3, "relevance": "truth",
            "captions_per_step": "sample", "progress": False, "epochs": 1, "eval_every_epochs": 0,
            "export": False, "seed": 3}

TWO_RUNS_IN_ONE_PROCESS = """
import json
import sys

from kitm.experiment import experiment_config, run

data_dir, run_root, settings = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
for name in ("first", "second"):
    config = experiment_config(settings.pop("dataset", "synthetic"), data_dir=data_dir, run_dir=f"{run_root}/{name}",
                               **settings)
    print(json.dumps(run(config)["history"]))
"""


def _flag(name, value):
    return f"--{name}={str(value).lower() if isinstance(value, bool) else value}"


@pytest.mark.slow
def test_runs_with_the_same_seed_give_the_same_losses_in_one_process_and_in_two(tiny_synthetic, tmp_path,
                                                                                 repo_root, kitm_popen):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    launcher = kitm_popen(["-m", "kitm.launch", *(_flag(name, value) for name, value in SETTINGS.items()),
                           f"--data_dir={tiny_synthetic}", f"--run_dir={tmp_path / 'launcher'}"],
                          cwd=repo_root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # The two runs in one process: a fresh interpreter, where the first run imports what the input pipeline needs.
    python = subprocess.run([sys.executable, "-c", TWO_RUNS_IN_ONE_PROCESS, str(tiny_synthetic), str(tmp_path),
                             json.dumps(SETTINGS)], cwd=repo_root, env=env, capture_output=True, text=True,
                            timeout=600)
    out, err = launcher.communicate(timeout=600)
    assert launcher.returncode == 0, out[-2000:] + err[-4000:]
    assert python.returncode == 0, python.stdout[-2000:] + python.stderr[-4000:]
    first, second = [json.loads(line) for line in python.stdout.splitlines() if line.startswith("{")]
    launched = json.loads((tmp_path / "launcher" / "summary.json").read_text())["history"]
    assert set(first) >= {"loss", "triplet/i2t", "triplet/t2i"}
    assert first == second
    for key, values in first.items():
        np.testing.assert_allclose(launched[key], values, rtol=0, atol=1e-6, err_msg=key)

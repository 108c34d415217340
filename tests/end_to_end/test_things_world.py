"""The things world through the launcher: the demo's configuration (the shipped tower frozen, its truth in every
batch, evaluation on the world's truth, the export) on a tiny things world, and the launcher refusing to train on
a world of the other kind left at the default folder."""

from __future__ import annotations

import json
import pathlib
import shutil

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_demo_configuration_trains_on_the_things_world(tiny_things, tmp_path, launch):
    run_dir = tmp_path / "demo"
    done = launch([f"--flagfile={ROOT / 'launch' / 'demo.flags'}", f"--data_dir={tiny_things}",
                   f"--run_dir={run_dir}", "--epochs=2", "--batch_size=16", "--eval_every_epochs=1",
                   "--projector_samples=0", "--progress=false"])
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    flags = summary["flags"]
    assert flags["weights"] == "things" and flags["freeze_image_tower"] and flags["synthetic_world"] == "things"
    test = summary["test"]
    assert 0 < test["t2i_NCS@1"] <= 100 and 0 <= test["i2t_R@1"] <= 100  # scored on the world's truth
    assert summary["export"] and (run_dir / "export" / "1" / "saved_model.pb").is_file()
    # the frozen tower kept the shipped weights (the checkpoint's first conv and the head against the tower file)
    import h5py

    with h5py.File(run_dir / "checkpoints" / "last.weights.h5", "r") as stored, \
            np.load(ROOT / "kitm" / "layers" / "pretrained" / "things_small_cnn_48.npz") as shipped:
        np.testing.assert_array_equal(stored["image_encoder/blocks/conv2d/vars/0"][()], shipped["weight_000"])
        np.testing.assert_array_equal(stored["image_encoder/head/vars/0"][()], shipped["weight_040"])


def test_a_world_of_the_other_kind_at_the_default_folder_is_refused(tiny_synthetic, tmp_path, monkeypatch):
    """tfrecords/synthetic built by an earlier kitm holds the shapes world: the launcher says so instead of training
    on it as if it were the things world."""
    from kitm.errors import KitmConfigError
    from kitm.experiment import experiment_config
    from kitm.experiment.datasets import ensure_dataset

    monkeypatch.chdir(tmp_path)
    shutil.copytree(tiny_synthetic, tmp_path / "tfrecords" / "synthetic")
    with pytest.raises(KitmConfigError) as refused:
        ensure_dataset(experiment_config("synthetic"))
    message = str(refused.value)
    assert "holds the shapes world" in message and "synthetic_world=things" in message
    assert ensure_dataset(experiment_config("synthetic", synthetic_world="shapes",
                                            data_dir="tfrecords/synthetic")).truth_world == "shapes"

"""Each paper's flagfile trains on the synthetic world through the launcher (a --dataset override), with its own
relevance source from the records: SAM on CIDEr-D, the adaptive ladder on SBERT, the neighbourhood loss on
neighbour-aware batches (its coverage logged)."""

import json
import pathlib

import numpy as np
import pytest

from test_launch import ROOT, _launch

SMALL = ["--dataset=synthetic", "--image_size=32", "--embedding_dim=32", "--word_dim=16", "--text_units=16",
         "--batch_size=16", "--epochs=1", "--eval_every_epochs=0", "--export=false", "--progress=false",
         "--captions_per_step=sample"]


@pytest.fixture(scope="module")
def rich_world(tmp_path_factory):
    from kitm.data.synthetic_records import build_synthetic

    root = tmp_path_factory.mktemp("papers") / "synthetic"
    build_synthetic(root, num_scenes=60, seed=3, image_size=32, num_shards=2, progress=False,
                    relevance=("cider", "sbert", "neighbors"), neighbors_k=20)
    return root


@pytest.mark.slow
@pytest.mark.parametrize("flagfile, extra, loss_terms", [
    ("sam.flags", [], ["sam/sam_i2t", "sam/triplet_i2t"]),
    ("ladder_adaptive.flags", [], ["ladder/level_1", "ladder/level_2"]),
    ("ladder.flags", ["--ladder_recluster_every=2"], ["ladder/level_2", "ladder/theta_1", "ladder/clusters"]),
    ("neighborhoods.flags", [], ["neighborhood/text_neighbors", "neighbor_coverage"]),
])
def test_paper_flagfile_runs_on_the_synthetic_world(rich_world, tmp_path, flagfile, extra, loss_terms):
    run_dir = tmp_path / "run"
    result = _launch([f"--flagfile={ROOT / 'launch' / flagfile}", *SMALL, f"--data_dir={rich_world}",
                      f"--run_dir={run_dir}", *extra])
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    assert "Defaults for --dataset=synthetic" in result.stdout
    summary = json.loads((run_dir / "summary.json").read_text())
    metrics = summary["final_train_metrics"]
    assert np.isfinite(metrics["loss"])
    for term in loss_terms:
        assert any(key.startswith(term) for key in metrics), (term, sorted(metrics))
    if "neighbor_coverage" in loss_terms:
        assert metrics["neighbor_coverage"] >= 0.9

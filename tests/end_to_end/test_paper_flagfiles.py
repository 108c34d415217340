"""The paper flagfiles train on the synthetic world through the launcher (a --dataset override), with their own
relevance sources from the records: SAM on CIDEr-D, the ladders on SBERT, the neighbourhood loss on
neighbour-aware batches (its coverage logged). Two runs cover every loss by composing them (--loss=a,b); every
flagfile's objective is built from its flags in tests/test_launch.py."""

import json

import numpy as np
import pytest


SMALL = ["--dataset=synthetic", "--image_size=32", "--embedding_dim=32", "--word_dim=16", "--text_units=16",
         "--batch_size=16", "--epochs=1", "--eval_every_epochs=0", "--export=false", "--progress=false",
         "--captions_per_step=sample"]


def _world_with_every_row(tmp_path_factory, name: str, num_scenes: int, seed: int):
    """A 32 px synthetic world with CIDEr-D, sentence-embedding and 20-neighbour rows."""
    from kitm.data.synthetic_records import build_synthetic

    root = tmp_path_factory.mktemp(name) / "synthetic"
    build_synthetic(root, num_scenes=num_scenes, seed=seed, image_size=32, num_shards=2, progress=False,
                    relevance=("cider", "sbert", "neighbors"), neighbors_k=20, world="shapes")
    return root


@pytest.fixture(scope="module")
def rich_world(tmp_path_factory):
    return _world_with_every_row(tmp_path_factory, "papers", 60, 3)


@pytest.mark.slow
@pytest.mark.parametrize("flagfile, extra, loss_terms", [
    # SAM on CIDEr-D, composed with the fixed ladder whose thresholds are re-clustered every 2 batches.
    ("sam.flags", ["--loss=sam,ladder", "--loss_weights=1,0.5", "--ladder_recluster_every=2"],
     ["sam/sam_i2t", "sam/triplet_i2t", "ladder/level_2", "ladder/theta_1", "ladder/clusters"]),
    # The neighbourhood loss on neighbour-aware batches, composed with the adaptive ladder on SBERT relevance.
    ("neighborhoods.flags", ["--loss=neighborhood,ladder_adaptive", "--relevance=sbert"],
     ["neighborhood/text_neighbors", "neighbor_coverage", "ladder/level_2", "ladder/levels_per_query"]),
])
def test_paper_flagfile_runs_on_the_synthetic_world(rich_world, tmp_path, flagfile, extra, loss_terms, launch, repo_root):
    run_dir = tmp_path / "run"
    result = launch([f"--flagfile={repo_root / 'launch' / flagfile}", *SMALL, f"--data_dir={rich_world}",
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


# Learning, not only running: on a small world the paper flagfiles whose configurations used to collapse on the
# synthetic world (the ladders' hardest-negative first rung, the hinge angular loss) now reach test R@1 far above
# chance with the synthetic defaults (sum over negatives; the N-pair angular form).
LEARN = ["--dataset=synthetic", "--image_size=32", "--embedding_dim=64", "--word_dim=32", "--text_units=32",
         "--batch_size=32", "--epochs=6", "--lr_decay_epochs=0", "--eval_every_epochs=0", "--export=false",
         "--progress=false", "--projector_samples=0"]


@pytest.fixture(scope="module")
def learning_world(tmp_path_factory):
    return _world_with_every_row(tmp_path_factory, "learning", 400, 5)


@pytest.mark.slow
@pytest.mark.parametrize("flagfile", ["ladder.flags", "neighborhoods.flags"])
def test_paper_flagfile_learns_on_a_small_synthetic_world(learning_world, tmp_path, flagfile, launch, repo_root,
                                                            random_ranking_rsum):
    run_dir = tmp_path / "run"
    result = launch([f"--flagfile={repo_root / 'launch' / flagfile}", *LEARN, f"--data_dir={learning_world}",
                      f"--run_dir={run_dir}"])
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    n = summary["dataset"]["splits"]["test"]
    # rsum (R^V@1, 5, 10 both ways) against random rankings of the same 40 test images (mean 77, sd 13, 99.9th
    # percentile 118.5): a collapsed model scores about the mean; R@1 alone is too coarse (one hit is 2.5 points).
    # On the project's 2-core machine (2026-11-29) ladder.flags reached 126.5 with its loss 336 -> 119 over 6 epochs,
    # neighborhoods.flags its loss 327 -> 246.
    chance_mean, _, chance_top = random_ranking_rsum(n)
    rsum = sum(summary["test"][f"{d}_R@{k}"] for d in ("i2t", "t2i") for k in (1, 5, 10))
    assert rsum > chance_top, (rsum, chance_mean, chance_top, summary["test"])
    losses = summary["history"]["loss"]
    assert losses[-1] < 0.9 * losses[0], losses
    assert summary["collapse"]["collapsed_epoch"] is None
    assert "collapsed" not in result.stderr

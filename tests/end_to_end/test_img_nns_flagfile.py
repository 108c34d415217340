"""End to end: launch/neighborhoods_imgnns.flags (Thomas & Kovashka's "Img NNs" variant) trains through the launcher on
a synthetic world with pixel-space image neighbour rows, its neighbour coverage logged to TensorBoard."""

import json

import numpy as np
import pytest
import tensorflow as tf


@pytest.fixture(scope="module")
def image_neighbor_world(tmp_path_factory):
    """A small synthetic world with pixel-space image neighbours and no text neighbours."""
    from kitm.data.synthetic_records import build_synthetic
    from kitm.relevance.image_features import ImageNeighborOptions

    root = tmp_path_factory.mktemp("image_neighbors") / "synthetic"
    build_synthetic(root, num_scenes=80, seed=5, image_size=32, num_shards=2, progress=False, relevance=("cider",),
                    neighbors_k=10, image_neighbors=ImageNeighborOptions("pixels"), world="shapes")
    return root


def test_img_nns_flagfile_trains_on_image_neighbor_batches(image_neighbor_world, tmp_path, launch, repo_root):
    run_dir = tmp_path / "run"
    result = launch([f"--flagfile={repo_root / 'launch' / 'neighborhoods_imgnns.flags'}", "--dataset=synthetic",
                      f"--data_dir={image_neighbor_world}", f"--run_dir={run_dir}", "--image_size=32",
                      "--embedding_dim=32", "--word_dim=16", "--text_units=16", "--batch_size=16", "--epochs=1",
                      "--eval_every_epochs=0", "--export=false", "--progress=false", "--eval_relevance=truth",
                      "--captions_per_step=sample",
                      "--projector_samples=0"])
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["flags"]["neighbor_space"] == "image"
    metrics = summary["final_train_metrics"]
    assert metrics["neighbor_coverage"] >= 0.9
    assert np.isfinite(metrics["neighborhood/image_neighbors"]) and np.isfinite(metrics["loss"])
    # The coverage reaches TensorBoard, next to the loss terms.
    tags = set()
    for event_file in (run_dir / "logs" / "train").glob("events.out.tfevents.*"):
        for record in tf.data.TFRecordDataset(str(event_file)):
            tags.update(value.tag for value in tf.compat.v1.Event.FromString(record.numpy()).summary.value)
    assert {"epoch_neighbor_coverage", "epoch_neighborhood/image_neighbors"} <= tags, sorted(tags)

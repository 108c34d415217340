"""A trained run's image tower as frozen features: `kitm.data.build --image_features_run` stores the run's image
embeddings in the synthetic records (image mode "feature"), and the launcher trains an MLP on them (the papers'
precomputed-feature regime, as the claims study uses it)."""

import io

import numpy as np
import pytest
from PIL import Image

from kitm.data import schema
from kitm.data.synthetic import generate_world
from kitm.data.synthetic_records import build_synthetic
from kitm.serving.image_features import saved_model_image_features

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def feature_world(production_run, tmp_path_factory):
    run_dir, _ = production_run
    root = tmp_path_factory.mktemp("features") / "world"
    info = build_synthetic(root, num_scenes=60, seed=11, image_size=32, num_shards=1, progress=False,
                           relevance=(), split_counts=(40, 8, 12), image_features=saved_model_image_features(run_dir), world="shapes")
    return root, info


def test_records_hold_the_run_s_own_image_embeddings(production_run, feature_world):
    import tensorflow as tf

    run_dir, _ = production_run
    root, info = feature_world
    assert info.image_mode == "feature" and info.feature_dim == 32  # the production run's --embedding_dim
    assert {split: info.num_images(split) for split in info.splits} == {"train": 40, "val": 8, "test": 12}
    assert info.source["image_features"]["saved_model"].endswith("export/1")
    # The first test record's vector is what the SavedModel's encode_image gives for that scene's PNG.
    world = generate_world(60, seed=11, image_size=32, split_counts=(40, 8, 12), world="shapes")
    first_test = int(world.split_indices("test")[0])
    record = next(iter(tf.data.TFRecordDataset(info.shard_paths(root, "test"))))
    parsed = tf.io.parse_single_example(record, schema.feature_spec(info))
    assert int(parsed["image/id"]) == first_test
    buffer = io.BytesIO()
    Image.fromarray(world.images[first_test]).save(buffer, format="PNG")
    loaded = tf.saved_model.load(str(run_dir / "export" / "1"))
    expected = loaded.signatures["encode_image"](images=tf.constant([buffer.getvalue()]))["embeddings"].numpy()[0]
    np.testing.assert_allclose(parsed["image/feature"].numpy(), expected, rtol=1e-5, atol=1e-6)


def test_the_launcher_trains_an_mlp_on_the_frozen_features(feature_world, tmp_path, launch):
    root, _ = feature_world
    result = launch(["--dataset=synthetic", f"--data_dir={root}", f"--run_dir={tmp_path / 'run'}",
                     "--image_encoder=features_mlp", "--embedding_dim=16", "--word_dim=8", "--text_units=8",
                     "--batch_size=16", "--epochs=1", "--relevance=truth", "--eval_relevance=truth",
                     "--eval_every_epochs=0", "--projector_samples=0", "--progress=false", "--export=false"])
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert (tmp_path / "run" / "summary.json").is_file()


def test_a_folder_without_a_saved_model_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="holds no SavedModel"):
        saved_model_image_features(tmp_path)

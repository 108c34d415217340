"""Distribution (kitm.training.distribution): per-replica input pipelines (shards, batch, relevance blocks), step
counts, TF_CONFIG errors. Two real workers of the launcher: tests/end_to_end/test_distribution.py."""

import pathlib

import numpy as np
import pytest
import tensorflow as tf

import kitm  # noqa: F401
from kitm.data import synthetic
from kitm.relevance.world_truth import world_relevance
from kitm.data.pipeline import PipelineConfig, training_captions, training_dataset
from kitm.layers import CaptionTokenizer, build_vocabulary
from kitm.training import distribution


@pytest.fixture(scope="module")
def tokenizer(tiny_synthetic):
    return CaptionTokenizer(build_vocabulary(training_captions(tiny_synthetic)), max_length=16)


def _build(root, tokenizer):
    config = PipelineConfig(image_size=32, relevance="truth", flip=True, eval_crop_fraction=1.0)

    def build(batch, shard, seed):
        import dataclasses

        return training_dataset(root, "train", tokenizer, dataclasses.replace(config, batch_size=batch, seed=seed),
                                shard=shard)

    return build


def _truth(world, y):
    facts = world.caption_facts.reshape(-1, world.caption_facts.shape[-1])[y["caption_index"].numpy()]
    return world_relevance(world.scene_facts[y["image_index"].numpy()], facts, world="shapes", image_size=32)


def test_two_worker_pipelines_split_the_records_and_each_replica_gets_its_own_relevance(tiny_synthetic, tokenizer):
    # Two workers with one replica each: B = 16, b = 8; 96 training images, 48 per worker, 6 steps.
    steps = distribution.steps_per_epoch(96, 1, 16, replicas=2, pipelines=2)
    assert steps == 6
    dataset_fn = distribution.per_replica_dataset_fn(_build(tiny_synthetic, tokenizer), global_batch=16, steps=steps,
                                                     seed=3)
    world = synthetic.generate_world(120, seed=7, image_size=32, world="shapes")
    passes = []
    for worker in (0, 1):
        context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=worker, num_replicas_in_sync=2)
        batches = list(dataset_fn(context).take(2 * steps))  # two passes: the dataset repeats
        for x, y in batches:
            assert x["image"].shape == (8, 32, 32, 3) and y["relevance"].shape == (8, 8)
            # The replica's relevance is that of exactly the captions it trains on.
            np.testing.assert_allclose(y["relevance"].numpy(), _truth(world, y), atol=1e-6)
        images = np.stack([y["image_index"].numpy() for _, y in batches]).reshape(2, -1)  # [pass, 48]
        passes.append(images)
    for epoch in (0, 1):
        worker0, worker1 = set(passes[0][epoch]), set(passes[1][epoch])
        # In every pass the two workers train on complementary halves, each image once.
        assert len(worker0) == len(worker1) == 48 and not worker0 & worker1 and len(worker0 | worker1) == 96
    assert not np.array_equal(passes[0][0], passes[0][1])  # a new order each pass


def test_one_worker_with_two_replicas_feeds_consecutive_per_replica_batches(tiny_synthetic, tokenizer):
    # MirroredStrategy on 2 devices: one pipeline, b = 8, two elements per step, 6 steps = 12 elements a pass.
    steps = distribution.steps_per_epoch(96, 1, 16, replicas=2, pipelines=1)
    assert steps == 6
    dataset_fn = distribution.per_replica_dataset_fn(_build(tiny_synthetic, tokenizer), global_batch=16, steps=steps,
                                                     seed=0)
    context = tf.distribute.InputContext(num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=2)
    batches = list(dataset_fn(context).take(12))
    images = np.concatenate([y["image_index"].numpy() for _, y in batches])
    assert len(images) == 96 and len(set(images)) == 96
    assert all(y["relevance"].shape == (8, 8) for _, y in batches)


def test_steps_per_epoch_matches_one_device_and_refuses_impossible_batches():
    assert distribution.steps_per_epoch(96, 5, 16, replicas=1) == 96 * 5 // 16
    assert distribution.steps_per_epoch(97, 1, 16, replicas=2, pipelines=2) == 6  # the smaller shard (48) decides
    assert distribution.steps_per_epoch(100, 1, 16, replicas=4, pipelines=2) == 6  # 50 images, b = 4, L = 2
    with pytest.raises(distribution.DistributionError, match="divisible by the 3 replicas"):
        distribution.per_replica_batch_size(16, 3)
    with pytest.raises(distribution.DistributionError, match="leaves no full step"):
        distribution.steps_per_epoch(12, 1, 16, replicas=4, pipelines=4)


@pytest.mark.parametrize("value, message", [
    (None, "TF_CONFIG environment variable, which is not set"),
    ("{not json", "TF_CONFIG is not valid JSON"),
    ('{"cluster": {"worker": ["127.0.0.1:1"]}}', '"task"'),
    ('{"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "worker", "index": 3}}', "is not in its cluster"),
])
def test_multi_worker_without_a_usable_tf_config_is_refused(monkeypatch, value, message):
    if value is None:
        monkeypatch.delenv("TF_CONFIG", raising=False)
    else:
        monkeypatch.setenv("TF_CONFIG", value)
    with pytest.raises(distribution.DistributionError, match=message):
        distribution.make_strategy("multi_worker")


def test_single_process_is_its_own_chief():
    strategy = distribution.make_strategy("default")
    assert distribution.is_chief(strategy) and distribution.num_workers(strategy) == 1
    with distribution.worker_directory("some/run", strategy) as write_dir:
        assert write_dir == pathlib.Path("some/run")




def test_replica_rows_give_each_replica_its_rows_of_the_global_batchs_relevance(tiny_synthetic, tokenizer):
    # Global negatives: a global batch of 16 cut into 2 replicas' elements of 8 rows, each with its rows of the
    # global batch's relevance [8, 16]: its images against all 16 captions.
    from kitm.data.own_rows import replica_rows

    world = synthetic.generate_world(120, seed=7, image_size=32, world="shapes")
    pieces = list(replica_rows(_build(tiny_synthetic, tokenizer)(16, None, 0), 2).take(2))
    captions = np.concatenate([y["caption_index"].numpy() for _, y in pieces])
    facts = world.caption_facts.reshape(-1, world.caption_facts.shape[-1])[captions]
    for x, y in pieces:
        assert x["image"].shape == (8, 32, 32, 3) and y["relevance"].shape == (8, 16)
        expected = world_relevance(world.scene_facts[y["image_index"].numpy()], facts, world="shapes", image_size=32)
        np.testing.assert_allclose(y["relevance"].numpy(), expected, atol=1e-6)
    with pytest.raises(ValueError, match="replicas 2..2 are not among 0..1"):
        replica_rows(tf.data.Dataset.range(4), 2, first=2, count=1)

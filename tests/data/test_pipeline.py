"""The tf.data pipeline: shapes, dtypes, caption modes, per-replica relevance blocks, evaluation order."""

import numpy as np
import pytest
import tensorflow as tf

import kitm  # noqa: F401
from kitm.data import schema, synthetic
from kitm.errors import KitmDataError
from kitm.data.pipeline import (PipelineConfig, block_diagonal_relevance, evaluation_dataset, training_captions,
                                training_dataset)
from kitm.layers import CaptionTokenizer, build_vocabulary
from kitm.relevance.world_truth import world_relevance


@pytest.fixture(scope="module")
def tokenizer(tiny_synthetic):
    return CaptionTokenizer(build_vocabulary(training_captions(tiny_synthetic)), max_length=16)


def _config(**overrides):
    base = dict(batch_size=16, image_size=32, relevance="truth", flip=False, eval_crop_fraction=1.0, seed=1)
    base.update(overrides)
    return PipelineConfig(**base)


@pytest.mark.parametrize("captions", ["sample", "all"])
def test_training_batches_shapes_dtypes_and_counts(tiny_synthetic, tokenizer, captions):
    dataset = training_dataset(tiny_synthetic, "train", tokenizer, _config(captions=captions))
    batches = list(dataset)
    samples = 96 * (5 if captions == "all" else 1)
    assert len(batches) == samples // 16  # drop_remainder
    x, y = batches[0]
    assert x["image"].shape == (16, 32, 32, 3) and x["image"].dtype == tf.float32
    assert 0.0 <= float(tf.reduce_min(x["image"])) and float(tf.reduce_max(x["image"])) <= 1.0
    assert x["tokens"].shape == (16, 16) and x["tokens"].dtype == tf.int32
    assert y["image_index"].dtype == tf.int32 and y["relevance"].shape == (16, 16)
    # caption q belongs to image p exactly when caption_index // 5 == image_index.
    np.testing.assert_array_equal(y["caption_index"].numpy() // 5, y["image_index"].numpy())
    relevance = y["relevance"].numpy()
    np.testing.assert_allclose(np.diag(relevance), 1.0, atol=1e-6)  # every caption is true of its own image
    assert relevance.min() >= 0 and relevance.max() <= 1 + 1e-6


def test_relevance_matches_truth_of_the_sampled_captions(tiny_synthetic, tokenizer):
    world = synthetic.generate_world(120, seed=7, image_size=32, world="shapes")
    _, y = next(iter(training_dataset(tiny_synthetic, "train", tokenizer, _config(captions="all"))))
    image_index = y["image_index"].numpy()
    caption_index = y["caption_index"].numpy()
    facts = world.caption_facts.reshape(-1, world.caption_facts.shape[-1])[caption_index]
    expected = world_relevance(world.scene_facts[image_index], facts, world="shapes", image_size=32)
    np.testing.assert_allclose(y["relevance"].numpy(), expected, atol=1e-6)


def test_the_things_worlds_relevance_in_the_pipeline_is_its_truth(tiny_things):
    """The in-batch truth of the things world (its own fact layout, read from dataset.json's truth.world) equals the
    NumPy truth of the sampled captions and images."""
    info = schema.load_info(tiny_things)
    assert info.truth_world == "things" and info.relevance["truth"]["world"] == "things"
    tokenizer = CaptionTokenizer(build_vocabulary(training_captions(tiny_things)), max_length=24)
    world = synthetic.generate_world(120, seed=7, image_size=48)
    _, y = next(iter(training_dataset(tiny_things, "train", tokenizer, _config(captions="all", image_size=48))))
    facts = world.caption_facts.reshape(-1, world.caption_facts.shape[-1])[y["caption_index"].numpy()]
    expected = world_relevance(world.scene_facts[y["image_index"].numpy()], facts, world="things", image_size=48)
    np.testing.assert_allclose(y["relevance"].numpy(), expected, atol=1e-6)
    assert (expected < 1).any() and np.allclose(np.diag(expected), 1.0)


def test_relevance_blocks_per_replica():
    def relevance(rows, cols):  # any [B, B] function of the two sides
        return tf.cast(rows[:, None] * 100 + cols[None, :], tf.float32)

    ids = tf.range(6)
    blocks = block_diagonal_relevance(relevance, ids, ids, num_replicas=2).numpy()
    full = relevance(ids, ids).numpy()
    np.testing.assert_array_equal(blocks, np.concatenate([full[:3, :3], full[3:, 3:]]))
    np.testing.assert_array_equal(block_diagonal_relevance(relevance, ids, ids, 1).numpy(), full)


def test_evaluation_dataset_keeps_record_order_and_all_captions(tiny_synthetic, tokenizer):
    batches = list(evaluation_dataset(tiny_synthetic, "test", tokenizer, _config(batch_size=5)))
    image_index = np.concatenate([b["image_index"].numpy() for b in batches])
    assert len(image_index) == 12 and len(batches) == 3  # the last batch is short, nothing dropped
    first = batches[0]
    assert first["image"].shape == (5, 32, 32, 3) and first["tokens"].shape == (5, 5, 16)
    np.testing.assert_array_equal(first["caption_index"].numpy(), first["image_index"].numpy()[:, None] * 5
                                  + np.arange(5))
    again = np.concatenate([b["image_index"].numpy() for b in evaluation_dataset(
        tiny_synthetic, "test", tokenizer, _config(batch_size=5))])
    np.testing.assert_array_equal(image_index, again)  # deterministic


def test_augmentation_changes_pixels_but_evaluation_does_not(tiny_synthetic, tokenizer):
    config = _config(batch_size=96, flip=True, crop_area=(0.5, 0.9))
    x, _ = next(iter(training_dataset(tiny_synthetic, "train", tokenizer, config)))
    assert x["image"].shape == (96, 32, 32, 3)
    evaluated = next(iter(evaluation_dataset(tiny_synthetic, "train", tokenizer, config)))["image"].numpy()
    stored = [tf.io.decode_png(r["image/encoded"]).numpy() / 255.0 for r in _parsed(tiny_synthetic, "train")]
    np.testing.assert_allclose(evaluated[:3], np.stack(stored[:3]), atol=1e-6)


def _parsed(root, split):
    from kitm.data.records import parse_record, read_records

    info = schema.load_info(root)
    spec = schema.feature_spec(info)
    return [parse_record(p, r, spec) for p, r in read_records(info.shard_paths(root, split))]


def test_batch_larger_than_the_data_is_refused(tiny_synthetic, tokenizer):
    with pytest.raises(KitmDataError, match="batch_size 128 is larger than the 96 training samples"):
        training_dataset(tiny_synthetic, "train", tokenizer, _config(batch_size=128))


def test_bad_configs_are_refused():
    with pytest.raises(ValueError, match="captions must be one of"):
        PipelineConfig(captions="some")
    with pytest.raises(ValueError, match="divisible by the 3 replicas"):
        PipelineConfig(batch_size=16, num_replicas=3)


def test_train_subset_reads_a_fixed_subset_of_the_training_images(tiny_synthetic, tokenizer):
    from kitm.training.center_phases import read_image_ids

    ids = np.sort(read_image_ids(tiny_synthetic, "train"))
    smallest = ids[:24]  # 25% of the 96 training images: the smallest ids, the same every epoch and seed
    scattered = np.sort(np.random.default_rng(7).choice(ids, size=24, replace=False))  # any ids, not a prefix
    for kept in (smallest, scattered):
        for seed in (1, 2):
            dataset = training_dataset(tiny_synthetic, "train", tokenizer,
                                       _config(captions="all", seed=seed, train_subset=tuple(map(int, kept))))
            seen = np.concatenate([y["image_index"].numpy() for _, y in dataset])
            assert len(seen) == 24 * 5 // 16 * 16  # drop_remainder over the subset's samples
            assert set(seen.tolist()) <= set(kept.tolist()) and len(set(seen.tolist())) >= 20
    with pytest.raises(KitmDataError, match="batch_size 16 is larger than the 5 training samples"):
        training_dataset(tiny_synthetic, "train", tokenizer, _config(train_subset=tuple(map(int, ids[:5]))))


def test_training_subset_seeds_pick_fixed_subsets(tiny_synthetic):
    """--train_subset_seed 0 keeps the smallest ids (the first claims study's subset); other seeds random subsets of
    the same size, the same for the same seed, different between seeds."""
    from kitm.experiment import datasets
    from kitm.experiment.presets import experiment_config
    from kitm.training.center_phases import read_image_ids

    ids = np.sort(read_image_ids(tiny_synthetic, "train"))
    subsets = {seed: datasets.training_subset(experiment_config("synthetic", data_dir=str(tiny_synthetic),
                                                                train_fraction=0.25, train_subset_seed=seed), None)
               for seed in (0, 1, 2)}
    assert subsets[0] == tuple(map(int, ids[:24]))
    assert all(len(s) == 24 and list(s) == sorted(set(s)) and set(s) <= set(ids.tolist()) for s in subsets.values())
    assert len({subsets[0], subsets[1], subsets[2]}) == 3
    again = datasets.training_subset(experiment_config("synthetic", data_dir=str(tiny_synthetic), train_fraction=0.25,
                                                       train_subset_seed=1), None)
    assert again == subsets[1]
    assert datasets.training_subset(experiment_config("synthetic", data_dir=str(tiny_synthetic)), None) is None


def test_records_decoded_ahead_give_the_same_pixels(tiny_synthetic):
    """The training pipeline decodes each record's image in a parallel map (`_with_pixels`) before the serial
    flat_map; `image_input` then returns those pixels, the same as decoding the bytes itself."""
    from kitm.data.pipeline import _records, _with_pixels, image_input

    info, records = _records(tiny_synthetic, "train", PipelineConfig(batch_size=4), training=False)
    for parsed in records.take(3):
        decoded = _with_pixels(parsed)
        assert "image/encoded" not in decoded and set(parsed) - {"image/encoded"} <= set(decoded)
        np.testing.assert_array_equal(image_input(decoded, info).numpy(), image_input(parsed, info).numpy())
        assert decoded["image/pixels"].dtype == tf.uint8

"""Neighbour-aware batching: mutual-neighbour masks, partner draws, in-batch neighbour rows, coverage."""

import numpy as np
import pytest
import tensorflow as tf

from kitm.data import schema
from kitm.errors import KitmDataError
from kitm.data.neighbor_batching import (draw_partners, mutual_mask, neighbor_positions, neighbor_table,
                                         plan_coverage)
from kitm.data.pipeline import PipelineConfig, training_captions, training_dataset
from kitm.layers import CaptionTokenizer, build_vocabulary


def test_mutual_mask_matches_a_loop_over_pairs():
    rng = np.random.default_rng(0)
    positions = np.stack([rng.choice(np.delete(np.arange(30), row), 6, replace=False) for row in range(30)])
    positions[3, 2] = -1
    expected = np.array([[b >= 0 and a in positions[b] for b in row] for a, row in enumerate(positions)])
    np.testing.assert_array_equal(mutual_mask(positions), expected)


def test_partners_come_from_the_seed_list_and_prefer_mutual_ones():
    positions = np.array([[1, 2], [2, 3], [0, 1], [0, 1]], np.int32)  # mutual: 0-2 (0 lists 2, 2 lists 0), 1-2, 1-3
    mutual = mutual_mask(positions)
    seeds = tf.constant([0, 0, 0, 0, 0, 0, 0, 0, 3, 3], tf.int32)
    found = draw_partners(seeds, tf.constant(positions), tf.constant(mutual), "mutual", seed=(1, 2)).numpy()
    assert set(found[:8]) == {2} and set(found[8:]) == {1}  # 0's only mutual neighbour is 2; 3's is 1
    uniform = draw_partners(tf.constant([0] * 200, tf.int32), tf.constant(positions), tf.constant(mutual),
                            "uniform", seed=(1, 2)).numpy()
    assert set(uniform) == {1, 2}


def test_neighbor_positions_point_at_a_listed_neighbor_in_the_batch():
    positions = tf.constant([[1, 4], [0, 2], [3, 0], [4, 0], [0, 1], [9, 8]], tf.int32)
    rows = tf.constant([0, 1, 2, 5], tf.int32)  # pairs (0, 1) and (2, 5)
    found = neighbor_positions(rows, positions).numpy()
    # 0 lists 1 (its partner); 1 lists 0; 2 lists 0 (row 0) but not its partner 5; 5 lists nothing present.
    np.testing.assert_array_equal(found, [1, 0, 0, -1])


@pytest.fixture(scope="module")
def neighbor_world(tmp_path_factory):
    from kitm.data.synthetic_records import build_synthetic

    root = tmp_path_factory.mktemp("neighbors") / "synthetic"
    build_synthetic(root, num_scenes=80, seed=5, image_size=32, num_shards=2, progress=False,
                    relevance=("cider", "neighbors"), neighbors_k=10, world="shapes")
    return root


@pytest.mark.parametrize("replicas", [1, 2])
def test_paired_batches_hold_each_rows_neighbor(neighbor_world, replicas):
    info = schema.load_info(neighbor_world)
    _, caption_ids, positions = neighbor_table(info, neighbor_world, "train")
    flat_ids = caption_ids.reshape(-1)
    listed = {int(flat_ids[row]): set(flat_ids[positions[row]].tolist()) for row in range(len(flat_ids))}
    tokenizer = CaptionTokenizer(build_vocabulary(training_captions(neighbor_world)), max_length=16)
    config = PipelineConfig(batch_size=16, image_size=32, relevance="cider", flip=False, captions="all",
                            neighbor_batching=True, num_replicas=replicas, seed=4)
    dataset = training_dataset(neighbor_world, "train", tokenizer, config)
    assert int(dataset.cardinality()) == info.num_images("train") * 5 // 16
    covered = []
    for x, y in dataset:
        ids = y["caption_index"].numpy()
        where = y["neighbor_position"].numpy()
        assert y["relevance"].shape == (16, 16 // replicas) and x["image"].shape == (16, 32, 32, 3)
        np.testing.assert_array_equal(ids // 5, y["image_index"].numpy())
        block = 16 // replicas
        for row, target in enumerate(where):
            if target >= 0:
                # Positions are rows of the replica's own block: that is what its loss sees.
                assert 0 <= target < block
                assert ids[row // block * block + target] in listed[int(ids[row])]
        covered.append(np.mean(where >= 0))
        # seeds (even rows) always have their partner
        assert np.all(where[0::2] >= 0)
    assert np.mean(covered) >= 0.9


def test_plan_coverage_on_the_synthetic_world(neighbor_world):
    info = schema.load_info(neighbor_world)
    _, _, positions = neighbor_table(info, neighbor_world, "train")
    assert plan_coverage(positions, 16, "mutual", batches=20) >= 0.9


def test_batching_without_neighbor_rows_is_refused(tiny_synthetic):
    tokenizer = CaptionTokenizer(build_vocabulary(training_captions(tiny_synthetic)), max_length=16)
    config = PipelineConfig(batch_size=16, image_size=32, neighbor_batching=True)
    with pytest.raises(KitmDataError, match="neighbors"):
        training_dataset(tiny_synthetic, "train", tokenizer, config)


def test_paired_batches_are_reproducible_for_a_seed(neighbor_world):
    tokenizer = CaptionTokenizer(build_vocabulary(training_captions(neighbor_world)), max_length=16)

    def first_epoch(seed):
        config = PipelineConfig(batch_size=16, image_size=32, relevance="cider", captions="all",
                                neighbor_batching=True, seed=seed)
        return [(y["caption_index"].numpy(), y["neighbor_position"].numpy(), x["image"].numpy())
                for x, y in training_dataset(neighbor_world, "train", tokenizer, config).take(4)]

    one, two, other = first_epoch(4), first_epoch(4), first_epoch(5)
    for a, b in zip(one, two):
        for left, right in zip(a, b):
            np.testing.assert_array_equal(left, right)
    assert any(not np.array_equal(a[0], b[0]) for a, b in zip(one, other))

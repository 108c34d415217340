"""A worker's rows of the global batch (kitm.data.own_rows; issue 46, item 3): two workers' parts put together are
the one-worker pipeline's batches with the whole batch (images after the same crop and flip, tokens, indices, the
relevance rows of the global batch), and each worker decodes B / W images a step, not B (its decode counter)."""

import numpy as np
import pytest
import tensorflow as tf

import kitm  # noqa: F401
from kitm.data.own_rows import InputCounters, own_rows_dataset
from kitm.data.pipeline import PipelineConfig, training_captions, training_dataset
from kitm.errors import KitmDataError
from kitm.layers import CaptionTokenizer, build_vocabulary


@pytest.fixture(scope="module")
def tokenizer(tiny_synthetic):
    return CaptionTokenizer(build_vocabulary(training_captions(tiny_synthetic)), max_length=16)


def _config(**overrides):
    # Crops and flips on: the parts must draw each sample's own augmentation, as the whole batch does.
    settings = dict(batch_size=16, image_size=32, relevance="truth", flip=True, crop_area=(0.6, 1.0),
                    eval_crop_fraction=1.0, seed=3, captions="sample")
    settings.update(overrides)
    return PipelineConfig(**settings)


def _numpy(batches):
    return [tf.nest.map_structure(lambda value: value.numpy(), batch) for batch in batches]


@pytest.mark.parametrize("relevance, captions", [("truth", "sample"), ("cider", "all")])
def test_two_workers_parts_are_the_one_worker_batch_and_each_decodes_half_of_it(tiny_synthetic, tokenizer,
                                                                                relevance, captions):
    config = _config(relevance=relevance, captions=captions)
    # The one-worker pipeline with the whole batch, reading as every worker reads (shard (1, 0)).
    whole = _numpy(training_dataset(tiny_synthetic, "train", tokenizer, config, shard=(1, 0)))
    counters = [InputCounters() for _ in range(2)]
    parts = [_numpy(own_rows_dataset(tiny_synthetic, "train", tokenizer, config, rows=(2, worker),
                                     counters=counters[worker])) for worker in range(2)]
    assert len(whole) == len(parts[0]) == len(parts[1]) >= 6
    for step, (x, y) in enumerate(whole):
        (x0, y0), (x1, y1) = parts[0][step], parts[1][step]
        assert x0["image"].shape == (8, 32, 32, 3) and y0["relevance"].shape == (8, 16)
        np.testing.assert_allclose(np.concatenate([x0["image"], x1["image"]]), x["image"], atol=1e-6)
        np.testing.assert_array_equal(np.concatenate([x0["tokens"], x1["tokens"]]), x["tokens"])
        for key in ("image_index", "caption_index"):
            np.testing.assert_array_equal(np.concatenate([y0[key], y1[key]]), y[key])
        np.testing.assert_allclose(np.concatenate([y0["relevance"], y1["relevance"]]), y["relevance"], atol=1e-6)
    # Each worker decoded its own 8 rows' images a step: B / W, half of what the whole batch needs.
    assert [int(counter.images.numpy()) for counter in counters] == [8 * len(whole)] * 2
    assert [counter.images_per_batch() for counter in counters] == [8.0, 8.0]


def test_parts_that_do_not_divide_the_batch_or_neighbour_batching_are_refused(tiny_synthetic, tokenizer):
    with pytest.raises(KitmDataError, match="does not split into 3 equal parts"):
        own_rows_dataset(tiny_synthetic, "train", tokenizer, _config(), rows=(3, 0))
    with pytest.raises(ValueError, match="0 <= part < parts"):
        own_rows_dataset(tiny_synthetic, "train", tokenizer, _config(), rows=(2, 2))
    with pytest.raises(KitmDataError, match="Neighbour-aware batching"):
        own_rows_dataset(tiny_synthetic, "train", tokenizer, _config(neighbor_batching=True), rows=(2, 0))

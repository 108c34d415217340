"""One worker's rows of the global batch: the batch's relevance over all of its rows, images decoded for its own only.

With global negatives and a relevance source, a worker's losses compare its rows with every row of the global batch
B, so its relevance rows are [B / W, B]: they need the relevance features of all B rows (scene facts, CIDEr-D
vectors, sentence embeddings: a few hundred bytes to a few kilobytes a row), but the images of its own B / W rows
only. `own_rows_dataset` reads every record in the same order on every worker (the complementary parts of one global
batch), keeps the images encoded while it batches the B rows and computes their [B, B] relevance
(`kitm.data.pipeline.batch_relevance_matrix`), then keeps part `part` of `parts` equal slices of the rows and decodes
and augments those images alone, each with the seed its sample drew (`kitm.data.pipeline.train_image`): the rows are
exactly the ones of the one-worker pipeline with the whole batch, and a worker decodes B / W images a step instead of
B. Captions are tokenized for the own rows only too.

`replica_rows` then cuts a worker's rows into its replicas' pieces. Used by the launcher for TensorFlow's
multi-worker strategy (W workers, each with its replicas) and for several JAX processes (`kitm.distribute.processes`), whenever each worker
needs rows of a batch larger than its own.
"""

from __future__ import annotations

import os

import tensorflow as tf

from kitm.data.pipeline import (PipelineConfig, _plain, batch_relevance_matrix, batched_samples, tf_tokenize,
                                train_image)
from kitm.errors import KitmDataError
from kitm.ops.images import decode_pixels


class InputCounters:
    """What a pipeline decoded and made: `images` decoded, `batches` made (int64 variables, read with `.numpy()`)."""

    def __init__(self):
        self.images = tf.Variable(0, dtype=tf.int64, trainable=False, name="images_decoded")
        self.batches = tf.Variable(0, dtype=tf.int64, trainable=False, name="batches_made")

    def images_per_batch(self) -> float:
        """Images decoded per batch made (the pipeline's read-ahead counts in both)."""
        return int(self.images.numpy()) / max(int(self.batches.numpy()), 1)


def own_rows_dataset(root: str | os.PathLike, split: str, tokenizer, config: PipelineConfig,
                     rows: tuple[int, int], counters: InputCounters | None = None) -> tf.data.Dataset:
    """(x, y) batches of the rows of part `rows[1]` of `rows[0]` of each global batch of `config.batch_size` rows,
    y["relevance"] their rows of the global batch's relevance [B / parts, B] (module docstring).

    `counters`: counts the images this pipeline decodes and the batches it makes (summary.json, tests)."""
    parts, part = rows
    if not 0 <= part < parts:
        raise ValueError(f"rows must be (parts, part) with 0 <= part < parts; got {rows}.")
    if config.batch_size % parts:
        raise KitmDataError(f"the global batch of {config.batch_size} rows does not split into {parts} equal parts.")
    if config.neighbor_batching:
        raise KitmDataError("Neighbour-aware batching draws partners from the whole split; it does not run on a "
                            "worker's part of each batch (one pipeline per worker).")
    # Every worker the same reading order (shard (1, 0): the deterministic reading of the sharded road).
    info, dataset = batched_samples(root, split, config, shard=(1, 0), defer_images=True)
    size = config.batch_size // parts
    own = slice(part * size, (part + 1) * size)

    def decode_and_augment(encoded_and_seed):
        encoded, seed = encoded_and_seed
        image = train_image(decode_pixels(encoded), config, seed)
        if counters is None:
            return image
        with tf.control_dependencies([counters.images.assign_add(1)]):
            return tf.identity(image)

    def convert(batch):
        image = batch["image"][own]
        if "image_seed" in batch:  # encoded images, decoded here for the own rows only
            image = tf.map_fn(decode_and_augment, (image, batch["image_seed"][own]),
                              fn_output_signature=tf.TensorSpec([config.image_size, config.image_size, 3],
                                                                tf.float32))
        x = {"image": image, "tokens": tf_tokenize(tokenizer, batch["caption"][own])}
        y = {"image_index": batch["image_index"][own], "caption_index": batch["caption_index"][own]}
        if config.relevance != "none":
            y["relevance"] = batch_relevance_matrix(batch, config.relevance, info, 1)[own]
        if counters is None:
            return x, y
        with tf.control_dependencies([counters.batches.assign_add(1)]):
            return tf.nest.map_structure(tf.identity, (x, y))

    return dataset.map(_plain(convert), num_parallel_calls=tf.data.AUTOTUNE,
                       deterministic=config.deterministic).prefetch(tf.data.AUTOTUNE)


def replica_rows(dataset: tf.data.Dataset, replicas: int, *, first: int = 0, count: int | None = None
                 ) -> tf.data.Dataset:
    """Cut each batch of B = R b rows into R per-replica elements of b rows and keep replicas `first` ...
    `first + count - 1`, in order (a worker's local replicas, which take consecutive elements).

    Every entry of `(x, y)` is cut along its first axis, so `y["relevance"]` ([B, B], caption q of the global batch
    to image p) becomes each replica's rows [b, B]: the relevance global negatives need (module docstring).
    """
    count = replicas - first if count is None else count
    if replicas < 1 or not 0 <= first < first + count <= replicas:
        raise ValueError(f"replica_rows: replicas {first}..{first + count - 1} are not among 0..{replicas - 1}.")

    def cut(value):
        shape = tf.shape(value)
        pieces = tf.reshape(value, tf.concat([[replicas, shape[0] // replicas], shape[1:]], axis=0))
        rows = value.shape[0]
        pieces.set_shape([replicas, None if rows is None else rows // replicas] + value.shape[1:].as_list())
        return pieces[first:first + count]

    return dataset.map(_plain(lambda *element: tf.nest.map_structure(cut, element)),
                       num_parallel_calls=tf.data.AUTOTUNE).unbatch()

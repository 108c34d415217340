"""Dataset-wide `image/id`s -> positions 0..N-1 among a split's images, for losses with one row per training image.

Records carry a dataset-wide `image/id` (Karpathy: the position in the split JSON, splits interleaved; synthetic:
the scene number, splits drawn at random), so a split's ids are not 0..N-1. Losses with one parameter row per
training image (the centers objective's per-image centres and classifier heads) need one: `ImageIndexMap` maps an
id to its rank among the split's sorted ids, in the input pipeline, so every loss sees the same index.
`read_image_ids` reads the ids once from the records (image/id only, no decoding).
"""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np
import tensorflow as tf

from kitm.errors import KitmDataError

__all__ = ["ImageIndexMap", "read_image_ids"]


def read_image_ids(data_dir: str | os.PathLike, split: str = "train") -> np.ndarray:
    """Every record's `image/id` in `split` (record order), parsing that one feature (images are not decoded)."""
    from kitm.data import schema
    from kitm.data.records import read_records

    info = schema.load_info(data_dir)
    paths = info.shard_paths(data_dir, split)
    spec = {"image/id": tf.io.FixedLenFeature([], tf.int64)}
    dataset = read_records(paths, deterministic=True).map(tf.autograph.experimental.do_not_convert(
        lambda path, record: tf.io.parse_single_example(record, spec)["image/id"]),
        num_parallel_calls=tf.data.AUTOTUNE).batch(8192)
    ids = np.concatenate([batch.numpy() for batch in dataset]) if info.num_images(split) else np.zeros([0], np.int64)
    if ids.size != info.num_images(split):
        raise KitmDataError(f"{data_dir}: split '{split}' has {ids.size} records but dataset.json says "
                            f"{info.num_images(split)} images.")
    return ids.astype(np.int64)


class ImageIndexMap:
    """`image/id` -> position 0..N-1 of that image among the training images (rank of its id; module docstring).

    `positions(ids)` works in the graph (a binary search in the sorted ids, no lookup-table resource, so it
    runs in tf.data under any strategy) and stops with an error naming `source` for an id not in the split.
    """

    def __init__(self, image_ids: Sequence[int], source: str = "the training split"):
        ids = np.sort(np.asarray(image_ids, dtype=np.int64).reshape(-1))
        if ids.size == 0:
            raise KitmDataError(f"{source} has no images.")
        repeated = ids[1:][ids[1:] == ids[:-1]]
        if repeated.size:
            raise KitmDataError(f"{source}: image/id {int(repeated[0])} occurs more than once; ids must be unique.")
        self.sorted_ids = ids
        self.source = source
        # Ids already 0..N-1 (in any record order): the map is the identity and costs nothing.
        self.identity = bool(ids[0] == 0 and ids[-1] == ids.size - 1)

    @property
    def num_images(self) -> int:
        return int(self.sorted_ids.size)

    def positions(self, image_ids) -> tf.Tensor:
        ids = tf.cast(image_ids, tf.int64)
        if self.identity:
            return tf.cast(ids, tf.int32)
        table = tf.constant(self.sorted_ids)
        flat = tf.reshape(ids, [-1])
        position = tf.searchsorted(table, flat, side="left")
        found = tf.equal(tf.gather(table, tf.minimum(position, self.num_images - 1)), flat)
        check = tf.debugging.assert_equal(
            found, tf.ones_like(found),
            message=f"an image/id of the batch is not among the {self.num_images} ids of {self.source}")
        with tf.control_dependencies([check]):
            return tf.reshape(tf.cast(position, tf.int32), tf.shape(ids))

    def apply(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
        """Map `y["image_index"]` of (x, y) training batches to positions."""

        @tf.autograph.experimental.do_not_convert  # as kitm.data.pipeline's map functions
        def remap(x, y):
            y = dict(y)
            y["image_index"] = self.positions(y["image_index"])
            return x, y

        if self.identity:
            return dataset
        return dataset.map(remap, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)

    def describe(self) -> dict:
        return {"num_images": self.num_images, "identity": self.identity,
                "min_id": int(self.sorted_ids[0]), "max_id": int(self.sorted_ids[-1]),
                "rule": "image/id" if self.identity else "rank of image/id among the training split's sorted ids"}

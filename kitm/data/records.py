"""Writing and reading kitm TFRecord shards (schema in kitm/data/schema.py).

Writing is atomic per shard (`<shard>.tmp`, then rename), so a killed build leaves only whole shards under
their final names, and a resumed build skips the shards that exist. Reading follows tf.data practice:
parallel interleave over shards, AUTOTUNE, an explicit `deterministic` switch, prefetch by the caller.
"""

from __future__ import annotations

import os
import pathlib
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np
import tensorflow as tf

from kitm.data.schema import SCHEMA_VERSION
from kitm.errors import KitmDataError
from kitm.files import atomic_path


def _bytes(values: Iterable[bytes]) -> tf.train.Feature:
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=list(values)))


def _ints(values) -> tf.train.Feature:
    return tf.train.Feature(int64_list=tf.train.Int64List(value=np.asarray(values, np.int64).ravel().tolist()))


def _floats(values) -> tf.train.Feature:
    return tf.train.Feature(float_list=tf.train.FloatList(value=np.asarray(values, np.float32).ravel().tolist()))


def make_example(
    *,
    image_id: int,
    image_key: str,
    split: str,
    captions: Sequence[str],
    caption_ids: Sequence[int],
    image_encoded: bytes | None = None,
    image_feature: np.ndarray | None = None,
    image_regions: np.ndarray | None = None,
    extra: Mapping[str, np.ndarray] | None = None,
) -> bytes:
    """Serialise one image's record. Rejects empty captions, naming the image and the caption."""
    for k, caption in enumerate(captions):
        if not isinstance(caption, str) or not caption.strip():
            raise KitmDataError(f"Image '{image_key}' (id {image_id}): caption {k} is empty ({caption!r}).")
    if len(caption_ids) != len(captions):
        raise KitmDataError(f"Image '{image_key}': {len(captions)} captions but {len(caption_ids)} caption ids.")
    feature = {
        "schema_version": _ints([SCHEMA_VERSION]),
        "image/id": _ints([image_id]),
        "image/key": _bytes([image_key.encode("utf-8")]),
        "split": _bytes([split.encode("utf-8")]),
        "captions": _bytes(c.encode("utf-8") for c in captions),
        "caption/ids": _ints(caption_ids),
    }
    if image_encoded is not None:
        feature["image/encoded"] = _bytes([image_encoded])
    if image_feature is not None:
        feature["image/feature"] = _floats(image_feature)
    if image_regions is not None:
        regions = np.asarray(image_regions, np.float32)
        if regions.ndim != 2:
            raise KitmDataError(f"Image '{image_key}': region features must be [R, F]; got shape {regions.shape}.")
        feature["image/regions"] = _floats(regions)
        feature["image/regions_shape"] = _ints(regions.shape)
    for key, values in (extra or {}).items():
        values = np.asarray(values)
        feature[key] = _floats(values) if np.issubdtype(values.dtype, np.floating) else _ints(values)
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def shard_name(split: str, index: int, count: int) -> str:
    return f"{split}-{index:05d}-of-{count:05d}.tfrecord"


def shard_ranges(num_items: int, num_shards: int) -> list[range]:
    """Contiguous, nearly equal index ranges, so shard i always holds the same items (resumable)."""
    bounds = np.linspace(0, num_items, num_shards + 1).round().astype(int)
    return [range(bounds[i], bounds[i + 1]) for i in range(num_shards)]


def write_shards(
    root: str | os.PathLike,
    split: str,
    num_items: int,
    num_shards: int,
    make_records: Callable[[range], Iterable[bytes]],
    progress: Callable[[int], None] | None = None,
) -> tuple[list[str], list[int]]:
    """Write `num_items` records for `split` into `num_shards` shards under `root`.

    `make_records(index_range)` yields the serialised records of those items. A shard whose final file
    exists is kept (a killed build resumes); a shard is written to `<name>.tmp` and renamed when whole
    (`kitm.files.atomic_path`; an exception removes the partial file, a killed process leaves it to be replaced).
    Returns the shard file names and their sizes in bytes. `progress(n)` is told of every n items done.
    """
    root = pathlib.Path(root)
    root.mkdir(parents=True, exist_ok=True)
    num_shards = max(1, min(num_shards, num_items))
    names, sizes = [], []
    for index, items in enumerate(shard_ranges(num_items, num_shards)):
        name = shard_name(split, index, num_shards)
        final = root / name
        if not final.is_file():
            with atomic_path(final) as tmp, tf.io.TFRecordWriter(str(tmp)) as writer:
                for record in make_records(items):
                    writer.write(record)
        if progress is not None:
            progress(len(items))
        names.append(name)
        sizes.append(final.stat().st_size)
    return names, sizes


def read_records(
    paths: Sequence[str],
    *,
    shuffle_files: bool = False,
    deterministic: bool = True,
    seed: int | None = None,
    cycle_length: int | None = None,
) -> tf.data.Dataset:
    """Dataset of (shard path, serialised record) pairs, interleaved over shards in parallel.

    The shard path travels with each record so that in-graph checks can name the file.
    """
    if not paths:
        raise KitmDataError("No TFRecord shards to read.")
    missing = [p for p in paths if not tf.io.gfile.exists(p)]
    if missing:
        raise KitmDataError(f"TFRecord shard(s) missing: {', '.join(missing[:5])}")
    files = tf.data.Dataset.from_tensor_slices(list(paths))
    if shuffle_files:
        files = files.shuffle(len(paths), seed=seed, reshuffle_each_iteration=True)
    # Not converted by autograph, as every map function of kitm's data side (kitm.data.pipeline says why).
    return files.interleave(
        tf.autograph.experimental.do_not_convert(
            lambda path: tf.data.TFRecordDataset(path).map(
                tf.autograph.experimental.do_not_convert(lambda record: (path, record)))),
        cycle_length=cycle_length or min(len(paths), 8),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=deterministic,
    )


def parse_record(path: tf.Tensor, record: tf.Tensor, spec: Mapping) -> dict[str, tf.Tensor]:
    """Parse one record and assert, inside the graph, that it is of this schema version (naming the file)."""
    parsed = tf.io.parse_single_example(record, spec)
    version = parsed["schema_version"]
    check = tf.debugging.Assert(
        tf.equal(version, SCHEMA_VERSION),
        [tf.strings.format("kitm: a record in {} has schema version {}; this kitm reads version {}. Rebuild the "
                           "dataset with python -m kitm.data.build.", (path, version, SCHEMA_VERSION))],
    )
    with tf.control_dependencies([check]):
        parsed["image/id"] = tf.identity(parsed["image/id"])
    for key, value in parsed.items():
        if isinstance(value, tf.SparseTensor):
            parsed[key] = tf.sparse.to_dense(value)
    return parsed


def diagnose_shards(paths: Sequence[str], spec: Mapping, decode_images: bool = True) -> str | None:
    """Find the first unreadable shard or record: called after a read fails, so its cost is paid only then.

    Returns a message naming the file and record (and image key), or None if every record reads.
    """
    for path in paths:
        index = -1
        try:
            for index, record in enumerate(tf.data.TFRecordDataset(path)):
                try:
                    parsed = tf.io.parse_single_example(record, spec)
                except tf.errors.InvalidArgumentError as error:
                    return f"{path}: record {index} does not match the dataset's schema ({error.message.splitlines()[0]})."
                version = int(parsed["schema_version"])
                if version != SCHEMA_VERSION:
                    return f"{path}: record {index} has schema version {version}, expected {SCHEMA_VERSION}."
                if decode_images and "image/encoded" in parsed:
                    try:
                        tf.io.decode_image(parsed["image/encoded"], channels=3, expand_animations=False)
                    except tf.errors.InvalidArgumentError:
                        key = parsed["image/key"].numpy().decode("utf-8", "replace")
                        return f"{path}: record {index} (image '{key}') holds image bytes that do not decode."
        except tf.errors.DataLossError as error:
            return f"{path} is corrupt after record {index} ({error.message.splitlines()[0]}); rebuild the dataset."
    return None

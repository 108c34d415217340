"""The kitm TFRecord schema: one `tf.train.Example` per image (documented in tfrecords/README.md).

Version 1 features of every record:

| key                     | type          | content                                                      |
|-------------------------|---------------|--------------------------------------------------------------|
| schema_version          | int64 [1]     | SCHEMA_VERSION                                               |
| image/id                | int64 [1]     | the image's index in the dataset (0..N-1, unique)            |
| image/key               | bytes [1]     | the source's name for the image (file name, COCO id ...)     |
| split                   | bytes [1]     | train / val / test (restval folds into train at build time)  |
| image/encoded           | bytes [0|1]   | PNG or JPEG bytes (image datasets)                           |
| image/feature           | float [F]     | a precomputed image feature vector (feature datasets)        |
| image/regions           | float [R*F]   | precomputed region features, row-major (region datasets)     |
| image/regions_shape     | int64 [0|2]   | (R, F) of image/regions                                      |
| captions                | bytes [C]     | the image's captions, UTF-8                                  |
| caption/ids             | int64 [C]     | a dataset-wide id per caption (image/id * C + k for aligned) |
| relevance/<slot>/...    | any           | named relevance slots (tfrecords/README.md, kitm.relevance.slots) |

A dataset is a folder of shards plus `dataset.json` (`DatasetInfo`), written last, so a folder without it is
an unfinished build.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from typing import Any

import tensorflow as tf

from kitm.errors import KitmDataError
from kitm.files import write_text_atomically
# The relevance slots' record keys are defined beside the code that fills them (kitm.relevance.slots) and named
# here too, as part of the record schema, so a reader of records needs only this module.
from kitm.relevance.slots import (CIDER_ENTRIES, CIDER_HYPOTHESIS_WEIGHTS, CIDER_KEYS, CIDER_LENGTHS,  # noqa: F401
                                  CIDER_REFERENCE_WEIGHTS, IMAGE_NEIGHBOR_CAPTION_IDS, IMAGE_NEIGHBOR_SCORES,
                                  NEIGHBOR_CAPTION_IDS, NEIGHBOR_SCORES, NEIGHBOR_SLOTS, SBERT_EMBEDDINGS,
                                  TRUTH_CAPTION_FACTS, TRUTH_SCENE_FACTS)

SCHEMA_VERSION = 1
INFO_FILE = "dataset.json"
SPLITS = ("train", "val", "test")
# "none": a captions-only dataset (no image feature at all), for relevance and evaluation work; not trainable.
IMAGE_MODES = ("encoded", "feature", "regions", "none")


@dataclasses.dataclass
class DatasetInfo:
    """What `dataset.json` records about a built dataset."""

    name: str
    captions_per_image: int
    image_mode: str
    splits: dict[str, dict[str, Any]]  # split -> {"num_images": int, "shards": [file names], "bytes": [sizes]}
    image_size: int | None = None       # the stored images' side for synthetic data (informational)
    feature_dim: int | None = None      # F for feature / region datasets
    relevance: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)  # slot name -> its metadata
    source: dict[str, Any] = dataclasses.field(default_factory=dict)  # how it was built (command, seed, files)
    schema_version: int = SCHEMA_VERSION

    def shard_paths(self, root: str | os.PathLike, split: str) -> list[str]:
        if split not in self.splits:
            raise KitmDataError(
                f"Dataset '{self.name}' at {root} has no split '{split}'; it has {sorted(self.splits)}.")
        return [str(pathlib.Path(root) / name) for name in self.splits[split]["shards"]]

    def num_images(self, split: str) -> int:
        return int(self.splits[split]["num_images"])

    @property
    def truth_world(self) -> str | None:
        """The synthetic world whose truth facts the records carry ("things" or "shapes"), None without them. A
        dataset built before the things world records no world: it is a shapes world."""
        truth = self.relevance.get("truth")
        if truth is None:
            return None
        from kitm.relevance.world_truth import LEGACY_WORLD

        return str(truth.get("world", LEGACY_WORLD))

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)


def save_info(root: str | os.PathLike, info: DatasetInfo) -> None:
    write_text_atomically(pathlib.Path(root) / INFO_FILE, info.to_json())


def file_given_as_dataset(path: str | os.PathLike) -> str | None:
    """The message for a file given where a dataset folder is expected (None when `path` is no file): a caption
    table or a Karpathy split JSON gets the build command that turns it into a dataset, a dataset.json its folder.
    Saying only "dataset.json is missing" led users to pass the table as the build's --out, which then fails."""
    path = pathlib.Path(path)
    if not path.is_file():
        return None
    if path.name == INFO_FILE:
        return (f"{path} is a dataset's {INFO_FILE}, not its folder: give the folder that holds it, "
                f"{path.parent}.")
    out = pathlib.Path("tfrecords") / path.stem
    suffix = path.suffix.lower()
    if suffix in (".csv", ".tsv", ".jsonl", ".ndjson"):
        build = (f"python -m kitm.data.build --dataset=captions_table --captions={path} --out={out}  (add "
                 "--images=<folder> when its image paths are relative to another folder than the table's)")
        what = "a caption table"
    elif suffix == ".json":
        build = (f"python -m kitm.data.build --dataset=karpathy --karpathy_json={path} --images=<image folder> "
                 f"--out={out}")
        what = "a JSON file (a Karpathy split JSON?)"
    else:
        return (f"{path} is a file, not a dataset folder: kitm reads the folder that python -m kitm.data.build "
                f"writes ({INFO_FILE} and its shards).")
    return (f"{path} is {what}, not a dataset folder: kitm reads the folder that python -m kitm.data.build writes "
            f"({INFO_FILE} and its shards). Build it first:\n  {build}\nthen give {out} as the dataset folder.")


def load_info(root: str | os.PathLike) -> DatasetInfo:
    """Read and check `dataset.json`: present, parseable, this schema version, shards present and whole."""
    root = pathlib.Path(root)
    given_a_file = file_given_as_dataset(root)
    if given_a_file is not None:
        raise KitmDataError(given_a_file)
    path = root / INFO_FILE
    if not path.is_file():
        raise KitmDataError(f"No dataset at {root}: {path} is missing (an unfinished or absent build).")
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise KitmDataError(f"{path} is not valid JSON ({error}); rebuild the dataset.") from error
    version = raw.get("schema_version")
    if version != SCHEMA_VERSION:
        raise KitmDataError(
            f"{path} has schema version {version}; this kitm reads version {SCHEMA_VERSION}. "
            "Rebuild the dataset with this kitm's `python -m kitm.data.build`.")
    known = {field.name for field in dataclasses.fields(DatasetInfo)}
    unknown = set(raw) - known
    if unknown:
        raise KitmDataError(f"{path} has unknown fields {sorted(unknown)}.")
    try:
        info = DatasetInfo(**raw)
    except TypeError as error:
        raise KitmDataError(f"{path} is missing fields: {error}") from error
    for split, entry in info.splits.items():
        for name, size in zip(entry["shards"], entry["bytes"]):
            shard = root / name
            if not shard.is_file():
                raise KitmDataError(f"Shard {shard} of split '{split}' listed in {path} is missing.")
            if shard.stat().st_size != size:
                raise KitmDataError(
                    f"Shard {shard} has {shard.stat().st_size} bytes but {path} records {size}: "
                    "the file is truncated or was replaced; rebuild the dataset.")
    return info


def feature_spec(info: DatasetInfo) -> dict[str, Any]:
    """The parsing spec for records of this dataset."""
    spec: dict[str, Any] = {
        "schema_version": tf.io.FixedLenFeature([], tf.int64, default_value=-1),
        "image/id": tf.io.FixedLenFeature([], tf.int64),
        "image/key": tf.io.FixedLenFeature([], tf.string, default_value=""),
        "split": tf.io.FixedLenFeature([], tf.string, default_value=""),
        "captions": tf.io.FixedLenFeature([info.captions_per_image], tf.string),
        "caption/ids": tf.io.FixedLenFeature([info.captions_per_image], tf.int64),
    }
    if info.image_mode == "encoded":
        spec["image/encoded"] = tf.io.FixedLenFeature([], tf.string)
    elif info.image_mode == "feature":
        spec["image/feature"] = tf.io.FixedLenFeature([info.feature_dim], tf.float32)
    elif info.image_mode == "regions":
        spec["image/regions"] = tf.io.VarLenFeature(tf.float32)
        spec["image/regions_shape"] = tf.io.FixedLenFeature([2], tf.int64)
    elif info.image_mode != "none":
        raise KitmDataError(f"Unknown image_mode {info.image_mode!r}; expected one of {IMAGE_MODES}.")
    for slot, meta in info.relevance.items():
        for key, (dtype, length) in meta["features"].items():
            # A length of None marks a per-record variable length (parse_record densifies it).
            spec[key] = (tf.io.VarLenFeature(tf.as_dtype(dtype)) if length is None
                         else tf.io.FixedLenFeature([int(length)], tf.as_dtype(dtype)))
    return spec

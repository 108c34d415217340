"""The train/val/test split of a caption table's images: from its split column, or a seeded random draw of
`val_images` and `test_images` images (kitm.data.captions_table, "splits")."""

from __future__ import annotations

import collections
from typing import Any

import numpy as np

from kitm.data import schema
from kitm.errors import KitmDataError, option

SPLIT_VALUES = schema.SPLITS
MIN_TRAIN_IMAGES = 2
AUTO_SPLIT_FRACTION, AUTO_SPLIT_MIN, AUTO_SPLIT_MAX = 0.05, 2, 1000


def _split_size(value, num_images: int, name: str) -> int:
    """A --val_images / --test_images value (count, fraction or "auto") as a number of images."""
    if value is None or value == "auto":
        return int(min(AUTO_SPLIT_MAX, max(AUTO_SPLIT_MIN, round(AUTO_SPLIT_FRACTION * num_images))))
    if isinstance(value, str):
        try:
            value = float(value) if any(mark in value for mark in ".eE") else int(value)
        except ValueError:
            raise KitmDataError(f"{option(name)} must be a count of images, a fraction below 1 or auto; got "
                                f"{value!r}.") from None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or value < 0:
        raise KitmDataError(f"{option(name)} must be a count of images, a fraction below 1 or auto; got {value!r}.")
    if isinstance(value, (float, np.floating)):
        if value >= 1:
            raise KitmDataError(f"{option(name)}={value}: a fraction must be below 1 (give a count as a whole "
                                "number).")
        return int(max(1, round(value * num_images))) if value > 0 else 0
    return int(value)


def split_sizes(num_images: int, val_images="auto", test_images="auto") -> tuple[int, int]:
    """(val, test) image counts of the random split; stops when the training split would keep fewer than 2."""
    val = _split_size(val_images, num_images, "val_images")
    test = _split_size(test_images, num_images, "test_images")
    if num_images - val - test < MIN_TRAIN_IMAGES:
        raise KitmDataError(
            f"Too few images for the split: {num_images} image(s) cannot give {val} validation and {test} test "
            f"image(s) and keep {MIN_TRAIN_IMAGES} for training. Lower {option('val_images')} / "
            f"{option('test_images')} (0 for none), or add images.")
    return val, test


def random_split(num_images: int, val: int, test: int, seed: int) -> list[str]:
    """Each image's split: a seeded permutation's first `val` images are val, the next `test` test."""
    splits = np.full(num_images, "train", dtype=object)
    order = np.random.default_rng(seed).permutation(num_images)
    splits[order[:val]] = "val"
    splits[order[val:val + test]] = "test"
    return splits.tolist()


def table_splits(table_images, split_column: str | None, val_images, test_images, split_seed: int,
                 path) -> tuple[list[str], dict[str, Any]]:
    """Each image's split (from its rows' split column, or `random_split`) and the report of the split rule,
    with the images per split. Stops when the training split would keep fewer than MIN_TRAIN_IMAGES."""
    if split_column is not None:
        splits = [image.split for image in table_images]
        report = {"rule": "column", "column": split_column}
        present = collections.Counter(splits)
        if present["train"] < MIN_TRAIN_IMAGES:
            raise KitmDataError(f"Too few images for the split: column {split_column!r} of {path} puts "
                                f"{present['train']} image(s) in train (after the rules above); training needs at "
                                f"least {MIN_TRAIN_IMAGES}.")
    else:
        val, test = split_sizes(len(table_images), val_images, test_images)
        splits = random_split(len(table_images), val, test, split_seed)
        report = {"rule": "random", "seed": split_seed, "val_images": str(val_images or "auto"),
                  "test_images": str(test_images or "auto")}
    report["images"] = {split: splits.count(split) for split in SPLIT_VALUES if split in splits}
    return splits, report

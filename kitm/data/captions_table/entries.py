"""A caption table -> the converter's entries: read, grouped by image, missing images checked, the
captions-per-image rule and the split applied, with a report of every rule (kitm.data.captions_table)."""

from __future__ import annotations

import hashlib
import os
import pathlib
from collections.abc import Sequence
from typing import Any

from kitm.data.captions_table.checks import identical_across_splits, readable_images
from kitm.data.captions_table.grouping import TableImage, captions_rule, duplicate_report, group_rows
from kitm.data.captions_table.reading import _Where, read_table
from kitm.data.captions_table.splits import table_splits
from kitm.data.converter_common import Entry, check_policy, file_problem
from kitm.errors import KitmDataError, option


def load_table_entries(captions: str | os.PathLike, images: str | os.PathLike | None = None, *,
                       image_column: str = "filepath", caption_column: str = "title", split_column: str | None = None,
                       csv_separator: str = "auto", captions_format: str = "auto", captions_per_image="auto",
                       few_captions: str = "skip", empty_captions: str = "stop", missing_images: str = "stop",
                       val_images=None, test_images=None, split_seed: int = 0,
                       progress: bool = False) -> tuple[list[Entry], dict]:
    """The table's images as entries (location: the image file; key: its path as written) and a report of every
    rule applied (for the summary and dataset.json's `source`). See kitm.data.captions_table for the rules.

    Every image is decoded once here, before anything is written (`checks.readable_images`), so an image that does
    not decode stops the build naming its row, or is left out and listed with ``missing_images="skip"``.
    """
    check_policy("missing_images", missing_images)
    path = pathlib.Path(captions)
    root = pathlib.Path(images) if images is not None else path.resolve().parent
    if images is not None and not root.is_dir():
        raise KitmDataError(f"Image folder {root} does not exist.")
    if split_column is not None and not (val_images is None and test_images is None):
        raise KitmDataError(f"{option('split_column')}={split_column} gives the splits; {option('val_images')} and "
                            f"{option('test_images')} are for the random split without it.")
    digest = hashlib.sha256()
    rows, table = read_table(path, image_column=image_column, caption_column=caption_column,
                             split_column=split_column, csv_separator=csv_separator, captions_format=captions_format,
                             digest=digest)
    where = _Where(path, table["format"], {"image": image_column, "caption": caption_column, "split": split_column})
    table_images, counts = group_rows(rows, root, where, empty_captions=empty_captions)
    report: dict[str, Any] = {"captions": str(path), "captions_sha256": digest.hexdigest(), **table,
                              "images": str(root), "image_column": image_column, "caption_column": caption_column,
                              "split_column": split_column, "rows": int(counts["rows"]),
                              "images_in_table": len(table_images),
                              "empty_captions_dropped": int(counts["empty_captions_dropped"])}
    table_images, report["skipped_missing"] = _present_images(table_images, missing_images, where)
    table_images, report["skipped_unreadable"], report["unreadable_images"] = readable_images(
        table_images, missing_images, where, progress=progress)
    report["duplicates"] = duplicate_report(table_images)
    table_images, report["caption_rule"] = captions_rule(table_images, captions_per_image, few_captions, where, path)
    splits, report["split"] = table_splits(table_images, split_column, val_images, test_images, split_seed, path)
    report["identical_across_splits"] = identical_across_splits(table_images, splits)
    entries = [Entry(key=image.key, split=split, captions=image.captions, location=(image.path, image.line))
               for image, split in zip(table_images, splits)]
    return entries, report


def _present_images(table_images: Sequence[TableImage], missing_images: str,
                    where: _Where) -> tuple[list[TableImage], int]:
    """The images whose file exists (a regular file), and how many do not; a missing one (or a folder, a link loop:
    `file_problem` says which) stops the build naming its first row unless `missing_images` is "skip"."""
    problems = [(image, file_problem(image.path)) for image in table_images]
    absent = [(image, problem) for image, problem in problems if problem is not None]
    if absent and missing_images == "stop":
        first, problem = absent[0]
        what = ("missing" if all(problem == "does not exist" for _, problem in absent)
                else "missing or not image files")
        raise KitmDataError(f"{where(first.line, 'image')}: image {first.path} {problem} ({len(absent)} of the "
                            f"table's images are {what}); pass {option('missing_images')}=skip to leave them out.")
    if absent:
        gone = {id(image) for image, _ in absent}
        table_images = [image for image in table_images if id(image) not in gone]
    return table_images, len(absent)

"""A caption table's rows grouped into images (one pass, a dict by resolved path), the captions-per-image rule
applied to them, and the rows that repeat an earlier row exactly (kitm.data.captions_table, "images" and "captions
per image")."""

from __future__ import annotations

import collections
import dataclasses
import os
import pathlib
from collections.abc import Iterator, Sequence
from typing import Any

from kitm.data.captions_table.reading import TableRow, _Where
from kitm.data.captions_table.splits import SPLIT_VALUES
from kitm.data.converter_common import check_policy, control_character
from kitm.errors import KitmDataError, option

FEW_CAPTION_POLICIES = ("skip", "repeat", "stop")


@dataclasses.dataclass
class TableImage:
    """An image of the table: `key` (its path as first written), `path` (resolved), `line` (its first row),
    its captions in file order, its split (None without a split column)."""

    key: str
    path: pathlib.Path
    line: int
    captions: list[str] = dataclasses.field(default_factory=list)
    split: str | None = None
    split_line: int = 0
    caption_lines: dict[str, int] = dataclasses.field(default_factory=dict)  # caption -> the line it is first on
    duplicates: list[tuple[int, int]] = dataclasses.field(default_factory=list)  # (line, the line it repeats)
    sha256: str | None = None  # of the file's bytes, once decoded (kitm.data.captions_table.checks)


def group_rows(rows: Iterator[TableRow], root: pathlib.Path, where: _Where, *,
               empty_captions: str = "stop") -> tuple[list[TableImage], collections.Counter]:
    """The table's images in order of first appearance, their rows grouped by resolved path (a dict, one pass)."""
    check_policy("empty_captions", empty_captions)
    images: dict[str, TableImage] = {}
    counts: collections.Counter = collections.Counter()
    for row in rows:
        counts["rows"] += 1
        image = row.image.strip()
        if not image:
            raise KitmDataError(f"{where(row.line, 'image')}: the image path is empty.")
        for role, text in (("image", image), ("caption", row.caption)):
            control = control_character(text)
            if control is not None:
                raise KitmDataError(
                    f"{where(row.line, role)}: the {role if role == 'caption' else 'image path'} holds control "
                    f"character {control} ({text[:60]!r}); remove it from the table (a NUL often means a file saved "
                    "as UTF-16, or binary data pasted into a cell).")
        resolved = os.path.normpath(os.path.join(root, image))  # an absolute path stays itself
        entry = images.get(resolved)
        if entry is None:
            entry = images[resolved] = TableImage(key=image, path=pathlib.Path(resolved), line=row.line)
        if row.split is not None:
            split = row.split.strip()
            if split not in SPLIT_VALUES:
                raise KitmDataError(f"{where(row.line, 'split')}: split {row.split!r} is not one of "
                                    f"{', '.join(SPLIT_VALUES)}.")
            if entry.split is None:
                entry.split, entry.split_line = split, row.line
            elif entry.split != split:
                raise KitmDataError(f"{where(row.line, 'split')}: image {image} is in split {split!r} here but "
                                    f"{entry.split!r} on line {entry.split_line}; all rows of an image need one "
                                    "split.")
        caption = row.caption.strip()
        if not caption:
            if empty_captions == "stop":
                raise KitmDataError(f"{where(row.line, 'caption')}: the caption of image {image} is "
                                    f"empty ({row.caption!r}); pass {option('empty_captions')}=skip to drop empty "
                                    "captions.")
            counts["empty_captions_dropped"] += 1
            continue
        first = entry.caption_lines.setdefault(caption, row.line)
        if first != row.line:
            entry.duplicates.append((row.line, first))
        entry.captions.append(caption)
    if not images:
        raise KitmDataError(f"{where.path} has no rows below its header." if where.field == "column"
                            else f"{where.path} has no rows.")
    return list(images.values()), counts


def auto_captions_per_image(counts: Sequence[int]) -> int:
    """The caption count that the most images have exactly (ties: the smaller), images without captions aside."""
    histogram = collections.Counter(count for count in counts if count > 0)
    if not histogram:
        raise KitmDataError("No image has a caption.")
    return min(histogram, key=lambda count: (-histogram[count], count))


def apply_caption_rule(images: Sequence[TableImage], captions_per_image: int, few_captions: str,
                       where: _Where) -> tuple[list[TableImage], dict[str, int]]:
    """Each image with exactly `captions_per_image` captions (kitm.data.captions_table), and the counts of what
    changed."""
    if few_captions not in FEW_CAPTION_POLICIES:
        raise KitmDataError(f"{option('few_captions')} must be one of {FEW_CAPTION_POLICIES} for a caption table; "
                            f"got {few_captions!r}.")
    c = captions_per_image
    counts = collections.Counter()
    kept = []
    for image in images:
        n = len(image.captions)
        if n > c:
            counts["images_with_extra_captions"] += 1
            if len(set(image.captions)) <= c:
                counts["images_with_extra_captions_only_by_duplicates"] += 1
            counts["extra_captions_dropped"] += n - c
            image.captions = image.captions[:c]
        elif n < c:
            if n == 0 or few_captions == "skip":
                counts["images_left_out_with_fewer_captions"] += 1
                continue
            if few_captions == "stop":
                raise KitmDataError(f"{where(image.line, 'image')}: image {image.key} has {n} caption(s); this build "
                                    f"keeps {c} per image. Pass {option('few_captions')}=skip to leave such images "
                                    f"out, {option('few_captions')}=repeat to repeat their captions, or a smaller "
                                    f"{option('captions_per_image')}.")
            counts["images_with_repeated_captions"] += 1
            counts["repeated_captions"] += c - n
            image.captions = [image.captions[k % n] for k in range(c)]
        kept.append(image)
    names = ("images_with_extra_captions", "images_with_extra_captions_only_by_duplicates", "extra_captions_dropped",
             "images_left_out_with_fewer_captions", "images_with_repeated_captions", "repeated_captions")
    return kept, {name: int(counts[name]) for name in names}


def duplicate_report(images: Sequence[TableImage], examples: int = 3) -> dict[str, Any]:
    """Rows that repeat an earlier row's image and caption exactly (a table concatenated twice, a join gone wrong):
    their count, the images they touch, and the first few as "line L repeats line F". They stay captions of their
    own (an annotator may write the same sentence twice); the report says they are copies, not extra captions."""
    pairs = [pair for image in images for pair in image.duplicates]
    touched = [image for image in images if image.duplicates]
    return {"rows": len(pairs), "images": len(touched),
            "examples": [f"line {line} repeats line {first}" for line, first in sorted(pairs)[:examples]]}


def captions_rule(table_images: Sequence[TableImage], captions_per_image, few_captions: str, where: _Where,
                  path: pathlib.Path) -> tuple[list[TableImage], dict[str, Any]]:
    """C (given, or `auto_captions_per_image`) applied to every image (`apply_caption_rule`), and the report of
    the rule: C, what was asked, the images by caption count before the rule, and what changed. Stops when no
    image is left."""
    histogram = collections.Counter(len(image.captions) for image in table_images)
    if captions_per_image in (None, "auto"):
        chosen = auto_captions_per_image([len(image.captions) for image in table_images])
    else:
        try:
            chosen = int(captions_per_image)
        except (TypeError, ValueError):
            chosen = 0
        if chosen < 1:
            raise KitmDataError(f"{option('captions_per_image')} must be at least 1 or auto; got {captions_per_image}.")
    table_images, rule_counts = apply_caption_rule(table_images, chosen, few_captions, where)
    rule = {"captions_per_image": chosen, "requested": str(captions_per_image or "auto"),
            "few_captions": few_captions,
            "images_by_caption_count": {str(k): int(v) for k, v in sorted(histogram.items())},
            **rule_counts}
    if not table_images:
        raise KitmDataError(f"No image of {path} is left with {chosen} caption(s) (images by caption count: "
                            f"{dict(sorted(histogram.items()))}).")
    return table_images, rule

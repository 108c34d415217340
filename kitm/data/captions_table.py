"""Your own data: a table of image paths and captions (open_clip's CSV, or JSON Lines) + images -> TFRecords.

The two formats people bring from open_clip and sentence-transformers:

* **CSV**: a header row, then one row per (image, caption) pair. Columns are named by `image_column` and
  `caption_column`; the defaults are open_clip's (`--csv-img-key filepath`, `--csv-caption-key title`).
  open_clip reads its "csv" files with a tab separator by default (`--csv-separator "\\t"`), spreadsheets and
  pandas write commas: `csv_separator="auto"` takes a tab when the header line holds one, else a comma; give
  ``","``, ``"\\t"`` (or ``"tab"``), ``";"``... to fix it. Quoting follows the `csv` module's default dialect
  (double quotes, as pandas), so captions may hold separators, quotes and line breaks.
* **JSON Lines**: one JSON object per line with the same keys (blank lines are skipped).

The format follows the file name (.csv, .tsv -> CSV; .jsonl, .ndjson -> JSON Lines) unless `captions_format` says.
The file is read once, streaming, as UTF-8 (a byte-order mark is allowed); its SHA-256 goes into the build's
parameters, so a resumed build on an edited table stops instead of mixing two tables.

Rules, each printed in the build's summary and stored under `source` in dataset.json:

* **images**: rows are grouped by image path (any number of rows per image, in any order); an image's captions
  keep the file's order, image ids follow the order of first appearance. A path is absolute, or relative to
  `images` (the image folder), or, without `images`, to the table's own folder, so that a table kept beside its
  images builds from any working directory (open_clip opens paths relative to where it runs: give
  ``--images=<that folder>``). An image file that is absent stops the build naming the row, or
  (``missing_images="skip"``) is left out and counted; one that does not decode, or is in a format TensorFlow does
  not decode (TIFF, HEIC...), stops the build naming the row when its shard is written.
* **captions per image** C (the records hold exactly C per image): ``captions_per_image="auto"`` takes the count
  that the most images have exactly (ties: the smaller count), which changes the fewest images: COCO's five with a
  few sixes and sevens gives 5, a one-caption-per-image web table gives 1. An image with more than C keeps its first
  C in file order (the rest are counted as dropped captions). An image with fewer than C: ``few_captions="skip"``
  (the default here) leaves it out and counts it; ``"repeat"`` fills it up by repeating its captions cyclically
  (a, b -> a, b, a, b, a), counted as images with repeated captions, because a repeated caption is a second copy of
  the same query and inflates caption-to-image R@K a little; ``"stop"`` stops naming the image's first row.
  Empty captions stop the build naming the row (``empty_captions="skip"``: dropped and counted before the rule).
  Rows that repeat an earlier row's image and caption exactly are reported as duplicates (a count and the first
  lines, "line 12 repeats line 2"), not only as images with extra captions; they are kept as captions.
* **splits**: with `split_column`, each row's value must be train, val or test and all rows of an image agree.
  Without it, a seeded random split by image (`split_seed`) draws `val_images` and `test_images` images: a count
  (``500``), a fraction (``0.1``), or ``"auto"`` (5% of the images, at least 2 and at most 1,000: the size of the
  Flickr and COCO 1K test sets, beyond which evaluation's image-by-caption matrix only grows), or 0 for none. The
  draw depends only on the images left after the rules above and the seed. Each split keeps the table's order.
  The training split must keep at least 2 images.

Nothing here does per-pair work; the parse loop is per row and groups with a dict.
"""

from __future__ import annotations

import collections
import csv
import dataclasses
import hashlib
import itertools
import json
import os
import pathlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from PIL import Image, UnidentifiedImageError

from kitm.data import schema
from kitm.data.converter_common import (Entry, build_parameters, check_policy, limit_per_split, write_dataset)
from kitm.errors import KitmDataError, option
from kitm.relevance.image_features import ImageFiles, ImageNeighborOptions
from kitm.relevance.rows import DEFAULT_NEIGHBORS_K, ROW_SOURCES

__all__ = ["FORMATS", "FEW_CAPTION_POLICIES", "TableRow", "TableImage", "read_table", "group_rows",
           "auto_captions_per_image", "apply_caption_rule", "split_sizes", "random_split", "load_table_entries",
           "build_captions_table"]

FORMATS = ("auto", "csv", "jsonl")
FEW_CAPTION_POLICIES = ("skip", "repeat", "stop")
SPLIT_VALUES = schema.SPLITS
# PIL's names for the formats tf.io.decode_image reads (MPO: a phone's multi-picture JPEG, decoded as JPEG).
DECODABLE_FORMATS = ("JPEG", "MPO", "PNG", "GIF", "BMP", "WEBP")
MIN_TRAIN_IMAGES = 2
AUTO_SPLIT_FRACTION, AUTO_SPLIT_MIN, AUTO_SPLIT_MAX = 0.05, 2, 1000


@dataclasses.dataclass
class TableRow:
    """One (image, caption) row: its line number (the first line of a quoted multi-line CSV record)."""

    line: int
    image: str
    caption: str
    split: str | None = None


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


class _Where:
    """Names a place in the table: "<file>, line N, column 'title'" (CSV) or "..., key 'title'" (JSON Lines);
    `role` is image, caption or split (the column named by that option) or a column name itself."""

    def __init__(self, path: pathlib.Path, fmt: str, columns: dict[str, str | None]):
        self.path, self.field, self.columns = path, "column" if fmt == "csv" else "key", columns

    def __call__(self, line: int, role: str | None = None) -> str:
        if role is None:
            return f"{self.path}, line {line}"
        return f"{self.path}, line {line}, {self.field} {self.columns.get(role, role)!r}"


def table_format(path: pathlib.Path, captions_format: str) -> str:
    if captions_format not in FORMATS:
        raise KitmDataError(f"{option('captions_format')} must be one of {FORMATS}; got {captions_format!r}.")
    if captions_format != "auto":
        return captions_format
    suffix = path.suffix.lower()
    if suffix in (".csv", ".tsv"):
        return "csv"
    if suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    raise KitmDataError(f"{path}: cannot tell the table's format from its name (expected .csv, .tsv, .jsonl or "
                        f".ndjson); give {option('captions_format')}=csv or jsonl.")


def separator_of(text: str) -> str | None:
    """A --csv_separator value as one character (None for auto); "tab" and a typed backslash-t mean a tab."""
    if text in ("auto", None):
        return None
    text = {"tab": "\t", "\\t": "\t", "comma": ",", "semicolon": ";", "space": " "}.get(text, text)
    if len(text) != 1:
        raise KitmDataError(f"{option('csv_separator')} must be one character (or auto, tab); got {text!r}.")
    return text


def _hashed_lines(handle, digest, where: pathlib.Path) -> Iterator[str]:
    """The binary file's lines as text (line ends kept, a leading byte-order mark dropped), each also fed to
    `digest`. Decoding line by line names the exact line that is not UTF-8."""
    for line, data in enumerate(handle, start=1):
        digest.update(data)
        try:
            text = data.decode("utf-8-sig" if line == 1 else "utf-8")
        except UnicodeDecodeError as error:
            raise KitmDataError(f"{where}, line {line} is not UTF-8 text ({error.reason} at byte {error.start} of "
                                "the line); save the table as UTF-8.") from None
        yield text


def _read_csv(path: pathlib.Path, lines: Iterator[str], columns: dict[str, str | None], separator: str | None,
              where: _Where) -> tuple[Iterator[TableRow], str]:
    try:
        first = next(lines)
    except StopIteration:
        raise KitmDataError(f"{path} is empty: expected a header row naming the columns.") from None
    if separator is None:
        separator = "\t" if "\t" in first else ","
    reader = csv.reader(itertools.chain([first], lines), delimiter=separator)
    header = next(reader)
    positions: dict[str, int] = {}
    for index, name in enumerate(header):
        if name in positions:
            raise KitmDataError(f"{where(1)}: the header names column {name!r} twice (columns "
                                f"{positions[name] + 1} and {index + 1}); each column needs its own name.")
        positions[name] = index
    shown = "tab" if separator == "\t" else repr(separator)
    for role, name in columns.items():
        if name is not None and name not in positions:
            raise KitmDataError(
                f"{where(1, role)}: no such column (the {role} column); the header has {header} when split at "
                f"{shown}. Name the right one with {option(role + '_column')}=..."
                + ("" if len(header) > 1 else f", or give the separator with {option('csv_separator')}") + ".")
    wanted = {role: positions[name] for role, name in columns.items() if name is not None}

    def rows():
        start = reader.line_num + 1
        for record in reader:
            if not record:  # a blank line
                start = reader.line_num + 1
                continue
            if len(record) != len(header):
                raise KitmDataError(f"{where(start)}: {len(record)} field(s) where the header has {len(header)} "
                                    f"(separator {shown}; quote fields that hold it).")
            yield TableRow(start, record[wanted["image"]], record[wanted["caption"]],
                           record[wanted["split"]] if "split" in wanted else None)
            start = reader.line_num + 1

    return rows(), separator


def _read_jsonl(lines: Iterator[str], columns: dict[str, str | None], where: _Where) -> Iterator[TableRow]:
    for line_number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            record = json.loads(text.rstrip("\r\n"))
        except json.JSONDecodeError as error:
            raise KitmDataError(f"{where(line_number)}: not valid JSON ({error.msg} at character {error.colno})."
                                ) from None
        if not isinstance(record, dict):
            raise KitmDataError(f"{where(line_number)}: expected a JSON object, got {type(record).__name__} "
                                f"({text.strip()[:60]!r}).")
        values = {}
        for role, name in columns.items():
            if name is None:
                continue
            if name not in record:
                raise KitmDataError(f"{where(line_number, role)}: no such key (the {role} key; the object has "
                                    f"{sorted(record)}). Name the right one with {option(role + '_column')}=...")
            value = record[name]
            if not isinstance(value, str):
                raise KitmDataError(f"{where(line_number, role)}: expected text, got {json.dumps(value)[:60]}.")
            values[role] = value
        yield TableRow(line_number, values["image"], values["caption"], values.get("split"))


def read_table(path: str | os.PathLike, *, image_column: str = "filepath", caption_column: str = "title",
               split_column: str | None = None, csv_separator: str = "auto", captions_format: str = "auto",
               digest=None) -> tuple[Iterator[TableRow], dict[str, Any]]:
    """Stream the table's rows (file order) and describe the table ({"format", "csv_separator"}).

    Rows are parsed as they are iterated; `digest` (a hashlib object) sees every line.
    """
    path = pathlib.Path(path)
    if path.is_dir():
        raise KitmDataError(_folder_given(path))
    if not path.is_file():
        raise KitmDataError(f"Caption table {path} does not exist.")
    fmt = table_format(path, captions_format)
    separator = separator_of(csv_separator)
    columns = {"image": image_column, "caption": caption_column, "split": split_column}
    where = _Where(path, fmt, columns)
    digest = digest if digest is not None else hashlib.sha256()
    # Binary lines split at "\n" only, so the csv module sees "\r\n" and quoted line breaks as written (as
    # newline="" would give it).
    handle = open(path, "rb")
    lines = _hashed_lines(handle, digest, path)

    def closing(rows):
        with handle:
            yield from rows

    if fmt == "csv":
        try:
            rows, separator = _read_csv(path, lines, columns, separator, where)
        except BaseException:
            handle.close()
            raise
        return closing(rows), {"format": "csv", "csv_separator": separator}
    return closing(_read_jsonl(lines, columns, where)), {"format": "jsonl", "csv_separator": None}


def _folder_given(path: pathlib.Path) -> str:
    """The message for a folder given where the table file is expected, naming the tables inside it if any."""
    tables = sorted(child.name for child in path.iterdir()
                    if child.is_file() and child.suffix.lower() in (".csv", ".tsv", ".jsonl", ".ndjson"))
    inside = (f"; it holds {', '.join(tables[:5])}{', ...' if len(tables) > 5 else ''}: give one of them, e.g. "
              f"{option('captions')}={path / tables[0]}" if tables else "; it holds no .csv, .tsv, .jsonl or .ndjson "
              "file")
    return (f"Caption table {path} is a folder, not a table: {option('captions')} expects the table file itself (a "
            f".csv/.tsv with a header row, or .jsonl/.ndjson with one object per line){inside}. The image folder goes "
            f"to {option('images')}.")


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
    """Each image with exactly `captions_per_image` captions (module docstring), and the counts of what changed."""
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


def load_table_entries(captions: str | os.PathLike, images: str | os.PathLike | None = None, *,
                       image_column: str = "filepath", caption_column: str = "title", split_column: str | None = None,
                       csv_separator: str = "auto", captions_format: str = "auto", captions_per_image="auto",
                       few_captions: str = "skip", empty_captions: str = "stop", missing_images: str = "stop",
                       val_images=None, test_images=None, split_seed: int = 0) -> tuple[list[Entry], dict]:
    """The table's images as entries (location: the image file; key: its path as written) and a report of every
    rule applied (for the summary and dataset.json's `source`). See the module docstring for the rules."""
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

    absent = [image for image in table_images if not image.path.is_file()]
    if absent and missing_images == "stop":
        first = absent[0]
        raise KitmDataError(f"{where(first.line, 'image')}: image {first.path} does not exist ({len(absent)} of the "
                            f"table's images are missing); pass {option('missing_images')}=skip to leave them out.")
    if absent:
        gone = {id(image) for image in absent}
        table_images = [image for image in table_images if id(image) not in gone]
    report["skipped_missing"] = len(absent)
    report["duplicates"] = duplicate_report(table_images)

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
    report["caption_rule"] = {"captions_per_image": chosen, "requested": str(captions_per_image or "auto"),
                              "few_captions": few_captions,
                              "images_by_caption_count": {str(k): int(v) for k, v in sorted(histogram.items())},
                              **rule_counts}
    if not table_images:
        raise KitmDataError(f"No image of {path} is left with {chosen} caption(s) (images by caption count: "
                            f"{dict(sorted(histogram.items()))}).")

    if split_column is not None:
        splits = [image.split for image in table_images]
        report["split"] = {"rule": "column", "column": split_column}
        present = collections.Counter(splits)
        if present["train"] < MIN_TRAIN_IMAGES:
            raise KitmDataError(f"Too few images for the split: column {split_column!r} of {path} puts "
                                f"{present['train']} image(s) in train (after the rules above); training needs at "
                                f"least {MIN_TRAIN_IMAGES}.")
    else:
        val, test = split_sizes(len(table_images), val_images, test_images)
        splits = random_split(len(table_images), val, test, split_seed)
        report["split"] = {"rule": "random", "seed": split_seed, "val_images": str(val_images or "auto"),
                           "test_images": str(test_images or "auto")}
    report["split"]["images"] = {split: splits.count(split) for split in SPLIT_VALUES if split in splits}
    entries = [Entry(key=image.key, split=split, captions=image.captions, location=(image.path, image.line))
               for image, split in zip(table_images, splits)]
    return entries, report


def duplicate_report(images: Sequence[TableImage], examples: int = 3) -> dict[str, Any]:
    """Rows that repeat an earlier row's image and caption exactly (a table concatenated twice, a join gone wrong):
    their count, the images they touch, and the first few as "line L repeats line F". They stay captions of their
    own (an annotator may write the same sentence twice); the report says they are copies, not extra captions."""
    pairs = [pair for image in images for pair in image.duplicates]
    touched = [image for image in images if image.duplicates]
    return {"rows": len(pairs), "images": len(touched),
            "examples": [f"line {line} repeats line {first}" for line, first in sorted(pairs)[:examples]]}


def print_report(report: dict[str, Any]) -> None:
    """The build's summary of the rules: what was read, chosen, cut, dropped, repeated and how it was split."""
    rule = report["caption_rule"]
    c = rule["captions_per_image"]
    separator = {None: "", "\t": ", tab-separated"}.get(report["csv_separator"],
                                                        f", separator {report['csv_separator']!r}")
    print(f"Read {report['rows']} row(s) of {report['captions']} ({report['format']}{separator}): "
          f"{report['images_in_table']} image(s); images by caption count {rule['images_by_caption_count']}.")
    if report["empty_captions_dropped"]:
        print(f"Dropped {report['empty_captions_dropped']} empty caption(s) (--empty_captions=skip).")
    if report["skipped_missing"]:
        print(f"Left out {report['skipped_missing']} image(s) missing on disk (--missing_images=skip).")
    duplicates = report.get("duplicates") or {"rows": 0}
    if duplicates["rows"]:
        print(f"{duplicates['rows']} duplicated row(s): they repeat an earlier row's image and caption exactly "
              f"({duplicates['images']} image(s); {'; '.join(duplicates['examples'])}"
              f"{'; ...' if duplicates['rows'] > len(duplicates['examples']) else ''}). They count as captions "
              "below; if the copies are a mistake (a table concatenated twice), remove them from the table.")
    how = "the most common count (--captions_per_image=auto)" if rule["requested"] == "auto" else "--captions_per_image"
    print(f"Captions per image: {c}, {how}.")
    if rule["images_with_extra_captions"]:
        copies = rule.get("images_with_extra_captions_only_by_duplicates", 0)
        print(f"{rule['images_with_extra_captions']} image(s) have more than {c}: they keep their first {c} "
              f"({rule['extra_captions_dropped']} caption(s) dropped)"
              + (f"; {copies} of them only through duplicated rows." if copies else "."))
    if rule["images_left_out_with_fewer_captions"]:
        print(f"Left out {rule['images_left_out_with_fewer_captions']} image(s) with fewer than {c} caption(s) "
              f"(--few_captions={rule['few_captions']}).")
    if rule["images_with_repeated_captions"]:
        print(f"{rule['images_with_repeated_captions']} image(s) have fewer than {c} caption(s): filled by repeating "
              f"them ({rule['repeated_captions']} repeated caption(s), --few_captions=repeat); repeated captions "
              "inflate caption-to-image R@K a little.")
    split = report["split"]
    how = (f"from column {split['column']!r}" if split["rule"] == "column"
           else f"random by image, --split_seed={split['seed']}")
    print(f"Splits ({how}): " + ", ".join(f"{name} {count}" for name, count in split["images"].items()) + ".")


def read_table_image(entry: Entry, where: _Where) -> bytes:
    """The image file's bytes, checked to decode in a format TensorFlow reads; errors name the table row."""
    path, line = entry.location
    try:
        with Image.open(path) as image:
            fmt = image.format
            image.verify()
    except (UnidentifiedImageError, OSError, SyntaxError) as error:
        raise KitmDataError(f"{where(line, 'image')}: image {path} does not decode ({error}).") from error
    if fmt not in DECODABLE_FORMATS:
        raise KitmDataError(f"{where(line, 'image')}: image {path} is {fmt}; TensorFlow decodes JPEG, PNG, GIF, BMP "
                            "and WebP: convert it, or remove its rows.")
    return path.read_bytes()


def build_captions_table(out: str | os.PathLike, captions: str | os.PathLike, images: str | os.PathLike | None = None,
                         *, image_column: str = "filepath", caption_column: str = "title",
                         split_column: str | None = None, csv_separator: str = "auto", captions_format: str = "auto",
                         captions_per_image="auto", few_captions: str = "skip", val_images=None, test_images=None,
                         split_seed: int = 0, num_shards: int = 16, missing_images: str = "stop",
                         empty_captions: str = "stop", limit: int | None = None,
                         relevance: Sequence[str] = ROW_SOURCES, sentence_model: str | None = None,
                         neighbors_k: int = DEFAULT_NEIGHBORS_K, progress: bool = True,
                         image_neighbors: ImageNeighborOptions | None = None) -> schema.DatasetInfo:
    """Write the table's images (bytes as on disk) and captions with relevance rows under `out`, resumably.

    The dataset's name is `out`'s folder name. See the module docstring for the rules and
    `kitm.data.converter_common` for the limit, relevance and resume rules every converter shares.
    """
    entries, report = load_table_entries(
        captions, images, image_column=image_column, caption_column=caption_column, split_column=split_column,
        csv_separator=csv_separator, captions_format=captions_format, captions_per_image=captions_per_image,
        few_captions=few_captions, empty_captions=empty_captions, missing_images=missing_images,
        val_images=val_images, test_images=test_images, split_seed=split_seed)
    print_report(report)
    entries = limit_per_split(entries, limit)
    c = report["caption_rule"]["captions_per_image"]
    parameters = build_parameters(
        "captions_table", num_shards=num_shards, empty_captions=empty_captions, few_captions=few_captions,
        limit=limit, relevance=relevance, sentence_model=sentence_model, neighbors_k=neighbors_k,
        image_neighbors=image_neighbors, captions=os.path.abspath(captions),
        captions_sha256=report["captions_sha256"], images=os.path.abspath(report["images"]),
        image_column=image_column, caption_column=caption_column, split_column=split_column,
        csv_separator=report["csv_separator"], captions_format=report["format"],
        captions_per_image=report["caption_rule"]["requested"], missing_images=missing_images,
        split=report["split"]["rule"], val_images=report["split"].get("val_images"),
        test_images=report["split"].get("test_images"), split_seed=report["split"].get("seed"))
    where = _Where(pathlib.Path(captions), report["format"],
                   {"image": image_column, "caption": caption_column, "split": split_column})
    return write_dataset(
        out, entries, name=pathlib.Path(out).name, parameters=parameters, image_mode="encoded",
        image_of=lambda entry: {"image_encoded": read_table_image(entry, where)}, captions_per_image=c,
        relevance=relevance, sentence_model=sentence_model, neighbors_k=neighbors_k, num_shards=num_shards,
        progress=progress, image_neighbors=image_neighbors,
        image_input=lambda split, members: ImageFiles([str(entry.location[0]) for entry in members]),
        source={**report, "limit": limit})

"""A caption table -> TFRecords: its entries (kitm.data.captions_table.entries), each image checked to decode, and
the converters' shared writer (kitm.data.converter_common)."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Sequence

from PIL import Image, UnidentifiedImageError

from kitm.data import schema
from kitm.data.captions_table.checks import DECODABLE_FORMATS
from kitm.data.captions_table.entries import load_table_entries
from kitm.data.captions_table.reading import _Where
from kitm.data.captions_table.report import print_report
from kitm.data.converter_common import Entry, build_parameters, limit_per_split, write_dataset
from kitm.errors import KitmDataError
from kitm.relevance.image_features import ImageFiles, ImageNeighborOptions
from kitm.relevance.rows import DEFAULT_NEIGHBORS_K, ROW_SOURCES


def read_table_image(entry: Entry, where: _Where) -> bytes:
    """The image file's bytes, checked again (headers only: `load_table_entries` decoded every image) in case the
    file changed since; errors name the table row."""
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

    The dataset's name is `out`'s folder name. See kitm.data.captions_table for the rules and
    `kitm.data.converter_common` for the limit, relevance and resume rules every converter shares.
    """
    entries, report = load_table_entries(
        captions, images, image_column=image_column, caption_column=caption_column, split_column=split_column,
        csv_separator=csv_separator, captions_format=captions_format, captions_per_image=captions_per_image,
        few_captions=few_captions, empty_captions=empty_captions, missing_images=missing_images,
        val_images=val_images, test_images=test_images, split_seed=split_seed, progress=progress)
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

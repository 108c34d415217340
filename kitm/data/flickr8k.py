"""The Flickr8K distribution's own text files (Hodosh, Young & Hockenmaier 2013) -> TFRecords.

Files read from `--flickr8k_dir` (as in the Flickr8k_text archive; readme.txt there):

* ``Flickr8k.token.txt``: one caption per line, ``<image file name>#<k>\\t<caption>`` with k = 0..4;
* ``Flickr_8k.trainImages.txt``, ``Flickr_8k.devImages.txt``, ``Flickr_8k.testImages.txt``: one image file name
  per line (6000 / 1000 / 1000); dev becomes kitm's val split.

The token file names a few images that no split list holds (93 in the public files, among them a stray
``2258277193_586949ec62.jpg.1``); they are left out and counted. Images are optional: without `--images` the
dataset is captions-only (image_mode "none"), enough for relevance rows and caption-side evaluation; with
`--images=<Flicker8k_Dataset>` the JPEG bytes are stored. Image ids follow the split lists: train, then val, then
test, each in its file's order.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Sequence

from kitm.data import schema
from kitm.data.converter_common import (CaptionRules, Entry, drop_missing_images, limit_per_split, image_file_input,
                                        image_files, build_parameters, read_text_lines,
                                        write_dataset)
from kitm.errors import KitmDataError
from kitm.relevance.image_features import ImageNeighborOptions
from kitm.relevance.rows import DEFAULT_NEIGHBORS_K, ROW_SOURCES

__all__ = ["TOKEN_FILE", "SPLIT_FILES", "read_token_file", "read_split_lists", "load_flickr8k_entries",
           "build_flickr8k"]

TOKEN_FILE = "Flickr8k.token.txt"
SPLIT_FILES = {"train": "Flickr_8k.trainImages.txt", "val": "Flickr_8k.devImages.txt",
               "test": "Flickr_8k.testImages.txt"}


def read_token_file(path: str | os.PathLike) -> dict[str, list[tuple[int, str]]]:
    """Image file name -> [(caption number k, caption)] sorted by k, in the token file's image order.

    A line that is not ``<image>#<k>\\t<caption>`` is an error naming the file and the line number (blank lines
    are skipped); so is a caption number given twice for one image.
    """
    captions: dict[str, dict[int, tuple[int, str]]] = {}
    for line_number, line in enumerate(read_text_lines(path), start=1):
        if not line.strip():
            continue
        name, tab, caption = line.partition("\t")
        image, hash_sign, number = name.rpartition("#")
        if not tab or not hash_sign or not image.strip() or not number.strip().isdigit():
            raise KitmDataError(f"{path} line {line_number} is not '<image>#<k><TAB><caption>': {line[:80]!r}.")
        image, k = image.strip(), int(number)
        seen = captions.setdefault(image, {})
        if k in seen:
            raise KitmDataError(f"{path} line {line_number}: caption {image}#{k} was already given on line "
                                f"{seen[k][0]}.")
        seen[k] = (line_number, caption)
    return {image: [(k, caption) for k, (_, caption) in sorted(by_k.items())] for image, by_k in captions.items()}


def read_split_lists(folder: pathlib.Path, known: set[str] | dict) -> dict[str, list[str]]:
    """kitm split -> image file names in list order. Each name must have captions and be in one list only."""
    where: dict[str, tuple[str, int]] = {}
    splits = {}
    for split, file_name in SPLIT_FILES.items():
        path = folder / file_name
        names = []
        for line_number, line in enumerate(read_text_lines(path), start=1):
            name = line.strip()
            if not name:
                continue
            if name in where:
                raise KitmDataError(f"{path} line {line_number}: image {name} is already listed in "
                                    f"{where[name][0]} line {where[name][1]}.")
            if name not in known:
                raise KitmDataError(f"{path} line {line_number}: image {name} has no captions in "
                                    f"{folder / TOKEN_FILE}.")
            where[name] = (file_name, line_number)
            names.append(name)
        splits[split] = names
    return splits


def load_flickr8k_entries(folder: str | os.PathLike, rules: CaptionRules | None = None) -> tuple[list[Entry], int]:
    """The split images as entries (location: the file name) and how many captioned images no split lists."""
    folder = pathlib.Path(folder)
    if not folder.is_dir():
        raise KitmDataError(f"Flickr8K text folder {folder} does not exist.")
    rules = rules or CaptionRules()
    token_path = folder / TOKEN_FILE
    captions = read_token_file(token_path)
    splits = read_split_lists(folder, captions)
    entries = []
    for split, names in splits.items():
        for name in names:
            kept = rules.select(str(token_path), name, captions[name])
            if kept is not None:
                entries.append(Entry(key=name, split=split, captions=kept, location=name))
    unlisted = len(captions) - sum(len(names) for names in splits.values())
    return entries, unlisted


def build_flickr8k(out: str | os.PathLike, flickr8k_dir: str | os.PathLike, images_dir: str | os.PathLike | None = None,
                   *, num_shards: int = 16, missing_images: str = "stop", empty_captions: str = "stop",
                   few_captions: str = "stop", limit: int | None = None, relevance: Sequence[str] = ROW_SOURCES,
                   sentence_model: str | None = None, neighbors_k: int = DEFAULT_NEIGHBORS_K,
                   progress: bool = True, image_neighbors: ImageNeighborOptions | None = None) -> schema.DatasetInfo:
    """Write Flickr8K (5 captions per image; images if `images_dir` is given) with relevance rows under `out`."""
    rules = CaptionRules(5, empty=empty_captions, few=few_captions)
    entries, unlisted = load_flickr8k_entries(flickr8k_dir, rules)
    if unlisted:
        print(f"Left out {unlisted} image(s) that {TOKEN_FILE} captions but no split list names.")
    entries = limit_per_split(entries, limit)
    absent = 0
    if images_dir is not None:
        entries, absent = drop_missing_images(entries, images_dir, missing_images,
                                              str(pathlib.Path(flickr8k_dir) / TOKEN_FILE))
    parameters = build_parameters(
        "flickr8k", num_shards=num_shards, empty_captions=empty_captions, few_captions=few_captions, limit=limit,
        relevance=relevance, sentence_model=sentence_model, neighbors_k=neighbors_k, image_neighbors=image_neighbors,
        flickr8k_dir=os.path.abspath(flickr8k_dir),
        images=os.path.abspath(images_dir) if images_dir is not None else None, missing_images=missing_images)
    image_mode, image_of = image_files(images_dir)
    return write_dataset(
        out, entries, name="flickr8k", parameters=parameters, image_mode=image_mode, image_of=image_of,
        relevance=relevance, sentence_model=sentence_model, neighbors_k=neighbors_k, num_shards=num_shards,
        progress=progress, image_neighbors=image_neighbors, image_input=image_file_input(images_dir),
        source={"flickr8k_dir": str(flickr8k_dir), "images": None if images_dir is None else str(images_dir),
                "left_out_in_no_split": unlisted, "skipped_missing": absent, "limit": limit, **rules.report()})

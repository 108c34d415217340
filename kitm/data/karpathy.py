"""Karpathy split JSON (dataset_coco.json, dataset_flickr30k.json, dataset_flickr8k.json) + image folder -> TFRecords.

Each JSON image entry has `filename`, optionally `filepath` (COCO's train2014/val2014), `split`
(train / val / test / restval; restval joins train, as VSE++ does) and `sentences` with `raw` text.
COCO has a few images with 6 or 7 captions; the records hold exactly `captions_per_image` (the first
ones, as VSE++ and the papers' code use). Image ids follow the JSON's order.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Sequence

from kitm.data import schema
from kitm.data.converter_common import (CaptionRules, Entry, drop_missing_images, image_file_input,
                                        build_parameters, limit_per_split, read_image_bytes, read_json,
                                        write_dataset)
from kitm.errors import KitmDataError
from kitm.relevance.image_features import ImageNeighborOptions
from kitm.relevance.rows import DEFAULT_NEIGHBORS_K, ROW_SOURCES

__all__ = ["read_karpathy_images", "load_karpathy_entries", "build_karpathy", "read_image_bytes"]


def read_karpathy_images(json_path: str | os.PathLike, *, need_sentences: bool = True) -> list[dict]:
    """The JSON's image entries, checked, in file order, each with its kitm `split` (restval -> train) and
    `relpath` (filepath/filename). Missing fields and unknown splits are errors naming the entry."""
    data = read_json(json_path, "Karpathy split file")
    images = data.get("images") if isinstance(data, dict) else None
    if not isinstance(images, list):
        raise KitmDataError(f"{json_path} is not a Karpathy split file (expected a top-level 'images' list).")
    required = ("filename", "split", "sentences") if need_sentences else ("filename", "split")
    checked = []
    for position, image in enumerate(images):
        if not isinstance(image, dict):
            raise KitmDataError(f"{json_path}: image entry {position} is not an object ({image!r:.60}).")
        missing = [field for field in required if field not in image]
        if missing:
            raise KitmDataError(f"{json_path}: image entry {position} lacks field(s) {missing}.")
        split = "train" if image["split"] == "restval" else image["split"]
        if split not in schema.SPLITS:
            raise KitmDataError(f"{json_path}: image {image['filename']} has unknown split {image['split']!r}.")
        checked.append({**image, "split": split,
                        "relpath": os.path.join(image.get("filepath") or "", image["filename"])})
    return checked


def load_karpathy_entries(json_path: str | os.PathLike, rules: CaptionRules | None = None) -> list[Entry]:
    """One `Entry` per image (location: its path under the image folder), captions chosen by `rules`."""
    rules = rules or CaptionRules()
    entries = []
    for position, image in enumerate(read_karpathy_images(json_path)):
        sentences = image["sentences"]
        if not isinstance(sentences, list):
            raise KitmDataError(f"{json_path}: image entry {position} ({image['filename']}): 'sentences' is not a "
                                "list.")
        numbered = []
        for k, sentence in enumerate(sentences):
            if not isinstance(sentence, dict) or "raw" not in sentence:
                raise KitmDataError(f"{json_path}: image {image['filename']}, sentence {k} lacks field 'raw'.")
            numbered.append((k, sentence["raw"]))
        captions = rules.select(str(json_path), image["filename"], numbered)
        if captions is not None:
            entries.append(Entry(key=image["filename"], split=image["split"], captions=captions,
                                 location=image["relpath"]))
    return entries


def build_karpathy(out: str | os.PathLike, json_path: str | os.PathLike, images_dir: str | os.PathLike, *,
                   num_shards: int = 16, missing_images: str = "stop", captions_per_image: int = 5,
                   empty_captions: str = "stop", few_captions: str = "stop", limit: int | None = None,
                   relevance: Sequence[str] = ROW_SOURCES, sentence_model: str | None = None,
                   neighbors_k: int = DEFAULT_NEIGHBORS_K, progress: bool = True,
                   image_neighbors: ImageNeighborOptions | None = None) -> schema.DatasetInfo:
    """Write the Karpathy split's images (JPEG bytes as on disk) and captions with relevance rows under `out`.

    The relevance rows are computed per split over the entries' captions (`kitm.relevance.rows`), the
    image-space neighbour rows (`image_neighbors`) over the image files. See
    `kitm.data.converter_common` for the caption, missing-image, limit and resume rules.
    """
    images_dir = pathlib.Path(images_dir)
    if not images_dir.is_dir():
        raise KitmDataError(f"Image folder {images_dir} does not exist.")
    rules = CaptionRules(captions_per_image, empty=empty_captions, few=few_captions)
    entries = limit_per_split(load_karpathy_entries(json_path, rules), limit)
    entries, absent = drop_missing_images(entries, images_dir, missing_images, str(json_path))
    parameters = build_parameters(
        "karpathy", num_shards=num_shards, empty_captions=empty_captions, few_captions=few_captions, limit=limit,
        relevance=relevance, sentence_model=sentence_model, neighbors_k=neighbors_k, image_neighbors=image_neighbors,
        karpathy_json=os.path.abspath(json_path), images=os.path.abspath(images_dir),
        missing_images=missing_images, captions_per_image=captions_per_image)
    return write_dataset(
        out, entries, name=pathlib.Path(out).name, parameters=parameters, image_mode="encoded",
        image_of=lambda entry: {"image_encoded": read_image_bytes(images_dir / entry.location)},
        captions_per_image=captions_per_image, relevance=relevance, sentence_model=sentence_model,
        neighbors_k=neighbors_k, num_shards=num_shards, progress=progress, image_neighbors=image_neighbors,
        image_input=image_file_input(images_dir),
        source={"karpathy_json": str(json_path), "images": str(images_dir), "skipped_missing": absent,
                "limit": limit, **rules.report()})

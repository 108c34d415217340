"""COCO's own caption files (captions_train2014.json, captions_val2014.json) + the Karpathy split -> TFRecords.

A COCO captions file is ``{"images": [{"id", "file_name", ...}], "annotations": [{"id", "image_id", "caption"}]}``.
The split of each image comes from the Karpathy split file ``dataset_coco.json`` (by file name; restval joins
train, as in VSE++), as does its folder (``filepath``: train2014/ or val2014/ under `--images`). Each image's
captions are ordered by annotation id, so the first five (kept when an image has six or seven) are the same
on every build. Images and ids follow dataset_coco.json's order, the same as `--dataset=karpathy` gives.
Images in the caption files that the split file lacks, and split-file images that no caption file has, are
counted and reported.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Sequence

from kitm.data import schema
from kitm.data.converter_common import (CaptionRules, Entry, drop_missing_images, limit_per_split, image_file_input,
                                        image_files, build_parameters, read_json,
                                        write_dataset)
from kitm.errors import KitmDataError
from kitm.data.karpathy import read_karpathy_images
from kitm.relevance.image_features import ImageNeighborOptions
from kitm.relevance.rows import DEFAULT_NEIGHBORS_K, ROW_SOURCES

__all__ = ["read_coco_captions", "load_coco_entries", "build_coco_captions"]


def _field(path, kind: str, position: int, record, name: str, types):
    if not isinstance(record, dict) or name not in record:
        raise KitmDataError(f"{path}: {kind} {position} lacks field {name!r}.")
    value = record[name]
    if not isinstance(value, types) or isinstance(value, bool):
        raise KitmDataError(f"{path}: {kind} {position} has {name}={value!r:.60}, expected "
                            f"{' or '.join(t.__name__ for t in (types if isinstance(types, tuple) else (types,)))}.")
    return value


def read_coco_captions(paths: Sequence[str | os.PathLike]) -> dict[str, list[tuple[int, str]]]:
    """File name -> [(annotation id, caption)] sorted by annotation id, over all the given caption files."""
    file_of: dict[int, str] = {}
    by_image: dict[int, list[tuple[int, str]]] = collections.defaultdict(list)
    annotation_ids: dict[int, str] = {}
    for path in paths:
        data = read_json(path, "COCO captions file")
        if not isinstance(data, dict) or not isinstance(data.get("images"), list) \
                or not isinstance(data.get("annotations"), list):
            raise KitmDataError(f"{path} is not a COCO captions file (expected 'images' and 'annotations' lists).")
        for position, image in enumerate(data["images"]):
            image_id = _field(path, "image", position, image, "id", int)
            file_name = _field(path, "image", position, image, "file_name", str)
            if file_of.setdefault(image_id, file_name) != file_name:
                raise KitmDataError(f"{path}: image id {image_id} is {file_name}, but another entry gave "
                                    f"{file_of[image_id]}.")
        for position, annotation in enumerate(data["annotations"]):
            annotation_id = _field(path, "annotation", position, annotation, "id", int)
            image_id = _field(path, "annotation", position, annotation, "image_id", int)
            caption = _field(path, "annotation", position, annotation, "caption", str)
            if annotation_id in annotation_ids:
                raise KitmDataError(f"{path}: annotation id {annotation_id} appears twice (also in "
                                    f"{annotation_ids[annotation_id]}).")
            annotation_ids[annotation_id] = str(path)
            by_image[image_id].append((annotation_id, caption))
    unknown = sorted(set(by_image) - set(file_of))
    if unknown:
        raise KitmDataError(f"{len(unknown)} image id(s) have captions but no entry in 'images' of "
                            f"{', '.join(map(str, paths))}, e.g. {unknown[0]}.")
    return {file_of[image_id]: sorted(by_image.get(image_id, [])) for image_id in file_of}


def load_coco_entries(caption_files: Sequence[str | os.PathLike], karpathy_json: str | os.PathLike,
                      rules: CaptionRules | None = None) -> tuple[list[Entry], dict[str, int]]:
    """Entries in Karpathy order (location: filepath/file_name) and the counts of images left out."""
    rules = rules or CaptionRules()
    captions = read_coco_captions(caption_files)
    split_images = read_karpathy_images(karpathy_json, need_sentences=False)
    in_split = {image["filename"] for image in split_images}
    entries = []
    origin = " + ".join(map(str, caption_files))
    for image in split_images:
        numbered = captions.get(image["filename"])
        if numbered is None:
            continue
        # Errors name the caption's position and its annotation id, which finds it in the COCO file.
        kept = rules.select(origin, image["filename"],
                            [(f"{k} (annotation id {a})", text) for k, (a, text) in enumerate(numbered)])
        if kept is not None:
            entries.append(Entry(key=image["filename"], split=image["split"], captions=kept,
                                 location=image["relpath"]))
    counts = {"not_in_karpathy_split": sum(name not in in_split for name in captions),
              "split_images_without_captions_file": sum(image["filename"] not in captions for image in split_images)}
    if counts["not_in_karpathy_split"]:
        print(f"Left out {counts['not_in_karpathy_split']} image(s) of the caption file(s) that {karpathy_json} "
              "does not split.")
    if counts["split_images_without_captions_file"]:
        print(f"{counts['split_images_without_captions_file']} image(s) of {karpathy_json} are in none of the "
              f"caption files given ({origin}); they are not in the dataset.")
    return entries, counts


def build_coco_captions(out: str | os.PathLike, caption_files: Sequence[str | os.PathLike],
                        karpathy_json: str | os.PathLike, images_dir: str | os.PathLike | None = None, *,
                        num_shards: int = 16, missing_images: str = "stop", empty_captions: str = "stop",
                        few_captions: str = "stop", limit: int | None = None, relevance: Sequence[str] = ROW_SOURCES,
                        sentence_model: str | None = None, neighbors_k: int = DEFAULT_NEIGHBORS_K,
                        progress: bool = True,
                        image_neighbors: ImageNeighborOptions | None = None) -> schema.DatasetInfo:
    """Write COCO (5 captions per image; images if `images_dir` is given) with relevance rows under `out`."""
    if not caption_files:
        raise KitmDataError("--coco_captions needs at least one COCO captions file.")
    rules = CaptionRules(5, empty=empty_captions, few=few_captions)
    entries, counts = load_coco_entries(caption_files, karpathy_json, rules)
    entries = limit_per_split(entries, limit)
    absent = 0
    if images_dir is not None:
        entries, absent = drop_missing_images(entries, images_dir, missing_images, str(karpathy_json))
    parameters = build_parameters(
        "coco_captions", num_shards=num_shards, empty_captions=empty_captions, few_captions=few_captions, limit=limit,
        relevance=relevance, sentence_model=sentence_model, neighbors_k=neighbors_k, image_neighbors=image_neighbors,
        coco_captions=[os.path.abspath(p) for p in caption_files], karpathy_json=os.path.abspath(karpathy_json),
        images=os.path.abspath(images_dir) if images_dir is not None else None, missing_images=missing_images)
    image_mode, image_of = image_files(images_dir)
    return write_dataset(
        out, entries, name="coco", parameters=parameters, image_mode=image_mode, image_of=image_of,
        relevance=relevance, sentence_model=sentence_model, neighbors_k=neighbors_k, num_shards=num_shards,
        progress=progress, image_neighbors=image_neighbors, image_input=image_file_input(images_dir),
        source={"coco_captions": [str(p) for p in caption_files], "karpathy_json": str(karpathy_json),
                "images": None if images_dir is None else str(images_dir), "skipped_missing": absent,
                "limit": limit, **counts, **rules.report()})

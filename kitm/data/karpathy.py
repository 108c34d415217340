"""Karpathy split JSON (dataset_coco.json, dataset_flickr30k.json, dataset_flickr8k.json) + image folder -> TFRecords.

Each JSON image entry has `filename`, optionally `filepath` (COCO's train2014/val2014), `split`
(train / val / test / restval; restval joins train, as VSE++ does) and `sentences` with `raw` text.
COCO has a few images with 6 or 7 captions; the records hold exactly `captions_per_image` (the first
ones, as VSE++ and the papers' code use).
"""

from __future__ import annotations

import json
import os
import pathlib

from PIL import Image, UnidentifiedImageError
from tqdm.auto import tqdm

from kitm.data import schema
from kitm.data.errors import KitmDataError
from kitm.data.records import make_example, write_shards


def load_karpathy_entries(json_path: str | os.PathLike, captions_per_image: int = 5) -> list[dict]:
    """Entries as {"key", "relpath", "split", "captions"}, validated, with a clear error naming what is wrong."""
    json_path = pathlib.Path(json_path)
    if not json_path.is_file():
        raise KitmDataError(f"Karpathy split file {json_path} does not exist.")
    try:
        images = json.loads(json_path.read_text())["images"]
    except (json.JSONDecodeError, KeyError, TypeError) as error:
        raise KitmDataError(f"{json_path} is not a Karpathy split file (expected a top-level 'images' list): "
                            f"{error}") from error
    entries = []
    for position, image in enumerate(images):
        missing = [field for field in ("filename", "split", "sentences") if field not in image]
        if missing:
            raise KitmDataError(f"{json_path}: image entry {position} lacks field(s) {missing}.")
        raw = [str(sentence.get("raw", "")).strip() for sentence in image["sentences"]]
        raw = [caption for caption in raw if caption]
        if len(raw) < captions_per_image:
            raise KitmDataError(f"{json_path}: image {image['filename']} has {len(raw)} non-empty captions; "
                                f"kitm needs {captions_per_image}.")
        split = "train" if image["split"] == "restval" else image["split"]
        if split not in schema.SPLITS:
            raise KitmDataError(f"{json_path}: image {image['filename']} has unknown split {image['split']!r}.")
        relpath = os.path.join(image.get("filepath", ""), image["filename"])
        entries.append({"key": image["filename"], "relpath": relpath, "split": split,
                        "captions": raw[:captions_per_image]})
    return entries


def read_image_bytes(path: pathlib.Path) -> bytes:
    """The file's bytes, after checking that they decode as an image (naming the file if not)."""
    try:
        with Image.open(path) as image:
            image.verify()
    except (UnidentifiedImageError, OSError, SyntaxError) as error:
        raise KitmDataError(f"Image {path} cannot be read as an image: {error}") from error
    return path.read_bytes()


def build_karpathy(out: str | os.PathLike, json_path: str | os.PathLike, images_dir: str | os.PathLike, *,
                   num_shards: int = 16, missing_images: str = "stop", captions_per_image: int = 5,
                   progress: bool = True) -> schema.DatasetInfo:
    images_dir = pathlib.Path(images_dir)
    if not images_dir.is_dir():
        raise KitmDataError(f"Image folder {images_dir} does not exist.")
    entries = load_karpathy_entries(json_path, captions_per_image)
    absent = [entry for entry in entries if not (images_dir / entry["relpath"]).is_file()]
    if absent and missing_images == "stop":
        raise KitmDataError(f"{len(absent)} image(s) named in {json_path} are missing under {images_dir}, e.g. "
                            f"{images_dir / absent[0]['relpath']}; pass --missing_images=skip to leave them out.")
    if absent:
        print(f"Skipping {len(absent)} image(s) missing under {images_dir} (first: {absent[0]['relpath']}).")
        absent_keys = {entry["relpath"] for entry in absent}
        entries = [entry for entry in entries if entry["relpath"] not in absent_keys]
    out = pathlib.Path(out)
    splits = {}
    bar = tqdm(total=len(entries), desc=f"writing {out}", unit="image", disable=not progress)
    for split in schema.SPLITS:
        members = [(image_id, entry) for image_id, entry in enumerate(entries) if entry["split"] == split]
        if not members:
            continue

        def records(index_range, members=members, split=split):
            for position in index_range:
                image_id, entry = members[position]
                yield make_example(
                    image_id=image_id, image_key=entry["key"], split=split, captions=entry["captions"],
                    caption_ids=[image_id * captions_per_image + k for k in range(captions_per_image)],
                    image_encoded=read_image_bytes(images_dir / entry["relpath"]))

        shards = num_shards if split == "train" else max(1, num_shards // 4)
        names, sizes = write_shards(out, split, len(members), shards, records, progress=bar.update)
        splits[split] = {"num_images": len(members), "shards": names, "bytes": sizes}
    bar.close()
    info = schema.DatasetInfo(
        name=pathlib.Path(out).name, captions_per_image=captions_per_image, image_mode="encoded", splits=splits,
        source={"karpathy_json": str(json_path), "images": str(images_dir), "skipped_missing": len(absent)})
    schema.save_info(out, info)
    return info

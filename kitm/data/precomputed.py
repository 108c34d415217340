"""VSE++ / SCAN precomputed features (`{split}_ims.npy` + `{split}_caps.txt`) -> TFRecords.

The folder (`<features_dir>/<name>`, e.g. data/f30k_precomp as VSE++'s `--data_path`/`--data_name` name it, or
`<features_dir>` itself when it holds the files) has, per split (train, dev, test, testall; dev becomes val),

* ``{split}_caps.txt``: one caption per line, five per image, image-major (caption j belongs to image j // 5);
* ``{split}_ims.npy``: image features, either one row per image or one row per caption, in one of two layouts:
  VSE++'s [rows, F] vectors (image_mode "feature") or SCAN's bottom-up-attention regions [rows, 36, 2048]
  (image_mode "regions"; the pipeline mean-pools them).

Rows versus captions follows VSE++'s PrecompDataset: rows * 5 == captions is one row per image; rows == captions is
one row per caption (the image repeated five times), so image i is row 5 i, and the five repeats are checked to be
equal while the record is written. Anything else is an error naming both files and their counts.

kitm has one test split: testall (COCO's 5K test images, the 1K folds are its slices) when present, else test.
Features are opened with ``np.load(mmap_mode="r")``, so only the rows of the shard being written are read:
a 30 GB SCAN file never sits in memory. Image keys are ``<file split>/<image index>``.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from collections.abc import Sequence

import numpy as np

from kitm.data import schema
from kitm.data.converter_common import (CaptionRules, Entry, build_parameters, limit_per_split,
                                        read_text_lines, write_dataset)
from kitm.errors import KitmDataError
from kitm.relevance.image_features import ImageNeighborOptions, StoredFeatures
from kitm.relevance.rows import DEFAULT_NEIGHBORS_K, ROW_SOURCES

__all__ = ["FILE_SPLITS", "FeatureSplit", "find_feature_folder", "open_feature_splits", "build_precomputed"]

CAPTIONS_PER_IMAGE = 5
# file split -> kitm split; for "test" the first present of testall, test is used.
FILE_SPLITS = {"train": ("train",), "val": ("dev",), "test": ("testall", "test")}


@dataclasses.dataclass
class FeatureSplit:
    """One file split: its memory-mapped features, its captions, and rows per image (1, or 5 when repeated)."""

    file_split: str
    features_path: pathlib.Path
    captions_path: pathlib.Path
    features: np.ndarray
    captions: list[str]
    rows_per_image: int

    @property
    def num_images(self) -> int:
        return len(self.captions) // CAPTIONS_PER_IMAGE

    def image_features(self, index: int) -> np.ndarray:
        """Image `index`'s feature array ([F] or [R, F]), reading only its rows; repeats must be equal."""
        start = index * self.rows_per_image
        block = np.asarray(self.features[start:start + self.rows_per_image])
        if self.rows_per_image > 1 and not np.array_equal(block, np.broadcast_to(block[:1], block.shape)):
            raise KitmDataError(
                f"{self.features_path} has one row per caption ({len(self.features)} rows, {len(self.captions)} "
                f"captions in {self.captions_path}) but rows {start}..{start + self.rows_per_image - 1} (image "
                f"{index}) differ: kitm stores one feature per image and expects VSE++'s layout of five equal "
                "repeats.")
        return block[0]


def find_feature_folder(features_dir: str | os.PathLike, name: str | None) -> pathlib.Path:
    """`<features_dir>/<name>` if it is a folder, else `<features_dir>`; it must hold some `*_ims.npy`."""
    features_dir = pathlib.Path(features_dir)
    tried = [features_dir / name, features_dir] if name else [features_dir]
    for folder in tried:
        if folder.is_dir() and any(folder.glob("*_ims.npy")):
            return folder
    raise KitmDataError(f"No precomputed features ({{split}}_ims.npy) found in {' or '.join(map(str, tried))}.")


def _open_split(folder: pathlib.Path, file_split: str) -> FeatureSplit:
    features_path = folder / f"{file_split}_ims.npy"
    captions_path = folder / f"{file_split}_caps.txt"
    if not captions_path.is_file():
        raise KitmDataError(f"{features_path} has no captions file beside it: {captions_path} is missing.")
    try:
        features = np.load(features_path, mmap_mode="r")
    except (ValueError, OSError) as error:
        raise KitmDataError(f"{features_path} cannot be read as a .npy array: {error}") from error
    if features.ndim not in (2, 3) or not np.issubdtype(features.dtype, np.number):
        raise KitmDataError(f"{features_path} holds a {features.dtype} array of shape {features.shape}; expected "
                            "numbers of shape [rows, F] (VSE++) or [rows, regions, F] (SCAN).")
    captions = read_text_lines(captions_path)
    rows, count = features.shape[0], len(captions)
    if count % CAPTIONS_PER_IMAGE:
        raise KitmDataError(f"{captions_path} holds {count} captions, not a multiple of {CAPTIONS_PER_IMAGE} "
                            f"(five per image); {features_path} holds {rows} feature rows.")
    if rows * CAPTIONS_PER_IMAGE == count:
        rows_per_image = 1
    elif rows == count:
        rows_per_image = CAPTIONS_PER_IMAGE
    else:
        raise KitmDataError(
            f"Feature and caption counts disagree: {features_path} holds {rows} rows but {captions_path} holds "
            f"{count} captions; expected {count // CAPTIONS_PER_IMAGE} rows (one per image) or {count} (one per "
            "caption).")
    return FeatureSplit(file_split, features_path, captions_path, features, captions, rows_per_image)


def open_feature_splits(folder: pathlib.Path) -> dict[str, FeatureSplit]:
    """kitm split -> its FeatureSplit, for the splits present; all must share the feature shape."""
    opened = {}
    for split, candidates in FILE_SPLITS.items():
        for file_split in candidates:
            if (folder / f"{file_split}_ims.npy").is_file():
                opened[split] = _open_split(folder, file_split)
                ignored = [other for other in candidates if other != file_split
                           and (folder / f"{other}_ims.npy").is_file()]
                if ignored:
                    print(f"The {split} split is {file_split}_ims.npy; {', '.join(ignored)} is not used.")
                break
    if not opened:
        raise KitmDataError(f"{folder} holds none of {[f'{s}_ims.npy' for c in FILE_SPLITS.values() for s in c]}.")
    shapes = {feature_split.features_path.name: feature_split.features.shape[1:] for feature_split in opened.values()}
    if len(set(shapes.values())) > 1:
        raise KitmDataError(f"The feature files of {folder} disagree on the per-row shape: {shapes}.")
    return opened


def build_precomputed(out: str | os.PathLike, features_dir: str | os.PathLike, name: str | None = None, *,
                      num_shards: int = 16, empty_captions: str = "stop", few_captions: str = "stop",
                      limit: int | None = None, relevance: Sequence[str] = ROW_SOURCES,
                      sentence_model: str | None = None, neighbors_k: int = DEFAULT_NEIGHBORS_K,
                      progress: bool = True, image_neighbors: ImageNeighborOptions | None = None) -> schema.DatasetInfo:
    """Write a VSE++/SCAN precomputed-feature dataset with relevance rows under `out`.

    With `image_neighbors` (space "features") the records also get image-space neighbour rows found among the
    stored features (SCAN regions: their mean), read from the memory-mapped files chunk by chunk.
    """
    folder = find_feature_folder(features_dir, name)
    opened = open_feature_splits(folder)
    rules = CaptionRules(CAPTIONS_PER_IMAGE, empty=empty_captions, few=few_captions)
    entries = []
    for split, feature_split in opened.items():
        for index in range(feature_split.num_images):
            first = index * CAPTIONS_PER_IMAGE
            numbered = [(f"{k} (line {first + k + 1})", feature_split.captions[first + k])
                        for k in range(CAPTIONS_PER_IMAGE)]
            key = f"{feature_split.file_split}/{index}"
            kept = rules.select(str(feature_split.captions_path), key, numbered)
            if kept is not None:
                entries.append(Entry(key=key, split=split, captions=kept, location=index))
    entries = limit_per_split(entries, limit)
    row_shape = next(iter(opened.values())).features.shape[1:]
    image_mode = "feature" if len(row_shape) == 1 else "regions"
    argument = "image_feature" if image_mode == "feature" else "image_regions"
    parameters = build_parameters(
        "precomputed", num_shards=num_shards, empty_captions=empty_captions, few_captions=few_captions, limit=limit,
        relevance=relevance, sentence_model=sentence_model, neighbors_k=neighbors_k, image_neighbors=image_neighbors,
        features=os.path.abspath(folder))

    def image_input(split, split_entries):
        # One row per image, or VSE++'s five equal repeats of which the first is taken (as image_features does).
        feature_split = opened[split]
        rows = np.array([entry.location * feature_split.rows_per_image for entry in split_entries], dtype=np.int64)
        return StoredFeatures(feature_split.features, rows, str(feature_split.features_path))

    return write_dataset(
        out, entries, name=name or folder.name, parameters=parameters, image_mode=image_mode,
        image_of=lambda entry: {argument: opened[entry.split].image_features(entry.location)},
        feature_dim=int(row_shape[-1]), relevance=relevance, sentence_model=sentence_model, neighbors_k=neighbors_k,
        num_shards=num_shards, progress=progress, image_neighbors=image_neighbors, image_input=image_input,
        source={"features": str(folder), "limit": limit,
                "files": {split: [s.features_path.name, s.captions_path.name, f"{s.rows_per_image} row(s) per image"]
                          for split, s in opened.items()},
                **rules.report()})

"""One split of a built kitm dataset, read whole into memory, in the order evaluation uses.

Records are read with the same deterministic interleave as
``kitm.data.pipeline.evaluation_dataset``, so image row i here is image row i of the similarity
matrix that the launcher and the callback compute, and caption row i*cpi + j is caption j of
image i.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib

import numpy as np

_READ_BATCH = 256


@dataclasses.dataclass
class SplitData:
    """What evaluation needs of one split.

    Attributes:
      info: the dataset's ``DatasetInfo``.
      split: the split's name.
      image_ids: int64 [images], the records' image/id.
      captions: [images * cpi] captions, image-major.
      images: encoded image bytes (one per image) for image datasets, float32 [images, F]
        features for feature datasets (region datasets: the mean over regions, as the pipeline),
        or None when not read.
      scene_facts: int64 [images, objects * 7] of the synthetic world, or None.
      caption_facts: int64 [images * cpi, 11] of the synthetic world, or None.
      image_keys: the records' image/key (the source's name for each image: a file name, a COCO id).
    """

    info: object
    split: str
    image_ids: np.ndarray
    captions: list[str]
    images: list[bytes] | np.ndarray | None
    scene_facts: np.ndarray | None = None
    caption_facts: np.ndarray | None = None
    image_keys: list[str] | None = None

    @property
    def num_images(self) -> int:
        return int(self.image_ids.shape[0])

    @property
    def captions_per_image(self) -> int:
        return int(self.info.captions_per_image)


def read_split(data_dir: str | os.PathLike, split: str, *, limit: int | None = None,
               with_images: bool = True) -> SplitData:
    """Read `split` of the dataset at `data_dir` (its first `limit` images in evaluation order).

    Raises KitmDataError (a ValueError) for a missing dataset or split, naming it.
    """
    import tensorflow as tf

    from kitm.data import schema
    from kitm.errors import KitmDataError
    from kitm.data.records import parse_record, read_records

    data_dir = pathlib.Path(data_dir)
    info = schema.load_info(data_dir)
    if split not in info.splits:
        raise KitmDataError(f"The dataset at {data_dir} has no split '{split}'; it has {sorted(info.splits)}.")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, (int, np.integer)) or limit < 1):
        raise ValueError(f"`limit` must be a positive integer or None; got {limit!r}.")
    spec = schema.feature_spec(info)
    truth = "truth" in info.relevance
    keys = ["image/id", "image/key", "captions"]
    if with_images and info.image_mode == "none":
        raise KitmDataError(f"The dataset at {data_dir} holds captions only (built without images); it can be "
                            "read with with_images=False, or evaluated from a similarity matrix (--sims).")
    if with_images:
        keys.append({"encoded": "image/encoded", "feature": "image/feature", "regions": "image/regions"}
                    [info.image_mode])
    if truth:
        keys += [schema.TRUTH_SCENE_FACTS, schema.TRUTH_CAPTION_FACTS]

    @tf.autograph.experimental.do_not_convert  # as kitm.data.pipeline's map functions
    def select(path, record):
        parsed = parse_record(path, record, spec)
        out = {key: parsed[key] for key in keys if key != "image/regions"}
        if "image/regions" in keys:  # the pipeline's image_input: mean over the regions
            regions = tf.reshape(parsed["image/regions"], tf.cast(parsed["image/regions_shape"], tf.int32))
            out["image/regions"] = tf.reduce_mean(regions, axis=0)
        return out

    records = read_records(info.shard_paths(data_dir, split), deterministic=True)
    if limit is not None:
        records = records.take(int(limit))
    dataset = records.map(select, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).batch(_READ_BATCH)
    columns: dict[str, list[np.ndarray]] = {key: [] for key in keys}
    for batch in dataset:
        for key in keys:
            columns[key].append(batch[key].numpy())
    if not columns["image/id"]:
        raise KitmDataError(f"Split '{split}' of the dataset at {data_dir} holds no records.")
    merged = {key: np.concatenate(values) for key, values in columns.items()}
    cpi = info.captions_per_image
    images = None
    if with_images:
        stored = merged[keys[3]]
        images = list(stored) if info.image_mode == "encoded" else stored.astype(np.float32)
    return SplitData(
        info=info,
        split=split,
        image_ids=merged["image/id"].astype(np.int64),
        captions=[caption.decode("utf-8") for caption in merged["captions"].reshape(-1)],
        images=images,
        scene_facts=merged[schema.TRUTH_SCENE_FACTS] if truth else None,
        caption_facts=merged[schema.TRUTH_CAPTION_FACTS].reshape(len(merged["image/id"]) * cpi, -1) if truth else None,
        image_keys=[key.decode("utf-8") for key in merged["image/key"]],
    )


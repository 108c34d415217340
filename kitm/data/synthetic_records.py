"""Write the synthetic world as kitm TFRecords (the `synthetic` dataset of `python -m kitm.data.build`)."""

from __future__ import annotations

import io
import os
import pathlib

from collections.abc import Callable, Sequence

import numpy as np
from PIL import Image
from kitm.progress import progress_bar as tqdm

from kitm.data import schema
from kitm.data.records import make_example, write_shards
from kitm.errors import KitmDataError
from kitm.relevance.image_features import ImageNeighborOptions, PixelArrays, StoredFeatures
from kitm.relevance.world_truth import DEFAULT_WORLD, caption_fact_width, max_objects, scene_fact_width
from kitm.relevance.rows import DEFAULT_NEIGHBORS_K, compute_relevance_rows


def encode_png(image: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    return buffer.getvalue()


DEFAULT_SYNTHETIC_RELEVANCE = ("cider",)


def _truth_meta(captions_per_image: int, world: str) -> dict:
    """dataset.json's entry for the truth slot: the world and the scene and caption facts every record carries."""
    return {"truth": {
        "features": {
            schema.TRUTH_SCENE_FACTS: ["int64", max_objects(world) * scene_fact_width(world)],
            schema.TRUTH_CAPTION_FACTS: ["int64", captions_per_image * caption_fact_width(world)],
        },
        "world": world,
        "definition": "kitm.relevance.world_truth.world_relevance (exact relevance of a caption to an image)",
    }}


def _frozen_features(world, encode: Callable[[np.ndarray], np.ndarray], provenance: dict) -> np.ndarray:
    """Every scene's image through the frozen extractor, checked to be one finite row per scene."""
    features = encode(world.images)
    if features.ndim != 2 or features.shape[0] != world.num_scenes or not np.isfinite(features).all():
        raise ValueError(f"The image feature extractor {provenance} gave {features.shape} values (finite: "
                         f"{bool(np.isfinite(features).all())}) for {world.num_scenes} scenes; expected [scenes, F].")
    return features


def _neighbor_images(world, members: np.ndarray, features: np.ndarray | None, options: ImageNeighborOptions):
    """A split's images for the image-space neighbour rows: the frozen tower's features for space "features" (the
    space the runs see, as Thomas & Kovashka's Img NNs use their CNN's features), else the pixels."""
    if options.space == "features":
        if features is None:
            raise KitmDataError("--image_neighbors=features for --dataset=synthetic reads the frozen tower's features: "
                                "give --image_features_run too (or --image_neighbors=pixels).")
        return StoredFeatures(features, members, "the frozen tower's features")
    return PixelArrays(world.images[members], [f"scene_{i:06d}" for i in members])


def _write_splits(out: pathlib.Path, world, members_of: dict, rows, features: np.ndarray | None, num_shards: int,
                  progress: bool) -> dict:
    """Write each split's shards (PNG pixels, or the frozen features) with the truth facts and relevance rows."""
    cpi = world.captions_per_image
    splits = {}
    bar = tqdm(total=world.num_scenes, desc=f"writing {out}", unit="image", disable=not progress)
    for split, members in members_of.items():

        def records(index_range, members=members, split=split):
            for position in index_range:
                i = int(members[position])
                yield make_example(
                    image_id=i, image_key=f"scene_{i:06d}", split=split, captions=world.captions[i],
                    caption_ids=[i * cpi + k for k in range(cpi)],
                    image_encoded=None if features is not None else encode_png(world.images[i]),
                    image_feature=None if features is None else features[i],
                    extra={schema.TRUTH_SCENE_FACTS: world.scene_facts[i],
                           schema.TRUTH_CAPTION_FACTS: world.caption_facts[i], **rows.features(split, position)})

        shards = num_shards if split == "train" else max(1, num_shards // 4)
        names, sizes = write_shards(out, split, int(members.size), shards, records, progress=bar.update)
        splits[split] = {"num_images": int(members.size), "shards": names, "bytes": sizes}
    bar.close()
    return splits


def build_synthetic(out: str | os.PathLike, *, num_scenes: int = 3000, seed: int = 0, image_size: int = 64,
                    captions_per_image: int = 5, num_shards: int = 4, progress: bool = True,
                    relevance: Sequence[str] = DEFAULT_SYNTHETIC_RELEVANCE, sentence_model: str | None = None,
                    neighbors_k: int = DEFAULT_NEIGHBORS_K,
                    image_neighbors: ImageNeighborOptions | None = None,
                    split_counts: Sequence[int] | None = None, near_duplicate_rate: float | None = None,
                    caption_style: str = "literal", world: str = DEFAULT_WORLD,
                    image_features: tuple[Callable[[np.ndarray], np.ndarray], dict] | None = None
                    ) -> schema.DatasetInfo:
    """Generate the synthetic world and write it under `out` with `dataset.json` (written last).

    Every record carries the world's exact relevance ("truth") and the relevance rows of `relevance`
    (any of "cider", "sbert", "neighbors"; `kitm.relevance.rows`), so the papers' own sources can be compared
    with the truth. With `image_neighbors` (e.g. ``ImageNeighborOptions("pixels")``, the space made for these
    scenes) the records also get image-space neighbour rows (Thomas & Kovashka's Img NNs). Shards that already exist are
    kept, so a killed build resumes; the world is regenerated from the seed, which is deterministic, so the
    remaining shards match the ones kept.

    `split_counts` (train, val, test scenes) replaces the default 80/10/10 split; `near_duplicate_rate` (default the
    generator's) sets how often a scene is an earlier one with one change, the knob of how many captions fit more
    than one image; `caption_style` "complementary" writes the non-literal world (`kitm.data.synthetic.complementary`);
    `world` "things" (everyday objects, the default) or "shapes" (the first claims studies' world).
    `image_features` = (encode, provenance), e.g. ``kitm.serving.image_features.
    saved_model_image_features(run)``: the records then hold ``encode(images)`` (image mode "feature", a frozen
    tower's features as VSE++'s precomputed ones) instead of PNG pixels; the pixel-space neighbour rows still come
    from the pixels.
    """
    from kitm.data import synthetic  # the generator is only needed when building

    out = pathlib.Path(out)
    world_options = {} if near_duplicate_rate is None else {"near_duplicate_rate": float(near_duplicate_rate)}
    if caption_style != "literal":  # a literal world's dataset.json stays as before
        world_options["caption_style"] = caption_style
    world_name = world
    world = synthetic.generate_world(num_scenes, seed=seed, image_size=image_size,
                                     captions_per_image=captions_per_image, split_counts=split_counts,
                                     progress=progress, world=world_name, **world_options)
    features = None if image_features is None else _frozen_features(world, *image_features)
    members_of = {split: np.flatnonzero(world.splits == split) for split in schema.SPLITS}
    members_of = {split: members for split, members in members_of.items() if members.size}
    rows = compute_relevance_rows(
        out, {split: [world.captions[i] for i in members] for split, members in members_of.items()},
        {split: members[:, None] * captions_per_image + np.arange(captions_per_image)
         for split, members in members_of.items()},
        captions_per_image=captions_per_image, sources=relevance, sentence_model=sentence_model,
        neighbors_k=neighbors_k, progress=progress, image_neighbors=image_neighbors,
        images={split: _neighbor_images(world, members, features, image_neighbors)
                for split, members in members_of.items()} if image_neighbors is not None else None)
    splits = _write_splits(out, world, members_of, rows, features, num_shards, progress)
    info = schema.DatasetInfo(
        name="synthetic", captions_per_image=captions_per_image,
        image_mode="encoded" if features is None else "feature",
        feature_dim=None if features is None else int(features.shape[1]), splits=splits,
        image_size=image_size, relevance={**_truth_meta(captions_per_image, world_name), **rows.meta},
        source={"generator": "kitm.data.synthetic.generate_world", "world": world_name, "num_scenes": num_scenes,
                "seed": seed,
                "image_size": image_size, "relevance_rows": list(relevance),
                **({} if split_counts is None else {"split_counts": [int(c) for c in split_counts]}),
                **world_options,
                **({} if image_features is None else {"image_features": image_features[1]}),
                **({"image_neighbors": image_neighbors.parameters()}
                   if image_neighbors is not None and image_neighbors.enabled else {})})
    schema.save_info(out, info)
    return info

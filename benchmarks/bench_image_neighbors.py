"""Build time added by image-space neighbour rows (`python -m kitm.data.build --image_neighbors=...`, Thomas & Kovashka's
"Img NNs" variant), per space, measured on this machine:

* pixels: a synthetic world of --scenes scenes (features of every split + exact neighbour search, k = 200), and the
  mean exact relevance of the neighbours' captions against random scenes (how meaningful the space is there);
* backbone: frozen ResNet-50 throughput at 224 px on --backbone_images synthetic scenes (random weights: the same
  arithmetic as ImageNet weights, which this machine does not hold), extrapolated to Flickr30K and COCO;
* features: a VSE++-like [N, 2048] and a SCAN-like [N, 36, 2048] memory-mapped file of --feature_images rows
  (reading, region means and neighbour search).

Nothing is cached between runs (a fresh temporary folder each time).

    python benchmarks/bench_image_neighbors.py [--scenes 3000 --image_size 64] [--backbone_images 256] \
        [--feature_images 5000]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import kitm  # noqa: F401,E402
import numpy as np  # noqa: E402

from kitm.relevance.image_features import (ImageFeatureExtractor, ImageNeighborOptions, PixelArrays,  # noqa: E402
                                           StoredFeatures, split_image_features)
from kitm.relevance.rows import compute_image_neighbor_rows  # noqa: E402


def pixels(scenes: int, image_size: int) -> None:
    from kitm.data import synthetic
    from kitm.relevance.world_truth import world_relevance
    from kitm.data.schema import IMAGE_NEIGHBOR_CAPTION_IDS

    world = synthetic.generate_world(scenes, seed=0, image_size=image_size, progress=False)
    members = {split: np.flatnonzero(world.splits == split) for split in ("train", "val", "test")}
    images = {split: PixelArrays(world.images[rows]) for split, rows in members.items()}
    ids = {split: rows[:, None] * 5 + np.arange(5) for split, rows in members.items()}
    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        meta, per_split = compute_image_neighbor_rows(folder, images, ids, ImageNeighborOptions("pixels"),
                                                      progress=False)
        seconds = time.perf_counter() - started
    train = members["train"]
    # Relevance of every training caption to a sample of training images (the whole matrix of a big world would
    # not fit in memory).
    sample = np.random.default_rng(0).choice(len(train), min(1000, len(train)), replace=False)
    relevance = world_relevance(world.scene_facts[train[sample]],
                                world.caption_facts[train].reshape(-1, world.caption_facts.shape[-1]),
                                world=world.world, image_size=image_size)  # [sampled images, captions]
    found = np.stack(per_split["train"][IMAGE_NEIGHBOR_CAPTION_IDS])[sample]  # [S, 5 k] caption ids
    columns = np.searchsorted(ids["train"].reshape(-1), found)  # caption id -> its column (the ids are sorted)
    near = relevance[np.arange(len(sample))[:, None], columns].mean()
    own = relevance.reshape(len(sample), len(train), 5)[np.arange(len(sample)), sample]
    other = (relevance.sum() - own.sum()) / (relevance.size - own.size)
    print(f"pixels, synthetic world of {scenes} scenes at {image_size} px (k = {meta['k']}): {seconds:.2f} s for "
          f"every split's features and neighbours; neighbours' captions have mean truth relevance {near:.3f} to the "
          f"image, another scene's {other:.3f}")


def backbone(count: int) -> None:
    from kitm.data import synthetic

    world = synthetic.generate_world(max(count, 10), seed=1, image_size=64, progress=False)
    extractor = ImageFeatureExtractor(ImageNeighborOptions("backbone", weights=None))
    extractor(PixelArrays(world.images[:32]), 0, 32)  # build and trace once
    started = time.perf_counter()
    features = extractor(PixelArrays(world.images[:count]), 0, count)
    rate = count / (time.perf_counter() - started)
    print(f"backbone ResNet-50 at 224 px, batch 32: {rate:.1f} images/s on {os.cpu_count()} CPU cores "
          f"(features {features.shape}); Flickr30K (31,783 images) ~{31783 / rate / 3600:.1f} h, COCO (123,287) "
          f"~{123287 / rate / 3600:.1f} h on this machine")


def features(count: int) -> None:
    rng = np.random.default_rng(0)
    for name, shape in (("VSE++ [N, 2048]", (count, 2048)), ("SCAN [N, 36, 2048]", (count, 36, 2048))):
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "train_ims.npy")
            stored = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=shape)
            for start in range(0, count, 1000):
                stored[start:start + 1000] = np.abs(rng.standard_normal((min(1000, count - start),) + shape[1:]))
            stored.flush()
            del stored
            mapped = np.load(path, mmap_mode="r")
            images = StoredFeatures(mapped, np.arange(count), path)
            started = time.perf_counter()
            split_image_features(folder, "train", images, ImageFeatureExtractor(ImageNeighborOptions("features")),
                                 progress=False)
            read = time.perf_counter() - started
            started = time.perf_counter()
            compute_image_neighbor_rows(folder, {"train": images}, {"train": np.arange(count)[:, None] * 5
                                                                    + np.arange(5)},
                                        ImageNeighborOptions("features"), progress=False)  # features now cached
            search = time.perf_counter() - started
            print(f"features, {name} with N = {count}: read + reduce {read:.2f} s, neighbours (k = 200) "
                  f"{search:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenes", type=int, default=3000)
    parser.add_argument("--image_size", type=int, default=64, help="the synthetic scenes' side")
    parser.add_argument("--backbone_images", type=int, default=256)
    parser.add_argument("--feature_images", type=int, default=5000)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}")
    pixels(args.scenes, args.image_size)
    features(args.feature_images)
    backbone(args.backbone_images)
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()

"""Input pipeline, images/s: JPEG decode + random crop + flip + resize to 224 + batching, kitm's tf.data pipeline
against a PyTorch DataLoader with the same number of workers (2), interleaved; and the ceiling, decode alone.

The images are JPEGs of Flickr/COCO size (500 x 375, quality 90, smooth random content plus noise), written by the
script (`--images`, default 512). Both sides read the same files and do the same work per image:

* kitm: `tf.data` over the file names, `tf.io.read_file` + `kitm.ops.images.decode_image` + kitm's training
  augmentation `kitm.data.pipeline.train_image` (the stateless random crop of 80-100% of the area with aspect 3/4-4/3,
  antialiased resize to 224, random flip), per-sample seeds as the training pipeline draws them, batches of 128,
  prefetch; a private thread pool of 2 threads (`--workers`). Like for like with JPEG files rather than the records:
  the records add the caption parsing and tokenizing the peer has no counterpart for, and read the same JPEG bytes.
* peer: `torch.utils.data.DataLoader(num_workers=2, batch_size=128, shuffle=True)` whose dataset opens each file
  with PIL and applies torchvision's RandomResizedCrop(224, scale=(0.8, 1), ratio=(3/4, 4/3)), RandomHorizontalFlip
  and ToTensor. torchvision itself cannot be used with the CPU torch of this environment: the only torchvision
  matching torch 2.13 (0.28.0) is the CUDA build, whose `_C` extension needs libtorch_cuda and fails to import. So the
  three transforms are re-created here with PIL + torch exactly as torchvision applies them to PIL images (its
  `RandomResizedCrop.get_params` sampling, `PIL.Image.resize(BILINEAR)` on the crop box, `transpose(FLIP_LEFT_RIGHT)`,
  `ToTensor`'s uint8 -> float CHW / 255).

Each timed block is `--epochs` passes over the images with a fresh iterator on both sides (the DataLoader starts its
workers per epoch, its default, and tf.data fills its buffers), kitm and the peer alternating. Printed: images/s of
each side and the ratio of seconds per image (kitm/peer; below 1 = kitm faster).

    python benchmarks/bench_input_pipeline.py [--images 512] [--repeats 5] [--epochs 2] [--quick]
"""

from __future__ import annotations

import argparse
import math
import os
import pathlib
import random

import numpy as np

import _sidebyside as side


def write_jpegs(folder: pathlib.Path, count: int, size=(500, 375)) -> list:
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    paths = []
    for i in range(count):
        path = folder / f"{i:05d}.jpg"
        paths.append(str(path))
        if path.exists():
            continue
        width, height = size
        coarse = rng.random((height // 25 + 1, width // 25 + 1, 3)) * 255
        smooth = np.asarray(Image.fromarray(coarse.astype(np.uint8)).resize((width, height), Image.BICUBIC), np.float32)
        pixels = np.clip(smooth + rng.normal(0, 12, smooth.shape), 0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(path, quality=90)
    return paths


# --- the peer: torchvision's transforms on PIL images, re-created (module docstring) -------------------------------

def random_resized_crop_params(width, height, scale, ratio):
    """torchvision.transforms.RandomResizedCrop.get_params: (top, left, h, w)."""
    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target_area = area * random.uniform(*scale)
        aspect_ratio = math.exp(random.uniform(*log_ratio))
        w = int(round(math.sqrt(target_area * aspect_ratio)))
        h = int(round(math.sqrt(target_area / aspect_ratio)))
        if 0 < w <= width and 0 < h <= height:
            return random.randint(0, height - h), random.randint(0, width - w), h, w
    in_ratio = float(width) / float(height)  # fallback to a central crop
    if in_ratio < min(ratio):
        w, h = width, int(round(width / min(ratio)))
    elif in_ratio > max(ratio):
        h, w = height, int(round(height * max(ratio)))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


class JpegDataset:
    def __init__(self, paths, size=224, scale=(0.8, 1.0), ratio=(3 / 4, 4 / 3), augment=True):
        self.paths, self.size, self.scale, self.ratio, self.augment = paths, size, scale, ratio, augment

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, index):
        import torch
        from PIL import Image

        with open(self.paths[index], "rb") as handle:  # torchvision's pil_loader
            image = Image.open(handle).convert("RGB")
        if self.augment:
            top, left, h, w = random_resized_crop_params(image.width, image.height, self.scale, self.ratio)
            image = image.crop((left, top, left + w, top + h)).resize((self.size, self.size), Image.BILINEAR)
            if random.random() < 0.5:
                image = image.transpose(Image.FLIP_LEFT_RIGHT)
        array = torch.from_numpy(np.array(image, np.uint8, copy=True))  # ToTensor
        return array.permute(2, 0, 1).contiguous().float().div(255)


def peer_loader(paths, batch, workers, augment):
    import torch

    return torch.utils.data.DataLoader(JpegDataset(paths, augment=augment), batch_size=batch, shuffle=True,
                                       num_workers=workers)


# --- kitm ------------------------------------------------------------------------------------------------------------

def kitm_dataset(paths, batch, workers, augment):
    import tensorflow as tf

    from kitm.data.pipeline import PipelineConfig, train_image
    from kitm.ops.images import decode_image

    config = PipelineConfig(batch_size=batch, image_size=224, crop_area=(0.8, 1.0), flip=True)
    files = tf.data.Dataset.from_tensor_slices(paths).shuffle(len(paths), seed=0, reshuffle_each_iteration=True)
    seeds = tf.data.Dataset.random(seed=0, rerandomize_each_iteration=True).batch(2)

    def load(path, seed):
        image = decode_image(tf.io.read_file(path))
        return train_image(image, config, seed) if augment else image

    dataset = tf.data.Dataset.zip(files, seeds).map(load, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    dataset = dataset.batch(batch).prefetch(tf.data.AUTOTUNE)
    options = tf.data.Options()
    options.threading.private_threadpool_size = workers
    return dataset.with_options(options)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=512)
    parser.add_argument("--folder", default="/tmp/kitm_bench/jpegs")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=2, help="passes over the images per timed block")
    parser.add_argument("--quick", action="store_true", help="64 images, batch 32, 2 pairs: the smoke test")
    args = parser.parse_args()
    if args.quick:
        args.images, args.batch, args.repeats, args.epochs = 64, 32, 2, 1
    import tensorflow as tf
    import torch

    print("before: " + side.load_average(), flush=True)
    paths = write_jpegs(pathlib.Path(args.folder), args.images)
    size_kb = sum(os.path.getsize(p) for p in paths) / len(paths) / 1024
    print(f"{len(paths)} JPEGs of 500 x 375 ({size_kb:.0f} KB each), batch {args.batch}, {args.workers} workers "
          f"(tf.data private thread pool / DataLoader processes); TensorFlow {tf.__version__}, torch {torch.__version__}",
          flush=True)
    results = []
    for augment, label in ((True, "decode+crop+flip+resize224+batch"), (False, "decode alone (ceiling)")):
        # Decode alone batches too: the generated JPEGs all have one size.
        kitm = kitm_dataset(paths, args.batch, args.workers, augment)
        peer = peer_loader(paths, args.batch, args.workers, augment)

        def run_kitm():
            for _ in range(args.epochs):
                for element in kitm:
                    element.numpy()

        def run_peer():
            for _ in range(args.epochs):
                for element in peer:
                    element.numpy()

        print(label, flush=True)
        comparison = side.interleaved(label, run_kitm, run_peer, repeats=args.repeats, warmup=1, unit="s")
        per_block = args.epochs * len(paths)
        print(f"  images/s: kitm {per_block / np.median(comparison.kitm):.0f}, peer "
              f"{per_block / np.median(comparison.peer):.0f}", flush=True)
        results.append((comparison, per_block))
    print("after: " + side.load_average())
    print("summary (kitm/peer seconds per image, median of pairs; below 1 = kitm faster):")
    for comparison, per_block in results:
        print(f"  {comparison.summary()}; images/s kitm {per_block / np.median(comparison.kitm):.0f}, "
              f"peer {per_block / np.median(comparison.peer):.0f}")


if __name__ == "__main__":
    main()

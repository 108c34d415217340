"""Neighbour coverage of neighbour-aware batching: the share of batch rows whose semantic neighbour is in the batch.

Thomas & Kovashka's within-modality terms need each anchor's sampled neighbour i' (one of the k nearest captions of text
i) in the same batch. The script reads a built dataset's neighbour rows (no images) and prints, at batch 128,

* random batches (what an ordinary shuffled pipeline gives): rows that meet any of their k neighbours;
* paired batches, partner drawn uniformly among all k neighbours;
* paired batches, partner drawn among mutual neighbours when there are any (kitm's default);

plus the time to plan one batch. Target: at least 90% with the default. `--space image` reads the image-space
neighbour rows instead (Thomas & Kovashka's "Img NNs" variant; a dataset built with --image_neighbors).

    python benchmarks/bench_neighbor_batching.py --data_dir /tmp/f8k_captions [--batch 128] [--batches 200]
    python benchmarks/bench_neighbor_batching.py --data_dir /tmp/synthetic_imgnn --space image
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import kitm  # noqa: F401,E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from kitm.data import schema  # noqa: E402
from kitm.data.neighbor_batching import mutual_mask, neighbor_positions, neighbor_table, plan_coverage  # noqa: E402


def random_batch_coverage(positions: np.ndarray, batch: int, batches: int, seed: int = 0) -> float:
    generator = np.random.default_rng(seed)
    table = tf.constant(positions.astype(np.int32))
    shares = []
    for _ in range(batches):
        rows = tf.constant(generator.choice(len(positions), batch, replace=False), tf.int32)
        shares.append(float(tf.reduce_mean(tf.cast(neighbor_positions(rows, table) >= 0, tf.float32))))
    return float(np.mean(shares))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data_dir", required=True)
    parser.add_argument("--split", default="train")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--space", choices=("text", "image"), default="text",
                        help="neighbour rows: text (neighbors slot) or image (image_neighbors slot)")
    args = parser.parse_args()
    info = schema.load_info(args.data_dir)
    started = time.perf_counter()
    _, _, positions = neighbor_table(info, args.data_dir, args.split, args.space)
    mutual = mutual_mask(positions)
    print(f"{args.data_dir} {args.split} ({args.space} space): {len(positions)} captions, k = {positions.shape[1]}; "
          "neighbour table read "
          f"in {time.perf_counter() - started:.1f} s; {mutual.any(axis=1).mean():.1%} of captions have a mutual "
          f"neighbour; load average {os.getloadavg()[0]:.1f}")
    print(f"random batches of {args.batch}:            {random_batch_coverage(positions, args.batch, args.batches):.1%}")
    started = time.perf_counter()
    uniform = plan_coverage(positions, args.batch, "uniform", batches=args.batches)
    mutual_share = plan_coverage(positions, args.batch, "mutual", batches=args.batches)
    per_batch = (time.perf_counter() - started) / (2 * args.batches) * 1e3
    print(f"paired batches, uniform partner:  {uniform:.1%}")
    print(f"paired batches, mutual partner:   {mutual_share:.1%}   (kitm default; {per_batch:.1f} ms to plan a batch)")


if __name__ == "__main__":
    main()

"""`python -m kitm.data.build`: turn a dataset into kitm TFRecords.

    python -m kitm.data.build --dataset=synthetic --out=tfrecords/synthetic [--num_scenes=3000 --seed=0]
    python -m kitm.data.build --dataset=karpathy --karpathy_json=dataset_flickr8k.json \
        --images=/data/Flicker8k_Dataset --out=tfrecords/f8k

Only kitm/launch.py uses absl flags; this command line is argparse (it also accepts --flag=value).
"""

from __future__ import annotations

import argparse
import sys

from kitm.data.errors import KitmDataError

DATASETS = ("synthetic", "karpathy")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m kitm.data.build", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", required=True, choices=DATASETS)
    parser.add_argument("--out", required=True, help="output folder, e.g. tfrecords/synthetic")
    parser.add_argument("--num_shards", type=int, default=4, help="shards for the training split")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    synthetic = parser.add_argument_group("synthetic")
    synthetic.add_argument("--num_scenes", type=int, default=3000)
    synthetic.add_argument("--seed", type=int, default=0)
    synthetic.add_argument("--image_size", type=int, default=64)
    karpathy = parser.add_argument_group("karpathy")
    karpathy.add_argument("--karpathy_json", help="dataset_coco.json / dataset_flickr30k.json / dataset_flickr8k.json")
    karpathy.add_argument("--images", help="folder holding the images named in the JSON")
    karpathy.add_argument("--missing_images", choices=("stop", "skip"), default="stop",
                          help="an image named in the JSON but absent on disk: stop, or skip it and count it")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.dataset == "synthetic":
            from kitm.data.synthetic_records import build_synthetic

            if args.num_scenes < 10:
                raise KitmDataError(f"--num_scenes must be at least 10; got {args.num_scenes}.")
            info = build_synthetic(args.out, num_scenes=args.num_scenes, seed=args.seed,
                                   image_size=args.image_size, num_shards=args.num_shards, progress=not args.quiet)
        else:
            from kitm.data.karpathy import build_karpathy

            if not args.karpathy_json or not args.images:
                raise KitmDataError("--dataset=karpathy needs --karpathy_json and --images.")
            info = build_karpathy(args.out, args.karpathy_json, args.images, num_shards=args.num_shards,
                                  missing_images=args.missing_images, progress=not args.quiet)
    except KitmDataError as error:
        print(f"kitm.data.build: error: {error}", file=sys.stderr)
        return 2
    counts = ", ".join(f"{split}: {entry['num_images']} images" for split, entry in info.splits.items())
    print(f"Wrote {args.out} ({counts}).")
    return 0


if __name__ == "__main__":
    sys.exit(main())

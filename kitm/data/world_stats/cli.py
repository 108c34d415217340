"""The command line of `python -m kitm.data.world_stats` (argparse, like `python -m kitm.data.build`).

    python -m kitm.data.world_stats --data_dir=tfrecords/synthetic --reference=<Flickr8k_text folder>
    python -m kitm.data.world_stats --world=things,shapes --reference=<Flickr8k_text folder> --plot=worlds.png
    python -m kitm.data.world_stats --data_dir=tfrecords/my_photos --reference=my_captions.csv --json=stats.json
"""

from __future__ import annotations

import argparse
import os
import sys

from kitm.errors import KitmError
from kitm.relevance.world_truth import WORLDS
from kitm.tensorflow_logs import quiet_tensorflow_logs


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m kitm.data.world_stats",
                                     description="How much a dataset's captions look like real captions.")
    parser.add_argument("--data_dir", action="append", default=[],
                        help="a built dataset to describe (repeat the flag for several)")
    parser.add_argument("--world", default="", help=f"synthetic worlds generated in memory, comma-separated among "
                        f"{', '.join(WORLDS)} (with --num_scenes, --seed, --image_size, --caption_style)")
    parser.add_argument("--num_scenes", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--image_size", type=int, default=64)
    parser.add_argument("--caption_style", choices=("literal", "complementary"), default="literal")
    parser.add_argument("--split", default="test", help="the split of the datasets and worlds (default test)")
    parser.add_argument("--reference", default=None, help="Flickr8K's text folder (Flickr8k.token.txt and the "
                        "split lists), a caption table (.csv / .jsonl) or a built dataset")
    parser.add_argument("--reference_split", default="test")
    parser.add_argument("--max_images", type=int, default=1000,
                        help="images per source for the pairs (the first ones; the cost grows with the square)")
    parser.add_argument("--vocabulary_images", type=int, default=300,
                        help="images whose captions the vocabulary counts (equal for every source)")
    parser.add_argument("--sentence_model", default=None,
                        help="sentence-transformers model (local); default the bundled all-MiniLM-L6-v2")
    parser.add_argument("--json", default=None, help="also write the figures as JSON here")
    parser.add_argument("--plot", default=None, help="also draw the non-matching distributions into this PNG")
    parser.add_argument("--examples_png", default=None,
                        help="also draw the first --examples images of the first source with their captions here")
    parser.add_argument("--examples", type=int, default=6)
    parser.add_argument("--check", action="store_true",
                        help="exit with status 1 when a source misses one of the calibration goals")
    return parser


def _named_sources(args) -> list[tuple[str, list[list[str]]]]:
    from kitm.data.world_stats.sources import dataset_groups, first_images, world_groups

    sources = [(os.path.basename(os.path.normpath(path)) or path, dataset_groups(path, args.split))
               for path in args.data_dir]
    for world in [w for w in args.world.split(",") if w]:
        if world not in WORLDS:
            raise KitmError(f"--world={world}: kitm's worlds are {', '.join(WORLDS)}.")
        groups = world_groups(world, num_scenes=args.num_scenes, seed=args.seed, image_size=args.image_size,
                              caption_style=args.caption_style, split=args.split)
        sources.append((f"{world} world", groups))
    if not sources:
        raise KitmError("Nothing to describe: give --data_dir (a built dataset) or --world (generated in memory).")
    return [(name, first_images(groups, args.max_images)) for name, groups in sources]


def run(args) -> int:
    from kitm.data.world_stats.report import comparison_table, goals_table, plot_distributions
    from kitm.data.world_stats.sources import first_images, reference_groups
    from kitm.data.world_stats.statistics import caption_statistics, goals

    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the bundled model is local; never reach for a hub
    options = {"vocabulary_images": args.vocabulary_images, "sentence_model": args.sentence_model}
    stats = [caption_statistics(groups, name=name, **options) for name, groups in _named_sources(args)]
    reference = None
    if args.reference is not None:
        groups = first_images(reference_groups(args.reference, args.reference_split), args.max_images)
        reference = caption_statistics(groups, name=os.path.basename(os.path.normpath(args.reference)), **options)
    print(comparison_table(stats, reference))
    missed = False
    for source in stats if reference is not None else ():
        print()
        print(goals_table(source, reference))
        missed |= not all(met for _, _, met in goals(source, reference))
    if args.json is not None:
        from kitm.files import write_json_atomically

        payload = {"sources": [s.as_dict() for s in stats], "reference": reference and reference.as_dict(),
                   "goals": {s.name: [{"goal": g, "value": v, "met": m} for g, v, m in goals(s, reference)]
                             for s in stats} if reference is not None else {}}
        write_json_atomically(args.json, payload)
    if args.plot is not None:
        plot_distributions(stats, reference, args.plot)
    if args.examples_png is not None:
        _draw_examples(args)
    return 1 if args.check and missed else 0


def _draw_examples(args) -> None:
    from kitm.data.world_stats.report import plot_examples
    from kitm.data.world_stats.sources import dataset_examples, world_examples

    if args.data_dir:
        images, groups = dataset_examples(args.data_dir[0], args.examples, args.split)
        if images is None:
            raise KitmError(f"--examples_png: {args.data_dir[0]} stores no pixels to draw.")
        name = args.data_dir[0]
    else:
        world = [w for w in args.world.split(",") if w][0]
        images, groups = world_examples(world, args.examples, num_scenes=args.num_scenes, seed=args.seed,
                                        image_size=args.image_size, caption_style=args.caption_style,
                                        split=args.split)
        name = f"the {world} world (seed {args.seed}, {args.split} split)"
    plot_examples(images, groups, args.examples_png, title=f"The first {len(images)} images of {name}")


def main(argv=None) -> None:
    args = build_parser().parse_args(argv)
    quiet_tensorflow_logs()
    try:
        status = run(args)
    except (KitmError, ValueError, OSError) as error:
        print(f"python -m kitm.data.world_stats: {error}", file=sys.stderr)
        sys.exit(2)
    sys.exit(status)

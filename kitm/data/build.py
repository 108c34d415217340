"""`python -m kitm.data.build`: turn a dataset into kitm TFRecords with relevance rows.

    python -m kitm.data.build --dataset=synthetic --out=tfrecords/synthetic [--num_scenes=3000 --seed=0]
    python -m kitm.data.build --dataset=karpathy --karpathy_json=dataset_flickr8k.json \
        --images=/data/Flicker8k_Dataset --out=tfrecords/f8k
    python -m kitm.data.build --dataset=flickr8k --flickr8k_dir=/data/Flickr8k_text \
        [--images=/data/Flicker8k_Dataset] --out=tfrecords/f8k
    python -m kitm.data.build --dataset=coco_captions \
        --coco_captions=captions_train2014.json,captions_val2014.json --karpathy_json=dataset_coco.json \
        [--images=/data/coco] --out=tfrecords/coco
    python -m kitm.data.build --dataset=precomputed --features_dir=/data/vsepp --name=f30k_precomp \
        --out=tfrecords/f30k_precomp
    python -m kitm.data.build --dataset=captions_table --captions=my_photos.csv --images=/data/my_photos \
        --out=tfrecords/my_photos     # your own data: open_clip's CSV (filepath<TAB>title) or JSON Lines

Every build stores the relevance rows of --relevance (default cider,sbert,neighbors; "none" for none), writes
shards under temporary names, and resumes a killed build (same flags and --out) without redoing finished shards.
--image_neighbors=features|pixels|backbone adds image-space neighbour rows (Thomas & Kovashka's "Img NNs" variant;
kitm.relevance.image_features), e.g.

    python -m kitm.data.build --dataset=karpathy ... --image_neighbors=backbone   # frozen ImageNet ResNet-50
    python -m kitm.data.build --dataset=precomputed ... --image_neighbors=features
    python -m kitm.data.build --dataset=synthetic --out=tfrecords/synthetic_imgnn --image_neighbors=pixels
Only kitm/launch.py uses absl flags; this command line is argparse (it also accepts --flag=value).
"""

from __future__ import annotations

import argparse
import os
import sys

from kitm.errors import KitmDataError, KitmError
from kitm.files import no_room_error
from kitm.relevance.image_features import BACKBONES, IMAGE_NEIGHBOR_SPACES
from kitm.relevance.world_truth import DEFAULT_WORLD, WORLDS
from kitm.tensorflow_logs import quiet_tensorflow_logs

DATASETS = ("synthetic", "karpathy", "flickr8k", "coco_captions", "precomputed", "captions_table")


def _tower_source(source: str) -> str:
    """--image_features_run as the build records it: a shipped tower's name as it is, a path made absolute."""
    from kitm.layers.image_encoders import SHIPPED_TOWERS

    return source if source in SHIPPED_TOWERS else os.path.abspath(source)


def _relevance(text: str) -> tuple[str, ...]:
    from kitm.data.converter_common import relevance_sources

    try:
        return relevance_sources(text)
    except KitmDataError as error:
        raise argparse.ArgumentTypeError(str(error)) from error


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m kitm.data.build", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", required=True, choices=DATASETS)
    parser.add_argument("--out", required=True, help="output folder, e.g. tfrecords/synthetic")
    parser.add_argument("--num_shards", type=int, default=4,
                        help="shards for the training split (val and test get a quarter, at least one)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    _add_relevance_arguments(parser)
    _add_converter_arguments(parser)
    _add_source_arguments(parser)
    return parser


def _add_relevance_arguments(parser: argparse.ArgumentParser) -> None:
    """The relevance rows and the image-space neighbour rows every build can store."""
    relevance = parser.add_argument_group("relevance rows (kitm.relevance.rows)")
    relevance.add_argument("--relevance", type=_relevance, default=("cider", "sbert", "neighbors"),
                           help="comma-separated row sources among cider, sbert, neighbors, or 'none' "
                                "(default: all three)")
    relevance.add_argument("--sentence_model", default=None,
                           help="sentence-transformers model name (in the local cache) or folder; default the "
                                "bundled all-MiniLM-L6-v2")
    relevance.add_argument("--neighbors_k", type=int, default=200, help="neighbours stored per caption (and per "
                           "image for --image_neighbors)")
    image = parser.add_argument_group("image-space neighbour rows, Thomas & Kovashka's Img NNs "
                                      "(kitm.relevance.image_features)")
    image.add_argument("--image_neighbors", choices=IMAGE_NEIGHBOR_SPACES, default="none",
                       help="also store each caption's neighbours found among the images: features (the stored "
                            "vectors of --dataset=precomputed; SCAN regions averaged), backbone (pooled features of "
                            "a frozen ResNet, --image_neighbors_weights=imagenet), pixels (downsampled, mean-centred "
                            "pixels; no weights, the synthetic world's space); default none")
    image.add_argument("--image_neighbors_backbone", choices=BACKBONES, default="resnet50",
                       help="backbone: the ResNet (Thomas & Kovashka: resnet50)")
    image.add_argument("--image_neighbors_weights", default="imagenet",
                       help="backbone: imagenet (Keras loads them from ~/.keras/models, downloading them once), none "
                            "(random weights, tests only) or a Keras weights file")
    image.add_argument("--image_neighbors_size", type=int, default=224, help="backbone: input side (centre crop "
                       "0.875 of the shorter side, resized)")
    image.add_argument("--image_neighbors_batch", type=int, default=32, help="backbone: images per batch")
    image.add_argument("--image_neighbors_pixels", type=int, default=16, help="pixels: side of the downsampled image")


def _add_converter_arguments(parser: argparse.ArgumentParser) -> None:
    """What the converters do with odd input, the split sizes, and the synthetic world's settings."""
    common = parser.add_argument_group("converters (all but synthetic)")
    common.add_argument("--limit", type=int, default=None,
                        help="only the first N images of each split (quick builds and tests)")
    common.add_argument("--missing_images", choices=("stop", "skip"), default="stop",
                        help="an image named by the source but absent on disk (captions_table: or not a file, or "
                             "one that does not decode): stop naming it, or skip it and count it (captions_table: "
                             "and list it)")
    common.add_argument("--empty_captions", choices=("stop", "skip"), default="stop",
                        help="an empty caption: stop naming it, or drop it and count it (the image then needs "
                             "five other captions, see --few_captions)")
    common.add_argument("--few_captions", choices=("stop", "skip", "repeat"), default=None,
                        help="an image with fewer captions than the dataset keeps (five; captions_table: "
                             "--captions_per_image): stop naming it (default), or leave it out and count it "
                             "(skip; captions_table's default), or fill it up by repeating its captions cyclically "
                             "(repeat; captions_table only, counted: repeats inflate R@K a little)")
    common.add_argument("--images", help="image folder (karpathy: required; flickr8k, coco_captions: optional, "
                                         "without it the dataset is captions-only; captions_table: the folder "
                                         "relative paths start from, default the table's folder)")
    splits = parser.add_argument_group("split sizes (synthetic, and captions_table without --split_column)")
    splits.add_argument("--val_images", default=None, help="validation images, a count (500), a fraction (0.05) or "
                        "auto; auto: synthetic 10%%, captions_table 5%% (at least 2, at most 1000); 0 for none")
    splits.add_argument("--test_images", default=None, help="test images, as --val_images")
    synthetic = parser.add_argument_group("synthetic")
    synthetic.add_argument("--num_scenes", type=int, default=3000)
    synthetic.add_argument("--seed", type=int, default=0)
    synthetic.add_argument("--image_size", type=int, default=64)
    synthetic.add_argument("--world", choices=WORLDS, default=DEFAULT_WORLD,
                           help="things: everyday objects in settings with captions like people's (the default); "
                                "shapes: the coloured shapes of kitm's first claims studies (to reproduce them)")
    synthetic.add_argument("--near_duplicate_rate", type=float, default=None,
                           help="probability that a scene is an earlier one with one change (default the world's: "
                                "things 0.05, shapes 0.35): more near-duplicates, more captions that fit several "
                                "images")
    synthetic.add_argument("--caption_style", choices=("literal", "complementary"), default="literal",
                           help="literal: captions describe what is drawn (COCO-like); complementary: captions name "
                                "a story and materials that are not drawn and mention one object vaguely "
                                "(news-like, the non-literal world)")
    synthetic.add_argument("--image_features_run", default=None,
                           help="store a frozen image tower's features instead of pixels: image mode 'feature', for "
                                "--image_encoder=features_mlp (the papers' frozen precomputed features). A trained "
                                "run (its exported SavedModel's image embeddings, e.g. trained on a world of another "
                                "--seed), or a small_cnn tower file (.npz) or shipped name (things: the things "
                                "world's tower, features before any projection)")


def _add_source_arguments(parser: argparse.ArgumentParser) -> None:
    """Where each converter reads its dataset from."""
    karpathy = parser.add_argument_group("karpathy, coco_captions")
    karpathy.add_argument("--karpathy_json", help="dataset_coco.json / dataset_flickr30k.json / dataset_flickr8k.json")
    flickr8k = parser.add_argument_group("flickr8k")
    flickr8k.add_argument("--flickr8k_dir",
                          help="folder with Flickr8k.token.txt and Flickr_8k.{train,dev,test}Images.txt")
    coco = parser.add_argument_group("coco_captions")
    coco.add_argument("--coco_captions", help="comma-separated COCO caption files, e.g. "
                                              "captions_train2014.json,captions_val2014.json")
    table = parser.add_argument_group("captions_table: your own CSV or JSON Lines of image path + caption "
                                      "(kitm.data.captions_table)")
    table.add_argument("--captions", help="the table: .csv/.tsv (header row) or .jsonl/.ndjson (one object per line)")
    table.add_argument("--captions_format", choices=("auto", "csv", "jsonl"), default="auto",
                       help="the table's format; auto: from the file name")
    table.add_argument("--image_column", default="filepath", help="column (JSON key) of the image paths (open_clip's "
                       "--csv-img-key default)")
    table.add_argument("--caption_column", default="title", help="column (JSON key) of the captions (open_clip's "
                       "--csv-caption-key default)")
    table.add_argument("--split_column", default=None, help="column (JSON key) holding train, val or test; without "
                       "it the images are split at random (--val_images, --test_images, --split_seed)")
    table.add_argument("--csv_separator", default="auto", help="CSV field separator: a character, or tab; auto: tab "
                       "when the header line holds one (open_clip's --csv-separator default), else a comma")
    table.add_argument("--captions_per_image", default="auto", help="captions kept per image (C); auto: the count "
                       "the most images have. Images with more keep their first C; fewer: see --few_captions")
    table.add_argument("--split_seed", type=int, default=0, help="random split: the seed of the draw")
    precomputed = parser.add_argument_group("precomputed (VSE++ / SCAN)")
    precomputed.add_argument("--features_dir", help="folder holding <name>/{split}_ims.npy and {split}_caps.txt")
    precomputed.add_argument("--name", help="the feature set's folder and dataset name, e.g. f30k_precomp")


def _need(args, dataset: str, *names: str) -> None:
    missing = [f"--{name}" for name in names if not getattr(args, name)]
    if missing:
        raise KitmDataError(f"--dataset={dataset} needs {' and '.join(missing)}.")


def image_neighbor_options(args: argparse.Namespace):
    """The --image_neighbors* flags as `ImageNeighborOptions` (None for --image_neighbors=none)."""
    from kitm.relevance.image_features import ImageNeighborOptions

    if args.image_neighbors == "none":
        return None
    weights = None if args.image_neighbors_weights.lower() == "none" else args.image_neighbors_weights
    return ImageNeighborOptions(args.image_neighbors, pixel_side=args.image_neighbors_pixels,
                                backbone=args.image_neighbors_backbone, weights=weights,
                                image_size=args.image_neighbors_size, batch_size=args.image_neighbors_batch)


def synthetic_split_counts(num_scenes: int, val_images=None, test_images=None) -> list[int] | None:
    """(train, val, test) scenes for --val_images / --test_images (counts, fractions or auto = 10%); None when
    neither is given, so the world keeps its default 80/10/10 split bit for bit."""
    if val_images is None and test_images is None:
        return None
    from kitm.data.captions_table import split_sizes

    default = "0.1"  # the synthetic world's own share when only the other split is given
    val, test = split_sizes(num_scenes, default if val_images in (None, "auto") else val_images,
                            default if test_images in (None, "auto") else test_images)
    return [num_scenes - val - test, val, test]


def run(args: argparse.Namespace):
    """Build the dataset `args` describe; returns its DatasetInfo."""
    image_neighbors = image_neighbor_options(args)
    rows = {"relevance": args.relevance, "sentence_model": args.sentence_model, "neighbors_k": args.neighbors_k,
            "num_shards": args.num_shards, "progress": not args.quiet, "image_neighbors": image_neighbors}
    few_captions = args.few_captions or ("skip" if args.dataset == "captions_table" else "stop")
    if few_captions == "repeat" and args.dataset != "captions_table":
        raise KitmDataError(f"--few_captions=repeat is for --dataset=captions_table; --dataset={args.dataset} "
                            "takes stop or skip (its benchmarks compare runs on five distinct captions per image).")
    captions = {"empty_captions": args.empty_captions, "few_captions": few_captions, "limit": args.limit}
    if args.dataset == "synthetic":
        from kitm.data.converter_common import claim_output, image_neighbor_parameters
        from kitm.data.synthetic_records import build_synthetic

        if args.num_scenes < 10:
            raise KitmDataError(f"--num_scenes must be at least 10; got {args.num_scenes}.")
        if args.limit is not None:
            raise KitmDataError("--limit does not apply to --dataset=synthetic; use --num_scenes.")
        counts = synthetic_split_counts(args.num_scenes, args.val_images, args.test_images)
        if args.near_duplicate_rate is not None and not 0.0 <= args.near_duplicate_rate <= 1.0:
            raise KitmDataError(f"--near_duplicate_rate must be in [0, 1]; got {args.near_duplicate_rate}.")
        claim_output(args.out, {"dataset": "synthetic", "num_scenes": args.num_scenes, "seed": args.seed,
                                "image_size": args.image_size, "num_shards": args.num_shards,
                                "relevance": list(args.relevance), "sentence_model": args.sentence_model,
                                "neighbors_k": args.neighbors_k, **image_neighbor_parameters(image_neighbors),
                                **({} if counts is None else {"split_counts": counts}),
                                **({} if args.near_duplicate_rate is None
                                   else {"near_duplicate_rate": args.near_duplicate_rate}),
                                **({} if args.caption_style == "literal" else {"caption_style": args.caption_style}),
                                "world": args.world,
                                **({} if args.image_features_run is None
                                   else {"image_features_run": _tower_source(args.image_features_run)})})
        features = None
        if args.image_features_run is not None:
            from kitm.serving.image_features import frozen_image_features

            try:
                features = frozen_image_features(args.image_features_run)
            except (FileNotFoundError, ValueError) as error:
                raise KitmDataError(f"--image_features_run={args.image_features_run}: {error}") from None
        return build_synthetic(args.out, num_scenes=args.num_scenes, seed=args.seed, image_size=args.image_size,
                               split_counts=counts, near_duplicate_rate=args.near_duplicate_rate,
                               caption_style=args.caption_style, world=args.world, image_features=features, **rows)
    if args.dataset == "karpathy":
        from kitm.data.karpathy import build_karpathy

        _need(args, "karpathy", "karpathy_json", "images")
        return build_karpathy(args.out, args.karpathy_json, args.images, missing_images=args.missing_images,
                              **captions, **rows)
    if args.dataset == "flickr8k":
        from kitm.data.flickr8k import build_flickr8k

        _need(args, "flickr8k", "flickr8k_dir")
        return build_flickr8k(args.out, args.flickr8k_dir, args.images, missing_images=args.missing_images,
                              **captions, **rows)
    if args.dataset == "coco_captions":
        from kitm.data.coco_captions import build_coco_captions

        _need(args, "coco_captions", "coco_captions", "karpathy_json")
        files = [path.strip() for path in args.coco_captions.split(",") if path.strip()]
        return build_coco_captions(args.out, files, args.karpathy_json, args.images,
                                   missing_images=args.missing_images, **captions, **rows)
    if args.dataset == "captions_table":
        from kitm.data.captions_table import build_captions_table

        _need(args, "captions_table", "captions")
        return build_captions_table(
            args.out, args.captions, args.images, image_column=args.image_column, caption_column=args.caption_column,
            split_column=args.split_column, csv_separator=args.csv_separator, captions_format=args.captions_format,
            captions_per_image=args.captions_per_image, val_images=args.val_images, test_images=args.test_images,
            split_seed=args.split_seed, missing_images=args.missing_images, **captions, **rows)
    from kitm.data.precomputed import build_precomputed

    _need(args, "precomputed", "features_dir")
    return build_precomputed(args.out, args.features_dir, args.name, **captions, **rows)


def main(argv: list[str] | None = None) -> int:
    quiet_tensorflow_logs()  # before TensorFlow is imported (parsing --relevance already imports it)
    args = build_parser().parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # kitm never downloads a sentence model
    try:
        info = run(args)
    except KeyboardInterrupt:  # Ctrl-C, often inside torch or TensorFlow: their traceback says nothing useful
        print(f"kitm.data.build: interrupted (Ctrl-C). Nothing half-written is left under a final name in {args.out}; "
              "its finished shards and relevance caches are kept, and the same command resumes from them.",
              file=sys.stderr)
        return 130  # the shell's status for a SIGINT
    except Exception as error:  # re-raised below unless it is one of those named
        # A full disk or a file-size limit, from Python or TensorFlow's writers, named with its file (kitm.files).
        error = (None if isinstance(error, KitmError) else no_room_error(error)) or error
        if not isinstance(error, (KitmDataError, OSError)):  # OSError: e.g. a --sentence_model not available offline
            raise
        message = error.for_flags() if isinstance(error, KitmError) else str(error)  # options as this CLI's flags
        print(f"kitm.data.build: error: {message}", file=sys.stderr)
        return 2
    counts = ", ".join(f"{split}: {entry['num_images']} images" for split, entry in info.splits.items())
    slots = ", ".join(sorted(info.relevance)) or "none"
    print(f"Wrote {args.out} ({counts}; image mode {info.image_mode}; relevance slots {slots}).")
    return 0


if __name__ == "__main__":
    sys.exit(main())

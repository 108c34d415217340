"""``python -m kitm.index``: embed a folder of photos, or a built dataset's split, into a searchable index.

    python -m kitm.index --run=runs/demo --out=indexes/demo                      # the run's dataset, split test
    python -m kitm.index --run=runs/demo --images=tfrecords/synthetic --split=all --out=indexes/world
    python -m kitm.index --run=runs/my_photos --images=~/Pictures --out=indexes/pictures

Every image is embedded with the run's newest SavedModel (``export/<n>``, or ``--export_dir``), in batches with a
progress bar, and so is every caption where the data has them; the vectors go into faiss (exact search up to
``--exact_threshold`` images, an HNSW graph with its measured recall above). A killed build resumes when the same
command is run again. ``python -m kitm.search --index=<out>`` serves the result. Bad input ends with one line
``kitm.index: error: ...`` on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from kitm.errors import CliError, KitmError, OneLineArgumentParser
from kitm.files import no_room_error
from kitm.index.build import DEFAULT_CHUNK, BuildOptions
from kitm.index.vectors import DEFAULT_EXACT_THRESHOLD, DEFAULT_TARGET_RECALL
from kitm.tensorflow_logs import quiet_tensorflow_logs

PROG = "kitm.index"
EXIT_BAD_INPUT = 2


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(prog=f"python -m {PROG}",
                                   formatter_class=argparse.RawDescriptionHelpFormatter,
                                   description="Embed a folder of photos, or a built dataset's split, into a "
                                               "searchable index (faiss).")
    model = parser.add_argument_group("the model (one of --run, --export_dir)")
    model.add_argument("--run", help="Run directory of python -m kitm.launch: its newest SavedModel export/<n> "
                                     "embeds, and its dataset is the default --images.")
    model.add_argument("--export_dir", help="A kitm SavedModel to embed with instead of the run's.")
    data = parser.add_argument_group("what to index")
    data.add_argument("--images", help="A folder of images (PNG, JPEG, GIF, BMP, WebP; searched recursively), or a "
                                       "dataset built by python -m kitm.data.build (default: the run's dataset).")
    data.add_argument("--split", default="test", help="With a dataset: the split, several comma-separated, or all "
                                                      "(default test).")
    data.add_argument("--out", required=True, help="The index folder to write.")
    data.add_argument("--overwrite", action="store_true", help="Replace an existing index at --out.")
    build = parser.add_argument_group("building")
    build.add_argument("--batch_size", type=int, default=64, help="Images or captions per SavedModel call "
                                                                  "(default 64).")
    build.add_argument("--chunk_size", type=int, default=DEFAULT_CHUNK,
                       help=f"Images per saved chunk: a killed build resumes after the last whole one "
                            f"(default {DEFAULT_CHUNK}).")
    build.add_argument("--exact_threshold", type=int, default=DEFAULT_EXACT_THRESHOLD,
                       help="Up to this many images (or captions) faiss searches exactly; above, an HNSW graph "
                            f"(default {DEFAULT_EXACT_THRESHOLD:,}: about 5 ms per query on one core at 256-d).")
    build.add_argument("--target_recall", type=float, default=DEFAULT_TARGET_RECALL,
                       help=f"The recall@10 HNSW is tuned to (default {DEFAULT_TARGET_RECALL}); the measured one "
                            "is printed and stored.")
    build.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True,
                       help="Progress bars on stderr (default on).")
    return parser


def _run(args: argparse.Namespace) -> int:
    from kitm.eval.run_dir import read_summary, run_data_dir
    from kitm.index.build import build_index
    from kitm.index.model import resolve_export_dir
    from kitm.index.sources import open_source

    if bool(args.run) == bool(args.export_dir):
        raise CliError("give exactly one of --run (a kitm run directory) and --export_dir (a kitm SavedModel).")
    if args.exact_threshold < 0:
        raise CliError(f"--exact_threshold must be >= 0; got {args.exact_threshold}.")
    if not 0 < args.target_recall <= 1:
        raise CliError(f"--target_recall must be in (0, 1]; got {args.target_recall}.")
    export_dir = resolve_export_dir(args.run, args.export_dir)
    if args.images:
        images = os.path.expanduser(args.images)
    elif args.run:
        images = run_data_dir(args.run, read_summary(args.run))
    else:
        raise CliError("--images is needed with --export_dir (a folder of images, or a built dataset).")
    source = open_source(images, args.split)
    options = BuildOptions(batch_size=args.batch_size, chunk_size=args.chunk_size,
                           exact_threshold=args.exact_threshold, target_recall=args.target_recall,
                           overwrite=args.overwrite, progress=args.progress)
    manifest = build_index(source, export_dir, args.out, options)
    seconds = manifest["seconds"]
    lines = [f"Index: {args.out}: {manifest['num_images']} images"
             + (f", {manifest['num_captions']} captions" if manifest["num_captions"] else "")
             + f" embedded with {export_dir} in {seconds['total']:.1f} s "
               f"(images {seconds['embed_images']:.1f} s, captions {seconds['embed_captions']:.1f} s, "
               f"faiss {seconds['faiss']:.1f} s)."]
    for name in ("images_index", "captions_index"):
        described = manifest[name]
        if described:
            how = ("exact search" if described["kind"] == "exact" else
                   f"HNSW, efSearch {described['ef_search']}, recall@{described['recall_k']} "
                   f"{described['recall_at_k']:.3f} on {described['recall_queries']} sampled queries")
            lines.append(f"  {name.split('_')[0]}: {how}")
    if manifest["skipped"]:
        lines.append(f"  skipped {len(manifest['skipped'])} unreadable file(s), e.g. {manifest['skipped'][0]['path']}"
                     f": {manifest['skipped'][0]['error']} (all listed in manifest.json)")
    lines.append(f"Search it: python -m kitm.search --index={args.out}")
    print("\n".join(lines))
    return 0


def _handled_errors() -> tuple[type[BaseException], ...]:
    handled: list[type[BaseException]] = [CliError, ValueError, OSError]
    # Imported here: the seam imports Keras (and so TensorFlow), which this command imports after quieting its log.
    from kitm.distribute.backend import loaded_tensorflow

    tf = loaded_tensorflow()
    if tf is not None and hasattr(tf, "errors"):
        handled.append(tf.errors.OpError)
    return tuple(handled)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI on `argv` (default ``sys.argv[1:]``); returns the exit status (0, or 2 on bad input)."""
    from kitm.eval.cli import _one_line

    quiet_tensorflow_logs()  # before TensorFlow is imported: no cuInit or oneDNN lines on a machine without a GPU
    try:
        return _run(build_parser().parse_args(argv))
    except Exception as error:  # noqa: BLE001 (TensorFlow's errors are known only once imported)
        # A full disk or a file-size limit, named with its file, as kitm.data.build does (kitm.files).
        error = (None if isinstance(error, KitmError) else no_room_error(error)) or error
        if not isinstance(error, _handled_errors()):
            raise
        print(f"{PROG}: error: {_one_line(error)}", file=sys.stderr)
        return EXIT_BAD_INPUT

"""``python -m kitm.eval``: score a run directory or a saved similarity matrix; JSON report + table.

Two ways in:

1. A run directory of ``python -m kitm.launch``::

     python -m kitm.eval --run_dir=runs/synthetic --split=test --relevance=truth

   reads ``summary.json`` for the dataset folder, reads the split's records in evaluation order,
   embeds images and captions through the run's newest SavedModel (``export/<n>``: ``encode_image``,
   ``encode_text``), and scores ``sims = images @ captions.T``.

2. A similarity matrix from anywhere (a model trained elsewhere)::

     python -m kitm.eval --sims=sims.npy [--relevance_matrix=cider.npy] [--captions_per_image=5]
     python -m kitm.eval --sims=sims.json --data_dir=tfrecords/coco --split=test --relevance=cider

   ``--sims`` is [images, captions] as ``.npy`` or as the NCS reference's JSON (a nested list, one
   row per image: furkanbiten/ncs_metric ``eval.py --model_path``); ``--relevance_matrix`` is
   [captions, images] as ``.npy``, JSON or the reference's CSV (:mod:`kitm.eval.matrix_io`). With
   ``--data_dir`` the relevance is computed from that split's captions (its images must be the
   rows of ``--sims``, in evaluation order).

Relevance sources (``--relevance``): none, truth (synthetic data), cider, sbert, spice;
:mod:`kitm.eval.relevance_sources` defines each. ``--relevance=cider`` reproduces the NCS reference's
CIDEr-D matrices (lower case, whitespace split); ``--cider_normalization=ptb`` applies pycocoevalcap's
PTB normalisation instead. The report (:mod:`kitm.eval.report`) holds R^V,
R, medr, meanr, mAP, mAP@R and R-Precision, and with relevance NCS, SR and CS@K, both directions, plus the
COCO 1K five-fold means when the set has 5 * ``--fold_size`` images, and with ``--fold_images=F`` R^V@K and R@K
on folds of F images (``fold<F>_i2t_R@1``, ..., ``fold<F>_rsum``). mAP@R and R-Precision count the ground
truth as positives, plus every item of relevance >= ``--positive_threshold`` (default: 1.0 with
``--relevance=truth``, :data:`kitm.eval.report.TRUTH_POSITIVE_THRESHOLD`; none otherwise). It is written
atomically to ``--out`` (default ``<run_dir>/eval_<split>_<relevance>.json``, or beside ``--sims``), with the
per-query values of every figure that is a mean over queries beside it as ``<stem>.per_query.npz``
(:func:`kitm.eval.report.write_per_query`), and printed as a table. ``--eccv_caption`` adds ECCV Caption's
figures for a COCO Karpathy 5K test matrix (:mod:`kitm.eval.eccv`). Bad input ends with one line
``kitm.eval: error: ...`` on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time
from collections.abc import Sequence

import numpy as np

from kitm.errors import CliError, KitmError, OneLineArgumentParser
from kitm.eval.matrix_io import load_matrix, save_matrix
from kitm.eval.relevance_sources import CIDER_NORMALIZATIONS, RELEVANCE_SOURCES, RelevanceUnavailable
from kitm.eval.small_sets import small_set_warnings
from kitm.eval.report import (TRUTH_POSITIVE_THRESHOLD, build_report_per_query, flat_figures, format_report,
                              per_query_path, recall_cutoffs, rsum, write_per_query, write_report_json)
from kitm.files import no_room_error
from kitm.tensorflow_logs import quiet_tensorflow_logs

PROG = "kitm.eval"
EXIT_BAD_INPUT = 2

_EXAMPLES = """examples:
  python -m kitm.eval --run_dir=runs/synthetic --split=test --relevance=truth
  python -m kitm.eval --run_dir=runs/f30k --relevance=cider --out=f30k_test.json
  python -m kitm.eval --sims=sims.json --relevance_matrix=f30k_cider.npy
  python -m kitm.eval --sims=sims.npy --data_dir=tfrecords/coco --split=test --relevance=sbert
"""


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(prog=f"python -m {PROG}",
                                   formatter_class=argparse.RawDescriptionHelpFormatter,
                                   description="Score a kitm run directory or a saved similarity matrix: a JSON "
                                               "report and a table.",
                                   epilog=_EXAMPLES)
    source = parser.add_argument_group("what to score (one of --run_dir, --sims)")
    source.add_argument("--run_dir", help="Run directory of python -m kitm.launch (summary.json, export/<n>).")
    source.add_argument("--sims", help="Similarity matrix [images, captions]: .npy, or .json as the NCS reference "
                                       "stores it (a list of rows, one per image), or .csv.")
    source.add_argument("--export_dir", help="SavedModel to embed with (default: the run's highest version, <run_dir>/export/<n>).")
    source.add_argument("--data_dir", help="Dataset folder (default: the run's, from summary.json). With --sims: "
                                           "the dataset whose split the rows and columns of --sims are.")
    source.add_argument("--split", default="test", help="Split of the dataset to score (default test).")
    source.add_argument("--num_images", type=int, help="Score only the first N images of the split "
                                                       "(evaluation order).")
    source.add_argument("--captions_per_image", type=int,
                        help="Captions per image of --sims without --data_dir (default 5); otherwise the dataset's.")
    relevance = parser.add_argument_group("relevance (enables NCS, SR and CS)")
    relevance.add_argument("--relevance", default="none", choices=RELEVANCE_SOURCES,
                           help="Relevance source computed from the split: truth (synthetic data), cider, sbert, "
                                "spice (default none).")
    relevance.add_argument("--relevance_matrix", help="Precomputed relevance [captions, images] (.npy, .json, "
                                                      ".csv), instead of --relevance.")
    relevance.add_argument("--cider_normalization", default="ncs", choices=CIDER_NORMALIZATIONS,
                           help="How --relevance=cider tokenizes captions: ncs (default; lower case, split on "
                                "whitespace, as the NCS reference's custom_cider.py computes its matrices) or ptb "
                                "(pycocoevalcap's PTB normalisation, punctuation dropped, as captioning evaluation).")
    relevance.add_argument("--sbert_model", help="Sentence-transformers model name or path for --relevance=sbert "
                                                 "(default: the bundled all-MiniLM-L6-v2).")
    relevance.add_argument("--embedding_cache", action=argparse.BooleanOptionalAction, default=True,
                           help="Reuse the captions' sentence embeddings from disk ($KITM_CACHE_DIR, else "
                                "~/.cache/kitm) when the same local model embeds the same captions (default on).")
    metrics = parser.add_argument_group("metrics")
    metrics.add_argument("--ks", help="Cut-offs K of R, R^V, NCS and SR, comma-separated (default 1,5,10, leaving "
                                      "out those larger than the number of images scored).")
    metrics.add_argument("--cs_ks", help="CS cut-offs (default: N/10 and N for N images, the ladder paper's "
                                         "CS@100/1000 on 1K and CS@500/5000 on 5K).")
    metrics.add_argument("--include_gt", action="store_true",
                         help="NCS and SR keep each query's own ground truth (the NCS reference's include_anns).")
    metrics.add_argument("--semantic_threshold", type=int, default=1,
                         help="m of SR: the m most relevant images extend the ground truth (default 1).")
    metrics.add_argument("--fold_size", type=int, default=1000,
                         help="Images per fold of the COCO 1K protocol, reported when the set has 5 folds "
                              "(default 1000).")
    metrics.add_argument("--fold_images", type=int,
                         help="Also R@K on folds of this many images, each ranking only its own images and captions, "
                              "averaged over the folds (fold<F>_i2t_R@1, ..., fold<F>_rsum; e.g. 1000 on COCO 5K for "
                              "COCO 1K; images after the last complete fold are left out). Default: none.")
    metrics.add_argument("--positive_threshold", default="auto",
                         help="mAP@R and R-Precision: besides the ground truth, items whose relevance is >= this "
                              "count as positives (a number, or none; default auto: "
                              f"{TRUTH_POSITIVE_THRESHOLD:g} with --relevance=truth, none otherwise).")
    metrics.add_argument("--eccv_caption", action="store_true",
                         help="COCO Karpathy 5K test split only: also ECCV Caption's mAP@R, R-Precision and R@1, CxC "
                              "R@K and COCO 1K / 5K R@K, by the eccv-caption package's own scorer (see "
                              "--eccv_image_ids).")
    metrics.add_argument("--eccv_image_ids", help="With --eccv_caption: COCO image ids of the rows of the matrix (.npy "
                                                  "or .json list; default with --sims: the eccv-caption package's test "
                                                  "order, the Karpathy test split's images).")
    metrics.add_argument("--eccv_caption_ids",
                         help="With --eccv_caption: COCO caption (annotation) ids of the columns (.npy or .json list; "
                              "default with --sims: the package's test order, each image's five captions by ascending "
                              "annotation id).")
    # --neighbourhood and --neighbourhood_k: the British spellings of earlier versions, kept as deprecated aliases.
    metrics.add_argument("--neighborhood", "--neighbourhood", default="none", choices=("none", "sbert"),
                         help="With --run_dir: neighbourhood preservation (Thomas & Kovashka, Table 3) against this "
                              "text-only space: the share of each item's k nearest neighbours there that stay among its k "
                              "nearest same-modality neighbours in the learned space (default none; --neighbourhood: "
                              "deprecated alias).")
    metrics.add_argument("--neighborhood_k", "--neighbourhood_k", type=int, default=200,
                         help="k of --neighborhood (default 200; capped at the set size minus one; --neighbourhood_k: "
                              "deprecated alias).")
    output = parser.add_argument_group("output")
    output.add_argument("--out", help="JSON report path (default <run_dir>/eval_<split>_<relevance>.json, or "
                                      "<sims stem>.eval_<relevance>.json beside --sims).")
    output.add_argument("--save_sims", help="Also save the similarity matrix (.npy or .json).")
    output.add_argument("--batch_size", type=int, default=128, help="Inputs per SavedModel call (default 128).")
    output.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True, help="Progress bars on stderr (default on).")
    return parser


def _int_list(text: str, flag: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.replace(" ", "").split(",") if part)
    except ValueError:
        raise CliError(f"{flag} must be comma-separated integers; got {text!r}.") from None
    if not values:
        raise CliError(f"{flag} must hold at least one integer; got {text!r}.")
    return values


def _check_arguments(args: argparse.Namespace) -> None:
    if bool(args.run_dir) == bool(args.sims):
        raise CliError("give exactly one of --run_dir (score a kitm run) and --sims (score a saved similarity "
                       "matrix).")
    if args.relevance_matrix and args.relevance != "none":
        raise CliError(f"give --relevance={args.relevance} or --relevance_matrix, not both.")
    if args.sims and args.export_dir:
        raise CliError("--export_dir embeds a run's split; it cannot be combined with --sims.")
    if args.sims and args.relevance != "none" and not args.data_dir:
        raise CliError(f"--relevance={args.relevance} with --sims needs the captions of the scored split: pass "
                       "--data_dir (and --split), or pass --relevance_matrix.")
    if (args.eccv_image_ids or args.eccv_caption_ids) and not args.eccv_caption:
        raise CliError("--eccv_image_ids and --eccv_caption_ids describe the matrix for --eccv_caption; add it.")
    if args.eccv_caption and args.run_dir and not (args.eccv_image_ids and args.eccv_caption_ids):
        raise CliError("--eccv_caption with --run_dir needs --eccv_image_ids and --eccv_caption_ids: kitm's records do "
                       "not carry COCO ids, and ECCV Caption's positives are single captions, so the COCO id of every "
                       "image and caption of the split, in evaluation order, must be given.")
    for flag in ("num_images", "captions_per_image", "fold_size", "fold_images", "batch_size", "semantic_threshold"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise CliError(f"--{flag} must be a positive integer; got {value}.")


def _positive_threshold(args: argparse.Namespace, relevance_name: str, has_relevance: bool) -> float | None:
    text = str(args.positive_threshold).strip().lower()
    if text == "auto":
        return TRUTH_POSITIVE_THRESHOLD if relevance_name == "truth" else None
    if text == "none":
        return None
    try:
        value = float(text)
    except ValueError:
        raise CliError(f"--positive_threshold must be a number, none or auto; got "
                       f"{args.positive_threshold!r}.") from None
    if not np.isfinite(value):
        raise CliError(f"--positive_threshold must be a finite number; got {args.positive_threshold!r}.")
    if not has_relevance:
        raise CliError(f"--positive_threshold={args.positive_threshold} extends the positives by relevance: give "
                       "--relevance or --relevance_matrix too.")
    return value


def _read_ids(path: str | None, flag: str):
    if path is None:
        return None
    try:
        if path.endswith(".npy"):
            ids = np.load(path, allow_pickle=False)
        elif path.endswith(".json"):
            import json

            with open(path) as handle:
                ids = np.asarray(json.load(handle))
        else:
            raise CliError(f"{flag}={path}: give a .npy or .json file.")
    except (OSError, ValueError) as error:
        raise CliError(f"{flag}={path} cannot be read: {error}") from None
    if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.number) or (ids != np.round(ids)).any():
        raise CliError(f"{flag}={path} must hold one list of integer COCO ids; got an array of shape {ids.shape}, "
                       f"dtype {ids.dtype}.")
    return ids.astype(np.int64)


def _default_out(args: argparse.Namespace, relevance_name: str) -> pathlib.Path:
    if args.run_dir:
        return pathlib.Path(args.run_dir) / f"eval_{args.split}_{relevance_name}.json"
    sims = pathlib.Path(args.sims)
    return sims.with_name(f"{sims.stem}.eval_{relevance_name}.json")


def _cutoffs(ks: tuple[int, ...] | None, num_images: int, num_captions: int, fold_size: int,
             fold_images: int | None = None) -> tuple[int, ...]:
    """--ks checked against the images a caption query ranks (a fold's, when the 1K protocol is reported), or by
    default R@1, 5, 10 without the cut-offs beyond those images (as the launcher's validation does). The figures on
    folds of --fold_images use the cut-offs that fit a fold."""
    if fold_images is not None and fold_images > num_images:
        raise CliError(f"--fold_images={fold_images} is larger than the {num_images} images scored: no complete fold.")
    folds = num_images == 5 * fold_size
    limit = fold_size if folds else num_images
    if ks is None:
        return recall_cutoffs(limit)
    # K beyond the captions an image query ranks is left to the metrics' own check (its message is kept).
    too_big = [k for k in ks if limit < k <= num_captions // (5 if folds else 1)]
    if too_big:
        where = f"each of the 5 folds of --fold_size={fold_size}" if folds else "the set scored"
        raise CliError(f"--ks={','.join(map(str, ks))} holds {too_big}, larger than the {limit} candidates a t2i "
                       f"(caption) query ranks in {where} ({limit} images): give --ks values <= {limit}, or leave "
                       f"--ks out for R@1, 5, 10 up to {limit}.")
    if fold_images is not None and min(ks) > fold_images:
        raise CliError(f"--ks={','.join(map(str, ks))}: no cut-off fits a fold of --fold_images={fold_images} images "
                       f"(a caption query there ranks {fold_images}); add a K <= {fold_images}.")
    return ks


def _embedding_cache(args: argparse.Namespace) -> object:
    """The sentence embeddings' cache folder, or None with --no-embedding_cache."""
    from kitm.relevance.embedding_cache import default_cache_dir

    return default_cache_dir() if args.embedding_cache else None


def _neighborhood_preservation(images, texts, data, args) -> dict[str, object]:
    """Thomas & Kovashka's Table 3 measure for captions and images. An image's place in the text-only space is the
    normalised mean of its captions' sentence embeddings (the paper pairs each image with its text)."""
    from kitm.eval import neighborhood_preservation
    from kitm.relevance import sentence_embeddings

    if args.neighborhood_k < 1:
        raise CliError(f"--neighborhood_k must be >= 1; got {args.neighborhood_k}.")
    reference_text = sentence_embeddings(list(data.captions), args.sbert_model, progress=args.progress,
                                         cache_dir=_embedding_cache(args))
    grouped = reference_text.reshape(images.shape[0], -1, reference_text.shape[1]).mean(axis=1)
    reference_image = grouped / np.linalg.norm(grouped, axis=1, keepdims=True)
    k_text = min(args.neighborhood_k, texts.shape[0] - 1)
    k_image = min(args.neighborhood_k, images.shape[0] - 1)
    return {"reference": args.neighborhood, "k": args.neighborhood_k,
            "text": neighborhood_preservation(reference_text, texts, k=k_text),
            "image": neighborhood_preservation(reference_image, images, k=k_image)}


def _run(args: argparse.Namespace) -> int:
    """The CLI's work: the matrix scored (and its split's data), the relevance, the report, written and printed."""
    _check_arguments(args)
    ks = _int_list(args.ks, "--ks") if args.ks is not None else None
    cs_ks = _int_list(args.cs_ks, "--cs_ks") if args.cs_ks else None
    seconds: dict[str, float] = {}
    source: dict[str, object] = {"split": None}
    if args.run_dir:
        sims, data, neighborhood = _embed_run(args, source, seconds)
    else:
        sims, data = _load_sims(args, source)
        neighborhood = None
    cpi = _captions_per_image(args, data)
    ks = _cutoffs(ks, *sims.shape, args.fold_size, args.fold_images)  # before the relevance, which may take minutes
    eccv_ids = _eccv_ids(args, sims) if args.eccv_caption else None
    if args.save_sims:
        save_matrix(args.save_sims, sims)

    relevance, relevance_name = _relevance(args, data, seconds)
    positive_threshold = _positive_threshold(args, relevance_name, relevance is not None)
    started = time.time()
    report, per_query = build_report_per_query(
        sims, captions_per_image=cpi, relevance=relevance, ks=ks, include_gt=args.include_gt,
        semantic_threshold=args.semantic_threshold, cs_ks=cs_ks, fold_size=args.fold_size,
        fold_images=args.fold_images, positive_threshold=positive_threshold)
    seconds["metrics"] = time.time() - started
    eccv = None
    if args.eccv_caption:
        from kitm.eval.eccv import eccv_caption_metrics

        started = time.time()
        eccv = eccv_caption_metrics(sims, **eccv_ids, ks=ks, progress=args.progress)
        seconds["eccv_caption"] = time.time() - started

    out = pathlib.Path(args.out) if args.out else _default_out(args, relevance_name)
    payload = _payload(args, out, source, relevance_name, positive_threshold, report, neighborhood, eccv, seconds)
    warnings = small_set_warnings(*sims.shape, cpi, ks, include_gt=args.include_gt,
                                  with_relevance=relevance is not None)
    if warnings:
        payload["warnings"] = warnings
    # The per-query file first: a report that exists always has its per-query values beside it.
    write_per_query(out, per_query)
    write_report_json(out, payload)
    _print_report(args, out, report, relevance_name, neighborhood, eccv)
    for warning in warnings:  # after the table, where the figures they qualify are read
        print(f"{PROG}: warning: {warning}", file=sys.stderr)
    return 0


def _embed_run(args: argparse.Namespace, source: dict[str, object], seconds: dict[str, float]):
    """--run_dir: the split's records embedded by the run's SavedModel -> (sims [images, captions], the split's
    data, the neighbourhood preservation or None); `source` and `seconds` are filled in."""
    from kitm.eval.run_dir import default_export_dir, embed_with_saved_model, load_saved_model, read_summary, \
        run_data_dir
    from kitm.data.split_reading import read_split

    started = time.time()
    summary = read_summary(args.run_dir)
    data_dir = run_data_dir(args.run_dir, summary, args.data_dir)
    export_dir = pathlib.Path(args.export_dir) if args.export_dir else default_export_dir(args.run_dir)
    loaded = load_saved_model(export_dir)
    data = read_split(data_dir, args.split, limit=args.num_images)
    if args.relevance == "truth" and data.scene_facts is None:  # fail before the costly embedding
        raise CliError(f"--relevance=truth needs the synthetic world's facts; the dataset at {data_dir} has "
                       f"relevance slots {sorted(data.info.relevance) or 'none'}.")
    images, texts = embed_with_saved_model(loaded, data.captions, data.images, batch_size=args.batch_size,
                                           progress=args.progress)
    sims = images @ texts.T
    neighborhood = None
    if args.neighborhood != "none":
        neighborhood = _neighborhood_preservation(images, texts, data, args)
    source.update(run_dir=str(args.run_dir), export_dir=str(export_dir), data_dir=str(data_dir),
                  split=args.split)
    seconds["embedding"] = time.time() - started
    return sims, data, neighborhood


def _load_sims(args: argparse.Namespace, source: dict[str, object]):
    """--sims: the saved matrix, and with --data_dir the split's captions (checked to match its shape) -> (sims,
    the split's data or None); `source` is filled in."""
    sims = load_matrix(args.sims, "--sims")
    source.update(sims=str(args.sims))
    data = None
    if args.data_dir:
        from kitm.data.split_reading import read_split

        data = read_split(args.data_dir, args.split, limit=args.num_images, with_images=False)
        expected = (data.num_images, data.num_images * data.captions_per_image)
        if sims.shape != expected:
            raise CliError(f"--sims has shape {sims.shape}, but split '{args.split}' of {args.data_dir} has "
                           f"{expected[0]} images and {expected[1]} captions: expected [images, captions] = "
                           f"{list(expected)}.")
        source.update(data_dir=str(args.data_dir), split=args.split)
    return sims, data


def _captions_per_image(args: argparse.Namespace, data) -> int:
    """The dataset's captions per image (--captions_per_image must agree), else --captions_per_image or 5."""
    if data is not None:
        cpi = data.captions_per_image
        if args.captions_per_image is not None and args.captions_per_image != cpi:
            raise CliError(f"--captions_per_image={args.captions_per_image} disagrees with the dataset, which has "
                           f"{cpi} captions per image.")
        return cpi
    return args.captions_per_image or 5


def _eccv_ids(args: argparse.Namespace, sims) -> dict[str, object]:
    """--eccv_caption: the COCO ids of the matrix's images and captions, the matrix checked to be the 5K test's."""
    from kitm.eval import eccv as eccv_protocol

    eccv_ids = {"image_ids": _read_ids(args.eccv_image_ids, "--eccv_image_ids"),
                "caption_ids": _read_ids(args.eccv_caption_ids, "--eccv_caption_ids")}
    expected = (eccv_protocol.NUM_IMAGES, eccv_protocol.NUM_IMAGES * eccv_protocol.CAPTIONS_PER_IMAGE)
    if sims.shape != expected:
        raise CliError(f"--eccv_caption scores COCO's Karpathy 5K test split, [images, captions] = "
                       f"{list(expected)}; the matrix scored has shape {list(sims.shape)}.")
    return eccv_ids


def _relevance(args: argparse.Namespace, data, seconds: dict[str, float]):
    """(relevance [captions, images] or None, its name): --relevance_matrix ("matrix"), or --relevance computed
    from the split's captions (timed in `seconds`), or none."""
    relevance = None
    relevance_name = args.relevance
    started = time.time()
    if args.relevance_matrix:
        relevance = load_matrix(args.relevance_matrix, "--relevance_matrix")
        relevance_name = "matrix"
    elif args.relevance != "none":
        from kitm.eval.split_relevance import split_relevance

        relevance = split_relevance(data, args.relevance, sbert_model=args.sbert_model, progress=args.progress,
                                    cider_normalization=args.cider_normalization, cache_dir=_embedding_cache(args))
        seconds["relevance"] = time.time() - started
    return relevance, relevance_name


def _payload(args: argparse.Namespace, out: pathlib.Path, source, relevance_name: str, positive_threshold, report,
             neighborhood, eccv, seconds) -> dict[str, object]:
    """The JSON report: version, source, relevance, settings, the report's figures, flat figures and timings."""
    import kitm

    return {
        "kitm_version": kitm.__version__,
        "source": source,
        "relevance": {"source": relevance_name, "matrix": args.relevance_matrix,
                      "sbert_model": args.sbert_model if args.relevance == "sbert" else None,
                      "cider_normalization": args.cider_normalization if args.relevance == "cider" else None},
        "settings": {"include_gt": bool(args.include_gt), "semantic_threshold": args.semantic_threshold,
                     "positive_threshold": positive_threshold, "fold_images": args.fold_images},
        **report,
        "neighbourhood_preservation": neighborhood,
        "eccv_caption": eccv,
        "flat": flat_figures(report),
        "rsum": rsum(report["all"]),
        "per_query": per_query_path(out).name,
        "seconds": seconds,
    }


def _print_report(args: argparse.Namespace, out: pathlib.Path, report, relevance_name: str, neighborhood,
                  eccv) -> None:
    """The report as a table on stdout, with ECCV Caption's figures and the neighbourhood preservation if any."""
    what = f"{args.run_dir}, split {args.split}" if args.run_dir else str(args.sims)
    print(format_report(report, f"kitm.eval: {what}; relevance {relevance_name}"))
    if eccv is not None:
        from kitm.eval.eccv import format_eccv

        print(format_eccv(eccv))
    if neighborhood is not None:
        print(f"neighbourhood preservation (k={neighborhood['k']}, {neighborhood['reference']} space): "
              f"images {neighborhood['image']:.4f}, captions {neighborhood['text']:.4f}")
    print(f"Report: {out}")


def _one_line(error: BaseException) -> str:
    tf_message = getattr(error, "message", None)  # TensorFlow's errors: the first line names the problem
    if isinstance(tf_message, str) and tf_message.strip():
        return " ".join(tf_message.strip().splitlines()[0].split())
    return " ".join(str(error).split()) or type(error).__name__


def _handled_errors() -> tuple[type[BaseException], ...]:
    from kitm.eval.eccv import EccvCaptionUnavailable

    handled: list[type[BaseException]] = [CliError, ValueError, OSError, RelevanceUnavailable, EccvCaptionUnavailable]
    # Imported here: the seam imports Keras (and so TensorFlow), which this command imports after quieting its log.
    from kitm.distribute.backend import loaded_tensorflow

    tf = loaded_tensorflow()
    if tf is not None and hasattr(tf, "errors"):
        handled.append(tf.errors.OpError)
    return tuple(handled)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI on `argv` (default ``sys.argv[1:]``); returns the exit status (0, or 2 on bad input)."""
    quiet_tensorflow_logs()  # before TensorFlow is imported
    try:
        args = build_parser().parse_args(argv)
        return _run(args)
    except Exception as error:  # noqa: BLE001 (narrowed below; TensorFlow's errors are known only once imported)
        problem = None if isinstance(error, KitmError) else no_room_error(error)  # a full disk, with its file
        if problem is None and not isinstance(error, _handled_errors()):
            raise
        print(f"{PROG}: error: {_one_line(problem or error)}", file=sys.stderr)
        return EXIT_BAD_INPUT

"""One evaluation report from a similarity matrix: every figure of :mod:`kitm.eval`, a table, JSON.

:func:`build_report` is shared by ``python -m kitm.eval`` and the
:class:`kitm.callbacks.RetrievalEvaluation` callback, so that a figure seen in TensorBoard during
training and the one the CLI prints for the same similarity matrix are the same number.

Blocks of a report:

- ``"all"``: :func:`kitm.eval.evaluate` on the whole set (5 captions per image protocol: R, R^V,
  medr, meanr, mAP, and with relevance NCS and SR), plus, with relevance, CS@K
  (:func:`coherent_scores`) in both directions.
- ``"coco_1k"``: when the set holds exactly five folds of `fold_size` images (5000 images for
  COCO), the same figures averaged over the five folds (:func:`kitm.eval.evaluate_folds`); the
  whole set is then the COCO 5K protocol.
- ``"folds"`` (with `fold_images` = F): R^V@K and R@K on folds of F images. Fold f holds images
  f*F .. (f+1)*F - 1 and their captions and ranks them only against each other; the figures are the
  mean over the folds (equal folds, so also the mean over all their queries), with ``rsum`` of the fold
  R^V@K, at the cut-offs K <= F (a caption query of a fold ranks F images). The ``N mod F`` images
  after the last complete fold are left out (``images_left_out``). Flat names carry the fold size:
  ``fold<F>_i2t_R@1``, ``fold<F>_t2i_IR_R@5``, ``fold<F>_rsum``; ``i2t_R@1`` and ``rsum`` are always
  whole-set figures. The semantic figures (NCS, SR, CS, mAP@R) stay whole-set.

mAP@R and R-Precision (:mod:`kitm.eval.map_at_r`) count as positives each query's ground truth and,
with `positive_threshold`, every candidate of relevance >= the threshold (extended positives). For the
synthetic world's exact relevance kitm uses :data:`TRUTH_POSITIVE_THRESHOLD` = 1.0: a caption is a
positive of an image when every fact it states holds in that image (on average 1.6 times as many
positives as the ground truth in either direction on a 1,000-scene world's test split), the synthetic
analogue of ECCV Caption's verified positives. Flat names: ``i2t_mAP_at_R``, ``t2i_R_precision``.

:func:`build_report_per_query` also returns, under each flat name, the per-query values of every
figure that is a mean over queries (:func:`write_per_query`; not medr, meanr, rsum):
``float(np.nanmean(values)) == flat figure`` exactly.

CS@K follows the ladder loss paper (Zhou et al., Section IV): one caption per image (caption
`cs_caption` of each image, the first by default), cut-offs K = N/10 and N for N images, which
are the paper's CS@100 / CS@1000 on 1K sets and CS@500 / CS@5000 on 5K sets and stay within the
candidate count on smaller sets (:func:`coherent_cutoffs`).
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import pathlib
from collections.abc import Iterable, Mapping

import numpy as np

from kitm.eval import _checks
from kitm.eval._views import DIRECTIONS, DirectionView
from kitm.eval.coherent import coherent_score_per_query
from kitm.eval.evaluation import evaluate_per_query, figures_of
from kitm.eval.nway import n_way_recall_per_query
from kitm.eval.options import ReportOptions
from kitm.eval.protocols import average_results, fold_slices
from kitm.eval.retrieval import _ground_truth_ranks
from kitm.files import write_bytes_atomically, write_text_atomically

# Short names of the figures for flat scalar keys (TensorBoard tags, JSON lines).
FIGURE_NAMES = {"recall_vse": "R", "recall": "IR_R", "ncs": "NCS", "semantic_recall": "SR",
                "coherent_score": "CS", "n_way": "NWAY_R1", "map_at_r": "mAP_at_R", "r_precision": "R_precision"}
# Extended positives of mAP@R and R-Precision under the synthetic world's exact relevance (module docstring).
TRUTH_POSITIVE_THRESHOLD = 1.0
PER_QUERY_SUFFIX = ".per_query.npz"
# N of the N-way retrieval R@1 (Thomas & Kovashka report 5, 20 and 100); those a set is too small for are left out.
N_WAY = (5, 20, 100)
COCO_FOLDS = 5


def recall_cutoffs(num_images: int, candidates: tuple[int, ...] = (1, 5, 10)) -> tuple[int, ...]:
    """R@1, 5, 10 (the usual `candidates`) without the cut-offs beyond the `num_images` a caption query ranks,
    at least (1,): a 3-image test split is scored at K = 1 only instead of failing."""
    return tuple(k for k in candidates if k <= num_images) or (1,)


def coherent_cutoffs(num_candidates: int) -> tuple[int, ...]:
    """CS cut-offs for a set of N images: (N // 10, N), each at least 2, distinct, ascending.

    N = 1000 gives (100, 1000) and N = 5000 gives (500, 5000), the ladder paper's protocol;
    fewer than 2 candidates gives () (Kendall's tau needs two).
    """
    n = int(num_candidates)
    if n < 2:
        return ()
    return tuple(sorted({max(2, n // 10), n}))


def coherent_scores(
    sims: np.ndarray,
    relevance: np.ndarray,
    *,
    captions_per_image: int = 5,
    ks: Iterable[int] | None = None,
    caption: int = 0,
) -> dict[str, dict[int, float]]:
    """CS@K in both directions with one caption per image (ladder paper, Eq. 13).

    With s1 = sims[:, caption::cpi] (images x the chosen caption of every image) and
    r1 = relevance[caption::cpi, :] (those captions x images):
    i2t = ``coherent_score(s1, r1.T, ks)`` (queries images, candidates captions) and
    t2i = ``coherent_score(s1.T, r1, ks)`` (queries captions, candidates images).

    Args:
      sims: [num_images, num_captions].
      relevance: [num_captions, num_images] (the orientation :func:`kitm.eval.evaluate` takes).
      captions_per_image: cpi.
      ks: cut-offs; default :func:`coherent_cutoffs` of the number of images.
      caption: which caption of each image is used (0 .. cpi-1).

    Returns:
      {"i2t": {K: CS}, "t2i": {K: CS}} (CS in [-1, 1], not percent, as the paper).
    """
    sims = _checks.as_matrix(sims, "sims")
    cpi = _checks.positive_int(captions_per_image, "captions_per_image")
    num_images, num_captions = _checks.similarity_layout(sims, cpi)
    relevance = _checks.relevance_layout(relevance, num_images, num_captions)
    if isinstance(caption, bool) or not isinstance(caption, (int, np.integer)) or not 0 <= caption < cpi:
        raise ValueError(f"`caption` must be an int in [0, {cpi - 1}] (captions_per_image={cpi}); got {caption!r}.")
    ks = coherent_cutoffs(num_images) if ks is None else _checks.cutoffs(ks, "cs_ks")
    if not ks:
        raise ValueError(f"CS@K needs at least 2 images; the set has {num_images}.")
    return {direction: figures_of(values) for direction, values in _coherent_per_query(
        sims, relevance, cpi, ks, caption).items()}


def _coherent_per_query(sims, relevance, cpi, ks, caption) -> dict[str, dict[int, np.ndarray]]:
    """tau-b per query (NaN where undefined) of :func:`coherent_scores`: i2t over images, t2i over the
    chosen caption of each image."""
    scores = sims[:, caption::cpi]
    degrees = relevance[caption::cpi, :]
    return {
        "i2t": coherent_score_per_query(scores, np.ascontiguousarray(degrees.T), ks),
        "t2i": coherent_score_per_query(np.ascontiguousarray(scores.T), degrees, ks),
    }


def _block(sims, relevance, options: ReportOptions):
    """(figures, per-query values) of one set: evaluate, CS@K and N-way R@1, both directions."""
    cpi = options.captions_per_image
    result, per_query = evaluate_per_query(sims, relevance=relevance, options=options.metric_options())
    if relevance is not None and options.cs_ks:
        cs = _coherent_per_query(sims, relevance, cpi, options.cs_ks, options.cs_caption)
        for direction in result:
            per_query[direction]["coherent_score"] = cs[direction]
            result[direction]["coherent_score"] = figures_of(cs[direction])
    num_images = sims.shape[0]
    fitting = [n for n in N_WAY if n <= num_images]  # n - 1 distractor images must exist
    if fitting:
        n_way = {n: n_way_recall_per_query(sims, n, captions_per_image=cpi, seed=0) for n in fitting}
        for direction in result:
            per_query[direction]["n_way"] = {n: values[direction] for n, values in n_way.items()}
            result[direction]["n_way"] = figures_of(per_query[direction]["n_way"])
    return result, per_query


def fold_recall(sims: np.ndarray, captions_per_image: int, fold_images: int, ks: Iterable[int],
                chunk_size: int | None = None) -> tuple[dict[str, object], dict[str, dict[str, object]]]:
    """R^V@K and R@K on folds of `fold_images` images (module docstring, "folds"), at the cut-offs K <= fold_images.

    Returns:
      (figures, per-query values): figures ``{"fold_images", "num_folds", "images_left_out", "i2t": {"recall_vse":
      {K: percent}, "recall": {K: percent}}, "t2i": {...}, "rsum"}`` and per-query values ``{"i2t":
      {"recall_vse": {K: float64 [num_images]}, ...}, "t2i": {... [num_captions]}}`` in percent, NaN for the
      queries of the images left out.
    """
    sims = _checks.as_matrix(sims, "sims")
    cpi = _checks.positive_int(captions_per_image, "captions_per_image")
    num_images, num_captions = _checks.similarity_layout(sims, cpi)
    size = _checks.positive_int(fold_images, "fold_images")
    ks = _checks.cutoffs(ks)
    if size > num_images:
        raise ValueError(f"`fold_images`={size} is larger than the {num_images} images of the set: no complete fold.")
    ks = tuple(k for k in ks if k <= size)  # a caption query of a fold ranks `size` images
    if not ks:
        raise ValueError(f"no cut-off K of `ks` is <= fold_images={size}, the images a caption query ranks in a fold.")
    num_folds = num_images // size
    per_query: dict[str, dict[str, object]] = {}
    for direction in DIRECTIONS:
        length = num_images if direction == "i2t" else num_captions
        per_query[direction] = {"recall_vse": {k: np.full(length, np.nan) for k in ks},
                                "recall": {k: np.full(length, np.nan) for k in ks}}
    for images, captions in fold_slices(num_folds * size, num_folds, cpi):
        block = sims[images, captions]
        for direction in DIRECTIONS:
            ranks = _ground_truth_ranks(DirectionView(direction, block, cpi), chunk_size).ranks
            queries = images if direction == "i2t" else captions
            for k in ks:
                per_query[direction]["recall_vse"][k][queries] = 100.0 * (ranks.min(axis=1) < k)
                per_query[direction]["recall"][k][queries] = 100.0 * np.mean(ranks < k, axis=1)
    figures: dict[str, object] = {"fold_images": size, "num_folds": num_folds,
                                  "images_left_out": num_images - num_folds * size}
    for direction in DIRECTIONS:
        figures[direction] = figures_of(per_query[direction])
    figures["rsum"] = rsum(figures)
    return figures, per_query


def build_report(sims: np.ndarray, *, relevance: np.ndarray | None = None, options: ReportOptions | None = None,
                 **settings) -> dict[str, object]:
    """Every figure of `sims` (and `relevance`), as described in the module docstring.

    The report of :func:`build_report_per_query` (same arguments) without the per-query values.
    """
    return build_report_per_query(sims, relevance=relevance, options=ReportOptions.of(options, settings))[0]


def build_report_per_query(sims: np.ndarray, *, relevance: np.ndarray | None = None,
                           options: ReportOptions | None = None,
                           **settings) -> tuple[dict[str, object], dict[str, np.ndarray]]:
    """(report, per-query values): every figure of `sims` (and `relevance`), as the module docstring describes.

    Args:
      sims: [num_images, num_captions]; image i owns captions i*cpi .. i*cpi + cpi - 1.
      relevance: optional [num_captions, num_images]; adds NCS, SR and CS.
      options, settings: :class:`kitm.eval.options.ReportOptions` (those of :func:`kitm.eval.evaluate` and cs_ks,
        cs_caption, fold_size, fold_images), as one object or as keywords.

    Returns:
      report: {"num_images", "num_captions", "captions_per_image", "ks", "cs_ks", "fold_size",
      "positive_threshold", "all": {"i2t": {...}, "t2i": {...}}, maybe "coco_1k": {...} and "folds": {...}}.
      Recall-like figures are percent keyed by K; CS is in [-1, 1].
      per-query values: {flat name (:func:`flat_figures`): float64 [queries]} for every figure that is a
      mean over queries, NaN where a query is left out; ``float(np.nanmean(values))`` is the figure.
    """
    options = ReportOptions.of(options, settings)
    sims = _checks.as_matrix(sims, "sims")
    cpi = _checks.positive_int(options.captions_per_image, "captions_per_image")
    num_images, num_captions = _checks.similarity_layout(sims, cpi)
    ks = _checks.cutoffs(options.ks)
    if relevance is not None:
        relevance = _checks.relevance_layout(relevance, num_images, num_captions)
    cs_ks = _checked_cs_cutoffs(options.cs_ks, num_images)
    cs_caption, positive_threshold, fold_size = options.cs_caption, options.positive_threshold, options.fold_size
    options = dataclasses.replace(options, captions_per_image=cpi, ks=ks, cs_ks=cs_ks)
    use_cs = relevance is not None and bool(cs_ks)
    report: dict[str, object] = {
        "num_images": num_images,
        "num_captions": num_captions,
        "captions_per_image": cpi,
        "ks": list(ks),
        "cs_ks": list(cs_ks) if use_cs else None,
        "cs_caption": cs_caption if use_cs else None,
        "fold_size": None,
        "positive_threshold": None if positive_threshold is None else float(positive_threshold),
    }
    report["all"], per_query = _block(sims, relevance, options)
    flat_per_query = _flatten(per_query, "", np.asarray)
    if options.fold_images is not None:
        folds, fold_values = fold_recall(sims, cpi, options.fold_images, ks, options.chunk_size)
        report["folds"] = folds
        flat_per_query.update(_flatten(fold_values, f"fold{folds['fold_images']}_", np.asarray))
    if fold_size is not None:
        fold_size = _checks.positive_int(fold_size, "fold_size")
        if num_images == COCO_FOLDS * fold_size:
            report["coco_1k"] = _coco_1k(sims, relevance, options, fold_size)
            report["fold_size"] = fold_size
    return report, flat_per_query


def _checked_cs_cutoffs(cs_ks: Iterable[int] | None, num_images: int) -> tuple[int, ...]:
    """The CS cut-offs: :func:`coherent_cutoffs` by default, else `cs_ks` checked against the images ranked."""
    if cs_ks is None:
        return coherent_cutoffs(num_images)
    cs_ks = _checks.cutoffs(cs_ks, "cs_ks")
    _checks.cutoffs_within(cs_ks, num_images, "cs_ks", "a CS query ranks (one caption per image)")
    return cs_ks


def _coco_1k(sims, relevance, options: ReportOptions, fold_size: int) -> dict[str, object]:
    """The COCO 1K protocol: every figure on each of the 5 folds of `fold_size` images (CS with the folds' own
    cut-offs), averaged."""
    fold_options = dataclasses.replace(options, cs_ks=coherent_cutoffs(fold_size))
    folds = []
    for images, captions in fold_slices(sims.shape[0], COCO_FOLDS, options.captions_per_image):
        block = None if relevance is None else relevance[captions, images]
        try:
            folds.append(_block(sims[images, captions], block, fold_options)[0])
        except ValueError as error:
            raise ValueError(f"COCO 1K protocol (folds of fold_size={fold_size} images): {error}") from None
    return average_results(folds)


def flatten_figures(figures: Mapping[str, object], prefix: str = "") -> dict[str, float]:
    """{"i2t": {"recall_vse": {1: 40.0}, "medr": 2.0}} -> {"<prefix>i2t_R@1": 40.0, "<prefix>i2t_medr": 2.0}.

    Entries that are not per-direction dicts of figures are skipped, so a whole
    :func:`kitm.eval.evaluate` result or one block of :func:`build_report` can be passed. Names:
    :data:`FIGURE_NAMES` (``map_at_r`` -> ``mAP_at_R``, ``r_precision`` -> ``R_precision``), others as they are.
    """
    return _flatten(figures, prefix, float)


def _flatten(figures: Mapping[str, object], prefix: str, convert) -> dict[str, object]:
    flat: dict[str, object] = {}
    for direction, block in figures.items():
        if direction not in DIRECTIONS or not isinstance(block, Mapping):
            continue
        for metric, value in block.items():
            name = FIGURE_NAMES.get(metric, metric)
            if isinstance(value, Mapping):
                for k, v in value.items():
                    flat[f"{prefix}{direction}_{name}@{k}"] = convert(v)
            else:
                flat[f"{prefix}{direction}_{name}"] = convert(value)
    return flat


def flat_figures(report: Mapping[str, object]) -> dict[str, float]:
    """The flat figures of a :func:`build_report` result: the whole set's (:func:`flatten_figures`), then, with a
    "folds" block, ``fold<F>_<direction>_R@K``, ``fold<F>_<direction>_IR_R@K`` and ``fold<F>_rsum``."""
    flat = flatten_figures(report["all"])
    folds = report.get("folds")
    if isinstance(folds, Mapping):
        prefix = f"fold{folds['fold_images']}_"
        flat.update(flatten_figures(folds, prefix))
        flat[f"{prefix}rsum"] = float(folds["rsum"])
    return flat


def per_query_path(json_path: str | os.PathLike) -> pathlib.Path:
    """``<folder>/<stem>.per_query.npz`` beside a report ``<folder>/<stem>.json``."""
    path = pathlib.Path(json_path)
    return path.with_name(path.stem + PER_QUERY_SUFFIX)


def write_per_query(json_path: str | os.PathLike, per_query: Mapping[str, np.ndarray]) -> pathlib.Path:
    """Write the per-query values of a report to :func:`per_query_path` of `json_path`, atomically.

    The file contract (what a per-query bootstrap reads with ``np.load(path)[name]``):

    - one float64 array per flat figure that is a mean over queries, named exactly as in the report's
      ``"flat"``: ``i2t_R@1``, ``t2i_IR_R@5``, ``i2t_map``, ``i2t_mAP_at_R``, ``t2i_R_precision``,
      ``i2t_NCS@10``, ``t2i_SR@5``, ``i2t_CS@100``, ``i2t_NWAY_R1@5``, ``fold100_i2t_R@1``, ...;
    - entry q is query q in evaluation order: image q for ``i2t`` (CS: image q), caption q for ``t2i``
      (CS: the chosen caption of image q; N-way: the pair of caption q, in both directions);
    - values in the figure's unit (percent; CS a Kendall tau-b), NaN where the figure leaves the query out
      (mAP@R and R-Precision without a positive, CS where tau-b is undefined, fold figures outside the
      complete folds);
    - ``float(np.nanmean(array))`` equals the reported figure exactly;
    - medr, meanr and rsum (not means over queries) have no array.
    """
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **{name: np.asarray(values, dtype=np.float64) for name, values in per_query.items()})
    return write_bytes_atomically(per_query_path(json_path), buffer.getvalue())


def rsum(figures: Mapping[str, object]) -> float:
    """Sum of R^V@K over both directions and every K (the "rsum" model selection figure of VSE++)."""
    return float(sum(v for direction in ("i2t", "t2i") for v in figures[direction]["recall_vse"].values()))


_LABELS = {"i2t": "image->text", "t2i": "text->image"}


def _rows(block: Mapping[str, Mapping[str, object]], groups, digits: int = 2) -> list[str]:
    lines = {direction: f"  {_LABELS[direction]:12s}" for direction in ("i2t", "t2i")}
    header = f"  {'':12s}"
    for title, metric, keyed in groups:
        present = [d for d in ("i2t", "t2i") if metric in block[d]]
        if not present:
            continue
        if keyed:
            for k in block[present[0]][metric]:
                header += f" {f'{title}@{k}':>9s}"
                for direction in ("i2t", "t2i"):
                    value = block[direction].get(metric, {}).get(k)
                    lines[direction] += f" {value:9.{digits}f}" if value is not None else f" {'-':>9s}"
        else:
            header += f" {title:>9s}"
            for direction in ("i2t", "t2i"):
                lines[direction] += f" {block[direction][metric]:9.{digits}f}"
    return [header, lines["i2t"], lines["t2i"]]


def format_report(report: Mapping[str, object], title: str = "") -> str:
    """A readable table of a :func:`build_report` result (R^V, R, ranks and mAP; NCS, SR, CS)."""
    lines = [title] if title else []
    blocks = [("all", f"whole set: {report['num_images']} images, {report['num_captions']} captions")]
    if "coco_1k" in report:
        blocks.append(("coco_1k", f"mean over {COCO_FOLDS} folds of {report['fold_size']} images (COCO 1K)"))
    for key, caption in blocks:
        block = report[key]
        lines.append(f"{caption} (R, IR-R, NCS, SR, mAP, mAP@R, R-P, N-way R@1 in percent; CS is Kendall tau-b)")
        lines += _rows(block, [("R", "recall_vse", True), ("IR-R", "recall", True), ("medr", "medr", False),
                               ("meanr", "meanr", False), ("mAP", "map", False)])
        if "map_at_r" in block["i2t"]:
            lines += _rows(block, [("mAP@R", "map_at_r", False), ("R-P", "r_precision", False)])
        if "ncs" in block["i2t"]:
            lines += _rows(block, [("NCS", "ncs", True), ("SR", "semantic_recall", True)])
        if "coherent_score" in block["i2t"]:
            lines += _rows(block, [("CS", "coherent_score", True)], digits=4)
        if "n_way" in block["i2t"]:
            lines += _rows(block, [("N-way", "n_way", True)])  # R@1 against N - 1 random distractors
        lines.append(f"  rsum {rsum(block):.2f}")
    folds = report.get("folds")
    if folds:
        left_out = f", {folds['images_left_out']} images left out" if folds["images_left_out"] else ""
        lines.append(f"mean over {folds['num_folds']} folds of {folds['fold_images']} images{left_out} "
                     f"(fold{folds['fold_images']}_*; R, IR-R in percent)")
        lines += _rows(folds, [("R", "recall_vse", True), ("IR-R", "recall", True)])
        lines.append(f"  fold{folds['fold_images']}_rsum {folds['rsum']:.2f}")
    if report.get("positive_threshold") is not None:
        lines.append(f"mAP@R, R-P positives: ground truth + relevance >= {report['positive_threshold']:g}")
    return "\n".join(lines)


def write_report_json(path: str | os.PathLike, payload: Mapping[str, object]) -> str:
    """Write `payload` as indented JSON, atomically (`kitm.files`): readers never see half a file.

    Integer dict keys (the cut-offs K) become strings, as JSON requires; numpy values become plain numbers and
    lists. NaN (an undefined figure) is written as NaN, as Python's json reads it back.
    """
    return str(write_text_atomically(path, json.dumps(payload, indent=2, default=_json_default) + "\n"))


def _json_default(value: object) -> object:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, pathlib.PurePath):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")

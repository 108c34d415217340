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

CS@K follows the ladder loss paper (Zhou et al., Section IV): one caption per image (caption
`cs_caption` of each image, the first by default), cut-offs K = N/10 and N for N images, which
are the paper's CS@100 / CS@1000 on 1K sets and CS@500 / CS@5000 on 5K sets and stay within the
candidate count on smaller sets (:func:`coherent_cutoffs`).
"""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Iterable, Mapping

import numpy as np

from kitm.eval import _checks
from kitm.eval.coherent import coherent_score
from kitm.eval.evaluation import evaluate
from kitm.eval.nway import n_way_recall
from kitm.eval.protocols import average_results, fold_slices
from kitm.files import write_text_atomically

# Short names of the figures for flat scalar keys (TensorBoard tags, JSON lines).
FIGURE_NAMES = {"recall_vse": "R", "recall": "IR_R", "ncs": "NCS", "semantic_recall": "SR",
                "coherent_score": "CS", "n_way": "NWAY_R1"}
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
    scores = sims[:, caption::cpi]
    degrees = relevance[caption::cpi, :]
    return {
        "i2t": coherent_score(scores, np.ascontiguousarray(degrees.T), ks),
        "t2i": coherent_score(np.ascontiguousarray(scores.T), degrees, ks),
    }


def _block(sims, cpi, relevance, ks, include_gt, semantic_threshold, cs_ks, cs_caption, chunk_size):
    result = evaluate(sims, captions_per_image=cpi, relevance=relevance, ks=ks, include_gt=include_gt,
                      semantic_threshold=semantic_threshold, chunk_size=chunk_size)
    if relevance is not None and cs_ks:
        cs = coherent_scores(sims, relevance, captions_per_image=cpi, ks=cs_ks, caption=cs_caption)
        for direction in result:
            result[direction]["coherent_score"] = cs[direction]
    num_images = sims.shape[0]
    fitting = [n for n in N_WAY if n <= num_images]  # n - 1 distractor images must exist
    if fitting:
        n_way = {n: n_way_recall(sims, n, captions_per_image=cpi, seed=0) for n in fitting}
        for direction in result:
            result[direction]["n_way"] = {n: figures[direction] for n, figures in n_way.items()}
    return result


def build_report(
    sims: np.ndarray,
    *,
    captions_per_image: int = 5,
    relevance: np.ndarray | None = None,
    ks: Iterable[int] = (1, 5, 10),
    include_gt: bool = False,
    semantic_threshold: int = 1,
    cs_ks: Iterable[int] | None = None,
    cs_caption: int = 0,
    fold_size: int | None = 1000,
    chunk_size: int | None = None,
) -> dict[str, object]:
    """Every figure of `sims` (and `relevance`), as described in the module docstring.

    Args:
      sims: [num_images, num_captions]; image i owns captions i*cpi .. i*cpi + cpi - 1.
      captions_per_image: cpi.
      relevance: optional [num_captions, num_images]; adds NCS, SR and CS.
      ks: cut-offs of R, R^V, NCS and SR.
      include_gt, semantic_threshold: passed to :func:`kitm.eval.evaluate`.
      cs_ks: CS cut-offs for the whole set; default :func:`coherent_cutoffs` (N/10, N). The
        five-fold block always uses the folds' own (fold_size/10, fold_size).
      cs_caption: the caption of each image used by CS.
      fold_size: images per fold of the COCO 1K protocol; the "coco_1k" block is added when the
        set holds exactly 5 * fold_size images. None: never.
      chunk_size: queries per chunk in :func:`kitm.eval.evaluate`.

    Returns:
      {"num_images", "num_captions", "captions_per_image", "ks", "cs_ks", "fold_size",
      "all": {"i2t": {...}, "t2i": {...}}, and maybe "coco_1k": {...}}. Recall-like figures are
      percent keyed by K; CS is in [-1, 1].
    """
    sims = _checks.as_matrix(sims, "sims")
    cpi = _checks.positive_int(captions_per_image, "captions_per_image")
    num_images, num_captions = _checks.similarity_layout(sims, cpi)
    ks = _checks.cutoffs(ks)
    if relevance is not None:
        relevance = _checks.relevance_layout(relevance, num_images, num_captions)
    if cs_ks is None:
        cs_ks = coherent_cutoffs(num_images)
    else:
        cs_ks = _checks.cutoffs(cs_ks, "cs_ks")
        _checks.cutoffs_within(cs_ks, num_images, "cs_ks", "a CS query ranks (one caption per image)")
    use_cs = relevance is not None and bool(cs_ks)
    report: dict[str, object] = {
        "num_images": num_images,
        "num_captions": num_captions,
        "captions_per_image": cpi,
        "ks": list(ks),
        "cs_ks": list(cs_ks) if use_cs else None,
        "cs_caption": cs_caption if use_cs else None,
        "fold_size": None,
    }
    report["all"] = _block(sims, cpi, relevance, ks, include_gt, semantic_threshold, cs_ks, cs_caption, chunk_size)
    if fold_size is not None:
        fold_size = _checks.positive_int(fold_size, "fold_size")
        if num_images == COCO_FOLDS * fold_size:
            fold_cs = coherent_cutoffs(fold_size)
            folds = []
            for images, captions in fold_slices(num_images, COCO_FOLDS, cpi):
                block = None if relevance is None else relevance[captions, images]
                try:
                    folds.append(_block(sims[images, captions], cpi, block, ks, include_gt, semantic_threshold,
                                        fold_cs, cs_caption, chunk_size))
                except ValueError as error:
                    raise ValueError(f"COCO 1K protocol (folds of fold_size={fold_size} images): {error}") from None
            report["coco_1k"] = average_results(folds)
            report["fold_size"] = fold_size
    return report


def flatten_figures(figures: Mapping[str, object], prefix: str = "") -> dict[str, float]:
    """{"i2t": {"recall_vse": {1: 40.0}, "medr": 2.0}} -> {"<prefix>i2t_R@1": 40.0, "<prefix>i2t_medr": 2.0}.

    Entries that are not per-direction dicts of figures are skipped, so a whole
    :func:`kitm.eval.evaluate` result or one block of :func:`build_report` can be passed.
    """
    flat: dict[str, float] = {}
    for direction, block in figures.items():
        if not isinstance(block, Mapping):
            continue
        for metric, value in block.items():
            if isinstance(value, Mapping):
                for k, v in value.items():
                    flat[f"{prefix}{direction}_{FIGURE_NAMES.get(metric, metric)}@{k}"] = float(v)
            else:
                flat[f"{prefix}{direction}_{metric}"] = float(value)
    return flat


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
        lines.append(f"{caption} (R, IR-R, NCS, SR, mAP, N-way R@1 in percent; CS is Kendall tau-b)")
        lines += _rows(block, [("R", "recall_vse", True), ("IR-R", "recall", True), ("medr", "medr", False),
                               ("meanr", "meanr", False), ("mAP", "map", False)])
        if "ncs" in block["i2t"]:
            lines += _rows(block, [("NCS", "ncs", True), ("SR", "semantic_recall", True)])
        if "coherent_score" in block["i2t"]:
            lines += _rows(block, [("CS", "coherent_score", True)], digits=4)
        if "n_way" in block["i2t"]:
            lines += _rows(block, [("N-way", "n_way", True)])  # R@1 against N - 1 random distractors
        lines.append(f"  rsum {rsum(block):.2f}")
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

"""The figures of one study run, which of them a report shows by default, and which way each is better.

A run is scored by ``python -m kitm.eval --run_dir=... --out=<run_dir>/study_eval.json``. That JSON holds
``"flat"`` (:func:`kitm.eval.report.flatten_figures` of the whole set: ``i2t_R@1`` for VSE++ recall R^V@1,
``i2t_IR_R@1`` for information-retrieval recall, ``i2t_NCS@10``, ``i2t_SR@5``, ``i2t_CS@30``, ``i2t_medr``,
``i2t_meanr``, ``i2t_map``, ``i2t_mAP_at_R``, ``i2t_R_precision``, ``i2t_NWAY_R1@5``, the same with ``t2i_``; with
``--fold_images=F`` also ``fold<F>_i2t_R@1``, ``fold<F>_t2i_IR_R@5`` and ``fold<F>_rsum``, R@K on folds of F images,
whose family keeps the prefix: ``fold100_R``) and ``"rsum"`` (sum of R^V@K over both
directions and every K). :func:`run_figures` merges them into one {name: value} dict, with Thomas & Kovashka's
neighbourhood preservation when kitm.eval ran with ``--neighborhood``: ``NP_text`` and ``NP_image`` (percent of
an item's k nearest neighbours in the text-only space that stay among its k nearest in the learned space), also as
``NP_text@<k>`` and ``NP_image@<k>`` with the k the evaluation used (Thomas & Kovashka use k = 200).

Everything is in percent except CS (Kendall tau-b, in [-1, 1]) and the ranks medr and meanr, where lower is
better (:data:`LOWER_IS_BETTER`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping

from kitm.eval.report import FIGURE_NAMES

DIRECTIONS = ("i2t", "t2i")
DIRECTION_TITLES = {"i2t": "image -> text", "t2i": "text -> image"}
# Figures where a smaller value is the better one: the median and mean rank of the first ground-truth item.
LOWER_IS_BETTER = frozenset({"medr", "meanr"})
# Families of the default metric list, in the order a report shows them (short names of kitm.eval.report).
DEFAULT_FAMILIES = (FIGURE_NAMES["recall_vse"], FIGURE_NAMES["ncs"], FIGURE_NAMES["semantic_recall"],
                    FIGURE_NAMES["coherent_score"])
RSUM = "rsum"
NEIGHBORHOOD = ("NP_text", "NP_image")

_KEYED = re.compile(r"^(?P<fold>fold\d+_)?(?P<direction>i2t|t2i)_(?P<family>[A-Za-z0-9_]+?)@(?P<k>\d+)$")
_PLAIN = re.compile(r"^(?P<fold>fold\d+_)?(?P<direction>i2t|t2i)_(?P<family>[A-Za-z0-9_]+)$")


def parse_metric(name: str) -> tuple[str | None, str, int | None]:
    """``"i2t_R@5"`` -> ("i2t", "R", 5); ``"t2i_medr"`` -> ("t2i", "medr", None); ``"rsum"`` -> (None, "rsum", None);
    ``"fold100_i2t_R@1"`` -> ("i2t", "fold100_R", 1) (R@1 on folds of 100 images); ``"fold100_rsum"`` -> (None,
    "fold100_rsum", None)."""
    match = _KEYED.match(name)
    if match:
        return match["direction"], (match["fold"] or "") + match["family"], int(match["k"])
    match = _PLAIN.match(name)
    if match:
        return match["direction"], (match["fold"] or "") + match["family"], None
    return None, name, None


def lower_is_better(name: str) -> bool:
    """Whether a smaller value of metric `name` is better (medr, meanr in either direction)."""
    return parse_metric(name)[1] in LOWER_IS_BETTER


def units(name: str) -> str:
    """The unit of a metric for axis labels and tables."""
    family = parse_metric(name)[1]
    if family == FIGURE_NAMES["coherent_score"]:
        return "Kendall tau-b"
    if family in LOWER_IS_BETTER:
        return "rank"
    return "percent"


def decimals(name: str) -> int:
    """Digits after the point a report shows: CS lives in [-1, 1], the rest in percent or ranks."""
    return 4 if parse_metric(name)[1] == FIGURE_NAMES["coherent_score"] else 2


def run_figures(payload: Mapping[str, object]) -> dict[str, float]:
    """{metric: value} of one ``python -m kitm.eval`` JSON report (its ``flat`` figures plus ``rsum``).

    Raises ValueError when the payload lacks the ``flat`` block (not a kitm.eval report).
    """
    flat = payload.get("flat")
    if not isinstance(flat, Mapping):
        raise ValueError("not a python -m kitm.eval report: it has no 'flat' figures")
    figures = {str(name): float(value) for name, value in flat.items() if value is not None}
    if payload.get(RSUM) is not None:
        figures[RSUM] = float(payload[RSUM])
    preservation = payload.get("neighbourhood_preservation")
    if isinstance(preservation, Mapping):
        k = preservation.get("k")
        for name in NEIGHBORHOOD:
            value = preservation.get(name.split("_", 1)[1])
            if value is not None:
                figures[name] = 100.0 * float(value)
                if k is not None:  # NP_text@200: the k in the name, so that a claim can name the paper's k
                    figures[f"{name}@{int(k)}"] = 100.0 * float(value)
    return {name: value for name, value in figures.items() if math.isfinite(value)}


def default_metrics(available: Iterable[str]) -> list[str]:
    """The report's metrics when a spec lists none: R^V@K, NCS@K, SR@K, CS@K (each i2t then t2i, K ascending),
    then rsum, keeping those present in `available`."""
    available = set(available)
    chosen = []
    for family in DEFAULT_FAMILIES:
        for direction in DIRECTIONS:
            chosen += curve_metrics(available, direction, family)
    if RSUM in available:
        chosen.append(RSUM)
    return chosen + [name for name in NEIGHBORHOOD if name in available]


def curve_metrics(available: Iterable[str], direction: str, family: str) -> list[str]:
    """The ``<direction>_<family>@K`` names among `available`, K ascending (the points of an R@K curve)."""
    keyed = []
    for name in available:
        d, f, k = parse_metric(name)
        if d == direction and f == family and k is not None:
            keyed.append((k, name))
    return [name for _, name in sorted(keyed)]

"""Ladder loss with hard contrastive sampling, fixed and adaptive (Zhou et al., AAAI 2020 / TMM).

docs/methods.md#ladder. Each query's non-positive candidates are split by relevance into ladder levels
N_1 (most relevant), ..., N_L. With `N_<l` = every candidate of level < l (the positive, level 0,
included) and `N_>=l` = every candidate of level >= l, the non-cumulative loss of one query q is

    beta_1 [ alpha_1 - s(q, q) + max_{j in N_>=1} s(q, j) ]+                     (VSE++ hardest negative)
  + sum_{l >= 2} beta_l [ alpha_l - min_{i in N_<l} s(q, i) + max_{j in N_>=l} s(q, j) ]+     (Eq. 8, HC)

and the cumulative form (reference code option) replaces the l >= 2 hinges by
`[ sum_{k <= l} alpha_k - s(q, q) + max_{j in N_>=l} s(q, j) ]+`. Both directions are summed: image
queries are the rows of the similarity matrix (candidates: captions), caption queries its columns
(candidates: images). A hinge whose `N_>=l` (or `N_<l`) is empty contributes nothing: kitm takes the
maximum over a properly masked set, where the reference (`Code/ladderloss.py`) takes it over
`scores * mask` (masked entries count as 0, wrong for negative similarities) and charges
`alpha_l - min(...)` even when `N_>=l` is empty. Where all similarities are positive and every set is
non-empty the two agree exactly.

Levels are int matrices: `row_levels[p, q]` is the level of caption q for image query p and
`column_levels[p, q]` the level of image p for caption query q; 0 marks the positive(s) (the diagonal
and, with `image_index`, other samples of the same image). The per-row value of row p is image query
p's ladder plus caption query p's ladder, so the sum over rows is the loss.

Example (one image query, hand-computed): s(q, .) = [0.05 (positive), 0.1, -0.2, -0.1] with levels
[0, 1, 2, 2], alpha = (0.2, 0.1), beta = (1, 0.5):
  ladder 1: [0.2 - 0.05 + max(0.1, -0.2, -0.1)]+ = 0.25
  ladder 2: [0.1 - min(0.05, 0.1) + max(-0.2, -0.1)]+ = [-0.05]+ = 0
  query total: 1 * 0.25 + 0.5 * 0 = 0.25.
The reference's `scores * mask` makes the ladder-2 maximum max(0, 0, -0.2, -0.1) = 0 and charges
[0.1 - 0.05 + 0]+ = 0.05, total 0.275; with levels [0, 1, 1, 1] (N_>=2 empty) kitm's ladder 2 is 0
while the reference still charges [0.1 - min(0.05, 0.1, -0.2, -0.1) + 0]+ = 0.3.

Fixed levels come from thresholds on the relevance (`ladder_levels`, `LadderLoss`); adaptive levels from
1-D k-means of each query's relevance values with k chosen by the silhouette (`AdaptiveLadderLoss`,
paper Eqs. 9-12, via `kitm.ops.kmeans1d.auto_kmeans_1d`).
"""

from __future__ import annotations

from typing import Sequence

import keras
import numpy as np
from keras import ops

from kitm.losses.base import RetrievalLoss, check_margin, hardest_or_sum, shapes_compatible
from kitm.losses.samplers import hard_contrastive, masked_max
from kitm.ops.kmeans1d import DEFAULT_LLOYD_RUNS, auto_kmeans_1d
from kitm.ops.similarity import negative_mask

__all__ = ["ladder_levels", "ladder_terms", "ladder_loss", "LadderLoss", "AdaptiveLadderLoss"]


def _floats(name: str, values) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in values)
    except TypeError as error:
        raise ValueError(f"{name} must be a sequence of numbers; got {values!r}.") from error
    if any(v != v for v in values):
        raise ValueError(f"{name} must not contain NaN; got {values}.")
    return values


def _check_thresholds(thresholds) -> tuple[float, ...]:
    thresholds = _floats("thresholds", thresholds)
    if any(later >= earlier for earlier, later in zip(thresholds, thresholds[1:])):
        raise ValueError(f"thresholds must be strictly decreasing (theta_1 > theta_2 > ...); got {thresholds}.")
    return thresholds


def _check_margins_betas(margins, betas) -> tuple[tuple[float, ...], tuple[float, ...]]:
    margins = _floats("margins", margins)
    betas = _floats("betas", betas)
    if not margins:
        raise ValueError("margins must hold at least alpha_1 (the triplet margin); got ().")
    if len(margins) != len(betas):
        raise ValueError(f"margins and betas must have the same length (one per ladder level); got "
                         f"{len(margins)} margins {margins} and {len(betas)} betas {betas}.")
    if not all(m >= 0 for m in margins):  # NaN refused too
        raise ValueError(f"margins must be >= 0; got {margins}.")
    if any(b < 0 for b in betas):
        raise ValueError(f"betas must be >= 0; got {betas}.")
    return margins, betas


def _is_float(tensor) -> bool:
    return "float" in keras.backend.standardize_dtype(tensor.dtype)


def _is_int(tensor) -> bool:
    return keras.backend.standardize_dtype(tensor.dtype).startswith(("int", "uint"))


def ladder_levels(relevance, thresholds: Sequence[float], *, image_index=None):
    """Ladder level of every candidate by fixed thresholds: int32 [B, B].

    `level[p, q] = 1 + #{l : relevance[p, q] < theta_l}` off the diagonal, 0 on it: level 1 holds
    relevance >= theta_1, level 2 theta_2 <= relevance < theta_1, ..., level L relevance < theta_{L-1}.
    A value exactly at a threshold joins the more relevant level (`>=`, as the reference's
    `rdmat >= thre`). With `image_index`, other samples of the same image are positives too (level 0).

    The rule is elementwise, so the same matrix serves image queries (rows) and caption queries
    (columns: relevance[p, q] is then the relevance between caption query q and candidate image p).

    Args:
      relevance: float [B, B], relevance[p, q] of caption q to image p.
      thresholds: strictly decreasing (theta_1 > theta_2 > ...); () gives one level (triplet only).
      image_index: optional int [B], dataset index of image p.
    """
    thresholds = _check_thresholds(thresholds)
    return threshold_levels(relevance, np.asarray(thresholds, np.float64).reshape([len(thresholds)]),
                            image_index=image_index)


def threshold_levels(relevance, thresholds, *, image_index=None):
    """`ladder_levels` with the thresholds as a tensor (e.g. a variable a callback re-assigns): int32 [B, B].

    The thresholds are not checked (a tensor's values are not known when the graph is traced); a -inf threshold
    never counts, so the level it would open stays empty.
    """
    relevance = ops.convert_to_tensor(relevance)
    if len(relevance.shape) != 2:
        raise ValueError(f"relevance must be a [B, B] matrix; got shape {tuple(relevance.shape)}.")
    if not _is_float(relevance):
        relevance = ops.cast(relevance, "float64")  # an integer dtype would truncate the thresholds
    thresholds = ops.cast(ops.reshape(ops.convert_to_tensor(thresholds), [-1]), relevance.dtype)
    below = ops.cast(relevance[:, :, None] < thresholds[None, None, :], "int32")
    levels = 1 + ops.sum(below, axis=2)
    positive = ops.logical_not(negative_mask(relevance, image_index))
    return ops.where(positive, ops.zeros_like(levels), levels)


def _query_ladders(similarity, levels, margins, cumulative, first_hardest=True):
    """Ladder hinges of the queries along axis 1 of `similarity`/`levels` (rows are queries): a list of
    L tensors [B], unweighted. `first_hardest` False (or a False bool tensor): the first rung sums its hinge
    over N_>=1 instead of taking the hardest negative (the warm-up of kitm.losses.base)."""
    positive = ops.diagonal(similarity)
    hinges = []
    negatives = levels >= 1
    first_max, has_negative = masked_max(similarity, negatives, axis=1)
    hardest = ops.where(has_negative, ops.relu(margins[0] - positive + first_max), ops.zeros_like(positive))
    if first_hardest is True:
        hinges.append(hardest)
    else:
        every = ops.relu(margins[0] - positive[:, None] + similarity)
        total = ops.sum(ops.where(negatives, every, ops.zeros_like(every)), axis=1)
        hinges.append(hardest_or_sum(hardest, total, first_hardest))
    for l in range(2, len(margins) + 1):
        farther = levels >= l
        if cumulative:
            closest, valid = masked_max(similarity, farther, axis=1)
            hinge = ops.relu(sum(margins[:l]) - positive + closest)
        else:
            furthest, closest, valid = hard_contrastive(similarity, levels < l, farther, axis=1)
            hinge = ops.relu(margins[l - 1] - furthest + closest)
        hinges.append(ops.where(valid, hinge, ops.zeros_like(hinge)))
    return hinges


def ladder_terms(similarity, row_levels, column_levels, *, margins: Sequence[float], betas: Sequence[float],
                 cumulative: bool = False, first_hardest=True) -> list:
    """Weighted per-row ladder terms, one [B] tensor per level l = 1..L (image plus caption queries).

    Arguments as in `ladder_loss`; `sum(ladder_terms(...)) == ladder_loss(...)`.
    """
    if not ops.is_tensor(first_hardest):
        first_hardest = bool(first_hardest)
    margins, betas = _check_margins_betas(margins, betas)
    similarity = ops.convert_to_tensor(similarity)
    if len(similarity.shape) != 2:
        raise ValueError(f"similarity must be a [B, B] matrix; got shape {tuple(similarity.shape)}.")
    checked = []
    for name, levels in (("row_levels", row_levels), ("column_levels", column_levels)):
        levels = ops.convert_to_tensor(levels)
        if len(levels.shape) != 2 or not shapes_compatible(levels.shape, similarity.shape):
            raise ValueError(f"{name} must be an int [B, B] matrix like similarity {tuple(similarity.shape)}; "
                             f"got shape {tuple(levels.shape)}.")
        if not _is_int(levels):
            raise ValueError(f"{name} must be integer ladder levels; got dtype "
                             f"{keras.backend.standardize_dtype(levels.dtype)}.")
        checked.append(ops.cast(levels, "int32"))
    row_levels, column_levels = checked
    image_queries = _query_ladders(similarity, row_levels, margins, cumulative, first_hardest)
    # Caption queries are the columns: transpose so that they become rows.
    caption_queries = _query_ladders(ops.transpose(similarity), ops.transpose(column_levels), margins, cumulative,
                                     first_hardest)
    return [beta * (i2t + t2i) for beta, i2t, t2i in zip(betas, image_queries, caption_queries)]


def ladder_loss(similarity, row_levels, column_levels, *, margins: Sequence[float], betas: Sequence[float],
                cumulative: bool = False, first_hardest=True):
    """Ladder loss per batch row [B]; the sum is the loss of docs/methods.md#ladder (module docstring).

    Args:
      similarity: [B, B] image-by-caption cosine matrix.
      row_levels: int [B, B], level of caption q for image query p (0 = positive).
      column_levels: int [B, B], level of image p for caption query q (0 = positive).
      margins: (alpha_1, ..., alpha_L); alpha_1 is the triplet margin of the first ladder.
      betas: (beta_1, ..., beta_L), the same length as `margins`.
      cumulative: the cumulative form (margins summed up to l against the positive) instead of
        hard contrastive pairs.
      first_hardest: the first ladder takes the hardest negative (True, the paper) or sums its hinge over
        every candidate of N_>=1 (False; a scalar bool tensor switches per step: the hardest-negative warm-up
        of kitm.losses.base).
    """
    terms = ladder_terms(similarity, row_levels, column_levels, margins=margins, betas=betas,
                         cumulative=cumulative, first_hardest=first_hardest)
    total = terms[0]
    for term in terms[1:]:
        total = total + term
    return total


def _relevance(y_true, loss_name: str):
    relevance = RetrievalLoss.optional(y_true, "relevance")
    if relevance is None:
        raise ValueError(f"{loss_name} needs y_true['relevance'] ([B, B], relevance of caption q to image p).")
    relevance = ops.convert_to_tensor(relevance)
    if len(relevance.shape) != 2:
        raise ValueError(f"y_true['relevance'] must be [B, B]; got shape {tuple(relevance.shape)}.")
    return relevance


@keras.saving.register_keras_serializable(package="kitm")
class LadderLoss(RetrievalLoss):
    """Ladder loss with fixed relevance thresholds (Zhou et al., Sec. III-B; docs/methods.md#ladder defaults).

    Uses `y_true["relevance"]` (SBERT relevance degree by default in kitm's pipeline) and, when
    present, `y_true["image_index"]` (other samples of the same image are positives, level 0).

    Args:
      thresholds: strictly decreasing theta_1 > theta_2 > ... (SBERT: (0.40,); L = 3 adds 0.35).
      margins: (alpha_1, ..., alpha_L), L = len(thresholds) + 1 (paper: (0.2, 0.01[, 0.01])).
      betas: (beta_1, ..., beta_L) (paper: (1, 0.25[, 0.125])).
      cumulative: cumulative form instead of hard contrastive pairs.
      hardest_warmup_steps: the first ladder sums over N_>=1 for this many training steps before it takes the
        hardest negative (kitm.losses.base, "Hardest-negative warm-up").
      max_violation: the first ladder takes the hardest negative (True, the paper: it is the VSE++ triplet) or
        sums over N_>=1 throughout (False, VSE++'s sum form; the hinges of later ladders are unchanged).
    Terms: "level_1" (the VSE++ hardest-negative triplet with alpha_1, weighted by beta_1) ...
    "level_L", each summing image and caption queries.
    """

    has_hardest_negatives = True
    needs_relevance = True

    def __init__(self, thresholds: Sequence[float] = (0.40,), margins: Sequence[float] = (0.2, 0.01),
                 betas: Sequence[float] = (1.0, 0.25), cumulative: bool = False, name: str = "ladder",
                 reduction: str = "sum", dtype=None, hardest_warmup_steps: int = 0, max_violation: bool = True):
        super().__init__(name=name, reduction=reduction, dtype=dtype, hardest_warmup_steps=hardest_warmup_steps)
        self.max_violation = bool(max_violation)
        self.thresholds = _check_thresholds(thresholds)
        self.margins, self.betas = _check_margins_betas(margins, betas)
        if len(self.margins) != len(self.thresholds) + 1:
            raise ValueError(f"margins and betas need one entry per ladder level, len(thresholds) + 1 = "
                             f"{len(self.thresholds) + 1}; got {len(self.margins)} margins {self.margins}.")
        self.cumulative = bool(cumulative)
        self.term_names = tuple(f"level_{l}" for l in range(1, len(self.margins) + 1))

    def levels(self, y_true):
        """The batch's ladder levels (the same matrix for row and column queries)."""
        return ladder_levels(_relevance(y_true, "LadderLoss"), self.thresholds,
                             image_index=self.optional(y_true, "image_index"))

    def compute_terms(self, y_true, y_pred):
        similarity = self.similarity(y_pred)
        levels = self.levels(y_true)
        terms = ladder_terms(similarity, levels, levels, margins=self.margins, betas=self.betas,
                             cumulative=self.cumulative,
                             first_hardest=self.max_violation and self.hardest_negatives_on())
        return dict(zip(self.term_names, terms))

    def get_config(self):
        config = super().get_config()
        config.update(thresholds=list(self.thresholds), margins=list(self.margins), betas=list(self.betas),
                      cumulative=self.cumulative, max_violation=self.max_violation)
        return config


def adaptive_levels(relevance, k_min: int, k_max: int, *, image_index=None, lloyd_runs: int = DEFAULT_LLOYD_RUNS,
                    jit_compile: bool = True) -> tuple:
    """(row_levels, column_levels), int32 [B, B], from per-query 1-D k-means (Zhou et al., Eqs. 9-12).

    Each row of `relevance` (image query p: its captions) and each column (caption query q: its images)
    is clustered on its own over the *non-positive candidates only* (paper Eq. 9 sums over N^{-q};
    docs/methods.md#adaptive-ladder): the diagonal and, with `image_index`, same-image samples are masked out of the
    clustering and get level 0. (The reference clusters the whole row, positive included, and then
    overwrites the positive's label.) Clusters are numbered 1, 2, ... by decreasing centre; a query
    whose candidates hold fewer than `k_min` distinct values gets one level per distinct value, and one
    with no candidate (B = 1) only level 0. `lloyd_runs` (Lloyd runs from k-means++ seeds scored beside
    the exact optimum; 0 for the exact optimum only) and `jit_compile` are passed to `auto_kmeans_1d` (XLA, compiled
    once per batch shape: faster for a fixed batch size; False where the batch size keeps changing).
    """
    relevance = ops.convert_to_tensor(relevance)
    if len(relevance.shape) != 2 or not shapes_compatible(relevance.shape[:1], relevance.shape[1:]):
        raise ValueError(f"relevance must be a square [B, B] matrix; got shape {tuple(relevance.shape)}.")
    if not _is_float(relevance):
        relevance = ops.cast(relevance, "float32")
    candidates = negative_mask(relevance, image_index)
    b = relevance.shape[1]
    # Both directions in one call: rows are image queries, rows of the transpose caption queries. One
    # [2B, B] clustering costs much less than two [B, B] ones (one XLA launch, one batched DP).
    values = ops.concatenate([relevance, ops.transpose(relevance)], axis=0)
    mask = ops.concatenate([candidates, ops.transpose(candidates)], axis=0)
    # k-means needs at least k_max columns; masked padding columns are ignored and dropped.
    cols = ops.shape(values)[1]  # a tensor only in TensorFlow graphs with an unknown batch size
    pad = max(k_max - b, 0) if b is not None else ops.maximum(k_max - cols, 0)
    if b is None or pad > 0:
        filler = (ops.shape(values)[0], pad)
        values = ops.concatenate([values, ops.zeros(filler, values.dtype)], axis=1)
        mask = ops.concatenate([mask, ops.zeros(filler, "bool")], axis=1)
    labels, _, _ = auto_kmeans_1d(values, k_min, k_max, mask=mask, lloyd_runs=lloyd_runs, jit_compile=jit_compile)
    labels = labels[:, :cols]
    rows = ops.shape(relevance)[0]
    row_levels = labels[:rows]
    column_levels = ops.transpose(labels[rows:])
    return row_levels, column_levels


def _check_level_bounds(level_bounds) -> tuple[int, int]:
    try:
        k_min, k_max = level_bounds
    except (TypeError, ValueError) as error:
        raise ValueError(f"level_bounds must be a pair (L_min, L_max); got {level_bounds!r}.") from error
    if any(isinstance(k, bool) or int(k) != k for k in (k_min, k_max)):
        raise ValueError(f"level_bounds must hold integers; got {level_bounds!r}.")
    k_min, k_max = int(k_min), int(k_max)
    if not 2 <= k_min <= k_max:
        raise ValueError(f"level_bounds must satisfy 2 <= L_min <= L_max (a silhouette needs two clusters; "
                         f"use TripletLoss for L = 1); got {level_bounds!r}.")
    return k_min, k_max


@keras.saving.register_keras_serializable(package="kitm")
class AdaptiveLadderLoss(RetrievalLoss):
    """Adaptive ladder loss: levels from per-query k-means of the batch relevance (Zhou et al., Sec. III-C).

    For every image query (row of `y_true["relevance"]`) and every caption query (column), the
    non-positive candidates' relevance values are clustered by 1-D k-means for each k in [L_min, L_max]
    (the exact optimum, or a Lloyd run's result where it scores a higher silhouette); the k with the
    highest mean silhouette is kept (`adaptive_levels`). Ladder l then
    uses margin alpha_l and weight beta_l; a query with fewer than l clusters has an empty `N_>=l` and
    pays nothing for ladder l (the reference pays `alpha_l - min(...)`, docs/methods.md#ladder).

    The levels depend only on the relevance, not on the model, so an input pipeline may compute them
    with `adaptive_levels` (e.g. in a parallel `tf.data` map) and pass `y_true["row_levels"]` and
    `y_true["column_levels"]`; the loss then skips its own clustering, which is most of its cost
    (about 30 ms of a B = 128 step on 2 CPU cores, `benchmarks/bench_losses.py`).

    Args:
      level_bounds: (L_min, L_max), 2 <= L_min <= L_max (paper default (2, 4)).
      first_margin: alpha_1, the triplet margin (0.2).
      margin: alpha_l for l >= 2 (0.01).
      betas: (beta_1, ..., beta_{L_max}); None gives the paper's beta_1 = 1, beta_l = 1 / 2^l.
      cumulative: cumulative form instead of hard contrastive pairs.
      lloyd_runs: Lloyd runs from k-means++ seeds per query and k, scored beside the exact k-means
        optimum (`kitm.ops.auto_kmeans_1d`); 0 clusters with the exact optimum only.
      jit_compile: cluster with XLA (`auto_kmeans_1d`; one compilation per batch shape).
      hardest_warmup_steps, max_violation: as `LadderLoss`.
    Terms: "level_1" ... "level_{L_max}" (both directions summed, weighted).
    """

    has_hardest_negatives = True
    needs_relevance = True

    def __init__(self, level_bounds: Sequence[int] = (2, 4), first_margin: float = 0.2, margin: float = 0.01,
                 betas: Sequence[float] | None = None, cumulative: bool = False,
                 lloyd_runs: int = DEFAULT_LLOYD_RUNS, jit_compile: bool = True,
                 name: str = "adaptive_ladder", reduction: str = "sum", dtype=None, hardest_warmup_steps: int = 0,
                 max_violation: bool = True):
        super().__init__(name=name, reduction=reduction, dtype=dtype, hardest_warmup_steps=hardest_warmup_steps)
        self.max_violation = bool(max_violation)
        self.level_bounds = _check_level_bounds(level_bounds)
        levels = self.level_bounds[1]
        self.first_margin = check_margin(first_margin)
        self.margin = check_margin(margin)
        default_betas = betas is None
        if default_betas:
            betas = (1.0,) + tuple(1.0 / 2 ** l for l in range(2, levels + 1))
        betas = _floats("betas", betas)
        if len(betas) != levels:
            raise ValueError(f"betas must have L_max = {levels} entries (one per ladder level); got {betas}.")
        margins = (self.first_margin,) + (self.margin,) * (levels - 1)
        self.margins, betas = _check_margins_betas(margins, betas)
        self.betas = None if default_betas else betas
        self._betas = betas
        self.cumulative = bool(cumulative)
        if isinstance(lloyd_runs, bool) or int(lloyd_runs) != lloyd_runs or int(lloyd_runs) < 0:
            raise ValueError(f"lloyd_runs must be an integer >= 0; got {lloyd_runs!r}.")
        self.lloyd_runs = int(lloyd_runs)
        self.jit_compile = bool(jit_compile)
        self.term_names = tuple(f"level_{l}" for l in range(1, levels + 1))
        self.monitor_names = ("levels_per_query",)  # logged as <name>/levels_per_query, not part of the loss

    def levels(self, y_true) -> tuple:
        """(row_levels, column_levels) of the batch: `y_true["row_levels"]` and `y_true["column_levels"]`
        when the input pipeline supplies them, else `adaptive_levels` of `y_true["relevance"]`."""
        row_levels = self.optional(y_true, "row_levels")
        column_levels = self.optional(y_true, "column_levels")
        if row_levels is not None and column_levels is not None:
            return row_levels, column_levels
        return adaptive_levels(_relevance(y_true, "AdaptiveLadderLoss"), *self.level_bounds,
                               image_index=self.optional(y_true, "image_index"), lloyd_runs=self.lloyd_runs,
                               jit_compile=self.jit_compile)

    def compute_terms(self, y_true, y_pred):
        similarity = self.similarity(y_pred)
        row_levels, column_levels = self.levels(y_true)
        terms = ladder_terms(similarity, row_levels, column_levels, margins=self.margins, betas=self._betas,
                             cumulative=self.cumulative,
                             first_hardest=self.max_violation and self.hardest_negatives_on())
        # The number of ladder levels the clustering chose, per query, for the logs (DualEncoder reads
        # `monitored` right after this call, in the same step).
        chosen = ops.concatenate([ops.max(row_levels, axis=1), ops.max(column_levels, axis=0)], axis=0)
        self.monitored = {"levels_per_query": ops.mean(ops.cast(chosen, "float32"))}
        return dict(zip(self.term_names, terms))

    def get_config(self):
        config = super().get_config()
        config.update(level_bounds=list(self.level_bounds), first_margin=self.first_margin, margin=self.margin,
                      betas=None if self.betas is None else list(self.betas), cumulative=self.cumulative,
                      lloyd_runs=self.lloyd_runs, jit_compile=self.jit_compile, max_violation=self.max_violation)
        return config

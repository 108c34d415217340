"""Contrastive objectives: InfoNCE (CLIP), SigLIP, and kitm's graded InfoNCE (docs/methods.md#contrastive).

With `s[p, q]` the cosine of image p and caption q in a batch of B pairs:

- InfoNCE (Radford et al. 2021, "Learning Transferable Visual Models From Natural Language Supervision"):
  logits `z[p, q] = exp(t) * s[p, q]`, t learnable, initialised at log(1/0.07), exp(t) clipped at 100;

      L = 1/2 * ( sum_p -log softmax_q(z[p, :])[p]  +  sum_q -log softmax_p(z[:, q])[q] )

- SigLIP (Zhai et al. 2023, "Sigmoid Loss for Language Image Pre-Training"): `z[p, q] = exp(t') * s[p, q] + b`,
  t' initialised at log 10, b at -10;

      L = -sum_p sum_q log sigmoid(y[p, q] * z[p, q]),   y = +1 when caption q belongs to image p, else -1

- Graded InfoNCE (kitm, docs/methods.md#graded-infonce): soft targets from R. For image p, `R'[p, :]` is `R[p, :]`
  with its positives' entries raised to the row maximum and `Y_i2t[p, :] = softmax_q(R'[p, :] / tau_R)`; for
  caption q the same down column q gives `Y_t2i[:, q]`;

      L = 1/2 * ( sum_p -sum_q Y_i2t[p, q] log softmax_q(z[p, :])[q]
                  + sum_q -sum_p Y_t2i[p, q] log softmax_p(z[:, q])[p] )

  As tau_R -> 0 the targets become uniform over the entries at the row maximum: InfoNCE's one-hot target when the
  positive is the only one there.

Samples of the same image are positives of each other in every contrastive loss, never negatives (docs/methods.md).
When every caption is a sample, `image_index` marks rows of the same image; for row p the positives are
`P(p) = {q : image_index[q] == image_index[p]}` (the diagonal alone without `image_index`):
- InfoNCE: the target of row p is uniform over P(p), i.e. the row's term is the mean over q in P(p) of
  `-log softmax_q(z[p, :])[q]` (likewise down the columns). This is graded InfoNCE's limit tau_R -> 0 when the
  entries of P(p) tie at the row maximum of R', which is how graded InfoNCE treats them: every entry of P(p) is
  raised to the row maximum, not only the diagonal's.
- SigLIP: y[p, q] = +1 for q in P(p).
Without repeated images both reduce to the formulas of docs/methods.md#contrastive.

Per-row values. Row p's value is `i2t[p] + t2i[p]`: image p's half of the image-to-caption sum plus caption p's
half of the caption-to-image sum (SigLIP: half of row p's sum and half of column p's), so the sum over rows is L.
kitm reduces by "sum" (docs/methods.md#reduction-and-warm-up); CLIP's and SigLIP's code divide by B, which is
`reduction="sum_over_batch_size"`.

The learnable temperature (and SigLIP's bias) belong to the objective, but, as in CLIP and SigLIP, they are trained
by the model's optimizer with the encoders, in the same step: the loss classes set `uses_model_optimizer` and list
the variables in `trainable_variables`; `kitm.models.DualEncoder` adds them to what its optimizer updates. The
variables are called `logit_scale_log` and `logit_bias`, so that an optimizer with weight decay can leave them out
as open_clip does (`optimizer.exclude_from_weight_decay(var_names=["logit_"])`, before it is built). The clip of
exp(t) at 100 is applied twice, as open_clip does it: in the forward pass (exp(min(t, log 100))) and on the variable
after each step (a constraint), so that t never drifts above the clip where its gradient would be 0.

Global negatives (`negatives="global"`, `kitm.losses.global_batch`; docs/scale.md). Under R replicas of b rows,
replica r computes its image anchors' terms on the rows block `S_rows = x_r Y^T` [b, B] (softmax along each row,
over every caption of the global batch) and its caption anchors' terms on the columns block `S_cols = X y_r^T`
[B, b] (softmax down each column, over every image), with the positives and the graded targets taken from the
global batch's image indices and relevance (`kitm.losses.global_batch`'s `*_block_terms`). Row p of the rows block
is row r b + p of the one-device matrix and column q of the columns block its column r b + q, so the terms are those
of the global batch.

Worked example (InfoNCE, hand-computed): s = [[0.5, 0.0], [0.0, 0.5]], exp(t) = 2: z = [[1, 0], [0, 1]];
every row and column has `-log softmax = log(1 + e^-1) = 0.31326`; row p's value is 1/2 * (0.31326 + 0.31326),
so per row [0.31326, 0.31326] and L = 0.62652. With `image_index = [0, 0]` (two samples of one image) every entry
is a positive: each row's and column's term is the mean of log(1 + e^-1) = 0.31326 and log(1 + e) = 1.31326, i.e.
0.81326, so per row [0.81326, 0.81326] and L = 1.62652.
"""

from __future__ import annotations

from typing import NamedTuple

import keras
from keras import ops

from kitm.losses.logit_scale import LogitScale, _finite_number, _positive_number
from kitm.losses.base import RetrievalLoss, shapes_compatible
from kitm.losses.global_batch import graded_info_nce_block_terms, info_nce_block_terms, siglip_block_terms
from kitm.ops.similarity import diagonal_mask, same_image_mask

__all__ = [
    "CLIP_LOGIT_SCALE", "CLIP_MAX_LOGIT_SCALE", "SIGLIP_LOGIT_SCALE", "SIGLIP_BIAS",
    "info_nce_terms", "info_nce_loss", "graded_info_nce_targets", "graded_info_nce_terms", "graded_info_nce_loss",
    "siglip_terms", "siglip_loss", "info_nce_block_terms", "graded_info_nce_block_terms", "siglip_block_terms",
    "LogitScale", "InfoNCELoss", "GradedInfoNCELoss", "SigLIPLoss",
]

CLIP_LOGIT_SCALE = 1.0 / 0.07  # exp(t) at initialisation (CLIP)
CLIP_MAX_LOGIT_SCALE = 100.0  # exp(t) is clipped here (CLIP)
SIGLIP_LOGIT_SCALE = 10.0  # exp(t') at initialisation (SigLIP)
SIGLIP_BIAS = -10.0  # b at initialisation (SigLIP)


# --------------------------------------------------------------------------------------------------
# Checks
# --------------------------------------------------------------------------------------------------

def _dtype(tensor) -> str:
    return keras.backend.standardize_dtype(tensor.dtype)


def _is_float(tensor) -> bool:
    return "float" in _dtype(tensor)


def _square(similarity):
    similarity = ops.convert_to_tensor(similarity)
    if len(similarity.shape) != 2 or not _is_float(similarity):
        raise ValueError(f"similarity must be a float [B, B] matrix; got {_dtype(similarity)} {similarity.shape}.")
    rows, columns = similarity.shape
    if rows is not None and columns is not None and rows != columns:
        raise ValueError(f"similarity must be square [B, B] (image p with caption p); got shape {similarity.shape}.")
    return similarity


def _scalar(value, dtype, name: str):
    # A Python number goes straight to `dtype`: exact in float64 (converted to float32 first it would not be).
    if isinstance(value, (int, float)):
        value = ops.convert_to_tensor(value, dtype=dtype)
    value = ops.cast(value, dtype)
    if len(value.shape) != 0:
        raise ValueError(f"{name} must be a scalar; got shape {value.shape}.")
    return value


def positive_mask(similarity, image_index=None):
    """Bool [B, B]: (p, q) is a positive pair: the diagonal, and with `image_index` every pair of one image."""
    rows = ops.shape(similarity)[0]
    diagonal = diagonal_mask(rows, rows)
    if image_index is None:
        return diagonal
    return ops.logical_or(diagonal, same_image_mask(image_index))


def _soft_cross_entropy(logits, row_targets, column_targets) -> tuple:
    """(1/2 -sum_q Y_i2t[p, q] log softmax_q(z[p, :])[q],  1/2 -sum_p Y_t2i[p, q] log softmax_p(z[:, q])[p]),
    each [B]: row targets sum to 1 along rows, column targets down columns."""
    i2t = -ops.sum(row_targets * ops.log_softmax(logits, axis=1), axis=1)
    t2i = -ops.sum(column_targets * ops.log_softmax(logits, axis=0), axis=0)
    return 0.5 * i2t, 0.5 * t2i


# --------------------------------------------------------------------------------------------------
# Plain functions
# --------------------------------------------------------------------------------------------------

def info_nce_terms(similarity, logit_scale, *, image_index=None) -> tuple:
    """InfoNCE per anchor: (i2t, t2i), each [B]; `i2t[p]` is half of image p's cross-entropy over the captions,
    `t2i[q]` half of caption q's over the images, each against a uniform target over the anchor's positives
    (module docstring)."""
    similarity = _square(similarity)
    logits = _scalar(logit_scale, similarity.dtype, "logit_scale") * similarity
    positives = ops.cast(positive_mask(similarity, image_index), similarity.dtype)
    row_targets = positives / ops.sum(positives, axis=1, keepdims=True)
    column_targets = positives / ops.sum(positives, axis=0, keepdims=True)
    return _soft_cross_entropy(logits, row_targets, column_targets)


def info_nce_loss(similarity, logit_scale, *, image_index=None):
    """InfoNCE (CLIP; Radford et al. 2021) per batch row [B]; its sum is L of docs/methods.md#infonce.

    Args:
      similarity: [B, B] image-by-caption cosine matrix `s[p, q]`.
      logit_scale: exp(t), a scalar (already clipped: `InfoNCELoss` clips it at 100).
      image_index: optional int [B]; rows of one image are positives of each other (module docstring).

    Example: `info_nce_loss([[0.5, 0.0], [0.0, 0.5]], 2.0)` -> [0.31326, 0.31326] (module docstring).
    """
    i2t, t2i = info_nce_terms(similarity, logit_scale, image_index=image_index)
    return i2t + t2i


def graded_info_nce_targets(relevance, *, tau_relevance: float, image_index=None) -> tuple:
    """Graded InfoNCE's soft targets (Y_i2t, Y_t2i), each [B, B]: rows of Y_i2t and columns of Y_t2i sum to 1.

    `R'` raises every positive's entry (the diagonal; with `image_index`, every sample of the same image) to the
    row maximum (Y_i2t) or the column maximum (Y_t2i), then a softmax of `R' / tau_relevance` along the row
    (column). The targets carry no gradient.
    """
    tau_relevance = _positive_number("tau_relevance", tau_relevance)
    relevance = ops.stop_gradient(ops.convert_to_tensor(relevance))
    if len(relevance.shape) != 2:
        raise ValueError(f"relevance must be a [B, B] matrix; got shape {relevance.shape}.")
    if not _is_float(relevance):
        relevance = ops.cast(relevance, "float32")
    positives = positive_mask(relevance, image_index)
    row_raised = ops.where(positives, ops.max(relevance, axis=1, keepdims=True) + ops.zeros_like(relevance),
                           relevance)
    column_raised = ops.where(positives, ops.max(relevance, axis=0, keepdims=True) + ops.zeros_like(relevance),
                              relevance)
    return (ops.softmax(row_raised / tau_relevance, axis=1), ops.softmax(column_raised / tau_relevance, axis=0))


def graded_info_nce_terms(similarity, relevance, logit_scale, *, tau_relevance: float,
                          image_index=None) -> tuple:
    """Graded InfoNCE per anchor: (i2t, t2i), each [B], halves of the soft cross-entropies (module docstring)."""
    similarity = _square(similarity)
    relevance = ops.convert_to_tensor(relevance)
    if len(relevance.shape) != 2 or not shapes_compatible(relevance.shape, similarity.shape):
        raise ValueError(f"relevance must be [B, B] like similarity {similarity.shape}; got {relevance.shape}.")
    row_targets, column_targets = graded_info_nce_targets(ops.cast(relevance, similarity.dtype),
                                                          tau_relevance=tau_relevance, image_index=image_index)
    logits = _scalar(logit_scale, similarity.dtype, "logit_scale") * similarity
    return _soft_cross_entropy(logits, row_targets, column_targets)


def graded_info_nce_loss(similarity, relevance, logit_scale, *, tau_relevance: float, image_index=None):
    """Graded InfoNCE (kitm; docs/methods.md#graded-infonce) per batch row [B]; its sum is L there.

    Args:
      similarity: [B, B] cosines `s[p, q]`.
      relevance: [B, B], `relevance[p, q]` the relevance of caption q to image p (the batch relevance R).
      logit_scale: exp(t), a scalar.
      tau_relevance: tau_R > 0, the temperature of the targets; tau_R -> 0 gives `info_nce_loss`.
      image_index: optional int [B]; samples of one image are positives of each other (module docstring).

    Example (hand-computed): s = [[0.5, 0.0], [0.0, 0.5]], exp(t) = 2 (z = [[1, 0], [0, 1]]),
    R = [[1.0, 0.5], [0.5, 1.0]], tau_R = 0.5: every row and column of targets is softmax([2, 1]) =
    [0.73106, 0.26894], log softmax(z) = [-0.31326, -1.31326], so each half is
    1/2 * (0.73106 * 0.31326 + 0.26894 * 1.31326) = 0.29110 and per row [0.58220, 0.58220].
    """
    i2t, t2i = graded_info_nce_terms(similarity, relevance, logit_scale, tau_relevance=tau_relevance,
                                     image_index=image_index)
    return i2t + t2i


def siglip_terms(similarity, logit_scale, bias, *, image_index=None) -> tuple:
    """SigLIP per anchor: (half of image p's row sum, half of caption q's column sum) of
    `-log sigmoid(y[p, q] * z[p, q])`, each [B]."""
    similarity = _square(similarity)
    logits = (_scalar(logit_scale, similarity.dtype, "logit_scale") * similarity
              + _scalar(bias, similarity.dtype, "bias"))
    signs = ops.where(positive_mask(similarity, image_index), ops.ones_like(similarity), -ops.ones_like(similarity))
    negative_log_sigmoid = ops.softplus(-signs * logits)  # -log sigmoid(x) = softplus(-x), stable for any x
    return 0.5 * ops.sum(negative_log_sigmoid, axis=1), 0.5 * ops.sum(negative_log_sigmoid, axis=0)


def siglip_loss(similarity, logit_scale, bias, *, image_index=None):
    """SigLIP (Zhai et al. 2023) per batch row [B]; its sum is L of docs/methods.md#siglip (the paper divides it by B).

    Args:
      similarity: [B, B] cosines `s[p, q]`.
      logit_scale: exp(t'), a scalar; bias: b, a scalar.
      image_index: optional int [B]; y = +1 on pairs of one image (module docstring).

    Example (hand-computed): s = [[0.5, 0.0], [0.0, 0.5]], exp(t') = 10, b = -5: z = [[0, -5], [-5, 0]];
    positives give -log sigmoid(0) = log 2 = 0.69315, negatives -log sigmoid(5) = 0.0067153; each row and each
    column sums to 0.69986, so per row 1/2 * (0.69986 + 0.69986) = 0.69986 and L = 1.39973.
    """
    i2t, t2i = siglip_terms(similarity, logit_scale, bias, image_index=image_index)
    return i2t + t2i


# The learnable temperature (and SigLIP's bias): kitm.losses.logit_scale.LogitScale.

# --------------------------------------------------------------------------------------------------
# Loss classes
# --------------------------------------------------------------------------------------------------

class _AnchorBlocks(NamedTuple):
    """What the terms of one replica's anchors are computed from (module docstring, "Global negatives"): the
    similarity blocks, their bool positives, the relevance blocks (None without relevance) and the candidates
    excluded from the negatives (None for none; kitm.losses.false_negatives). On one replica both blocks are the
    whole matrix."""

    rows: object
    columns: object
    row_positives: object
    column_positives: object
    relevance_rows: object = None
    relevance_columns: object = None
    row_excluded: object = None
    column_excluded: object = None


class _LearnableTemperature:
    """Mixin of the three classes: the `LogitScale` layer, its logging, the model-optimizer contract, and the
    anchors' blocks under global negatives or false-negative filtering."""

    term_names = ("i2t", "t2i")
    uses_model_optimizer = True  # DualEncoder trains `trainable_variables` with its own optimizer (module docstring)
    supports_global_negatives = True  # the rows and columns blocks (module docstring, "Global negatives")
    supports_false_negatives = True  # masked or counted as positives (kitm.losses.false_negatives)

    def _uses_blocks(self, y_pred) -> bool:
        """Whether the terms come from `_anchor_blocks`: under global negatives across replicas or with the
        false-negative filter; else from the plain functions on the whole matrix."""
        return self.global_batch(y_pred) is not None or self.false_negative_filter.active

    def _anchor_blocks(self, y_true, y_pred, relevance=None) -> _AnchorBlocks:
        """The anchors' `_AnchorBlocks`, the false-negative filter applied (its flags from `relevance`, else from
        y_true["relevance"])."""
        image_index = self.optional(y_true, "image_index")
        similarity = self.similarity(y_pred)  # the checks of y_pred
        filtering = self.false_negative_filter
        if relevance is None and filtering.active:
            relevance = self.false_negative_relevance(y_true)
        batch = self.global_batch(y_pred)
        if batch is not None:
            rows, columns = batch.similarity_blocks(y_pred)
            row_positives, column_positives = batch.positive_blocks(image_index)
            relevance_rows, relevance_columns = (None, None) if relevance is None else batch.relevance_blocks(relevance)
            own = batch.positive_blocks(None)
        else:
            rows = columns = similarity
            row_positives = column_positives = positive_mask(similarity, image_index)
            relevance_rows = relevance_columns = None if relevance is None else ops.convert_to_tensor(relevance)
            if relevance is not None and (len(relevance_rows.shape) != 2
                                          or not shapes_compatible(relevance_rows.shape, similarity.shape)):
                raise ValueError(f"relevance must be [B, B] like similarity {similarity.shape}; got "
                                 f"{relevance_rows.shape}.")
            own = (diagonal_mask(ops.shape(similarity)[0], ops.shape(similarity)[0]),) * 2
        excluded = (None, None)
        if filtering.active:
            flags = filtering.flags(relevance_rows, relevance_columns, *own)
            row_positives, column_positives, *excluded = filtering.apply(row_positives, column_positives, *flags)
        return _AnchorBlocks(rows, columns, row_positives, column_positives, relevance_rows, relevance_columns,
                             *excluded)

    def _init_temperature(self, *, logit_scale_init: float, max_logit_scale: float | None, bias_init: float | None,
                          learnable: bool, name: str, dtype) -> None:
        self.logit_scale_init = _positive_number("logit_scale_init", logit_scale_init)
        self.max_logit_scale = _positive_number("max_logit_scale", max_logit_scale, allow_none=True)
        self.learnable = bool(learnable)
        self.temperature = LogitScale(self.logit_scale_init, self.max_logit_scale, bias_init,
                                      name=f"{name}_logit_scale", dtype=dtype)
        self.temperature.trainable = self.learnable
        self.monitor_names = ("logit_scale",) if bias_init is None else ("logit_scale", "bias")
        self.monitored: dict = {}

    @property
    def trainable_variables(self) -> list:
        """t (and b) while `learnable`; the model's optimizer updates them (`uses_model_optimizer`)."""
        return list(self.temperature.trainable_variables)

    @property
    def logit_scale(self):
        """exp(t), clipped: the scale the logits use now."""
        return self.temperature.scale()

    def _scale(self, dtype):
        scale = ops.cast(self.temperature.scale(), dtype)
        # Read by DualEncoder right after compute_terms, in the same step: logged as <name>/logit_scale.
        self.monitored = {"logit_scale": ops.cast(ops.stop_gradient(scale), "float32")}
        return scale

    def get_config(self):
        config = super().get_config()
        config.update(logit_scale_init=self.logit_scale_init, max_logit_scale=self.max_logit_scale,
                      learnable=self.learnable)
        return config


@keras.saving.register_keras_serializable(package="kitm")
class InfoNCELoss(_LearnableTemperature, RetrievalLoss):
    """InfoNCE, CLIP's symmetric contrastive loss (Radford et al. 2021), with its learnable temperature.

    `L = 1/2 * ( sum_p -log softmax_q(z[p, :])[p] + sum_q -log softmax_p(z[:, q])[q] )`, `z = exp(t) * s`
    (module docstring; samples of one image, `y_true["image_index"]`, are positives of each other).

    Args:
      logit_scale_init: exp(t) at the start (CLIP: 1/0.07; a pretrained CLIP's value to fine-tune from it).
      max_logit_scale: the clip of exp(t) (CLIP: 100); None for none.
      learnable: train t (with the model's optimizer); False keeps exp(t) fixed at logit_scale_init.
      negatives: "local" (a replica's own rows) or "global" (every row of the global batch under several
        replicas; module docstring, "Global negatives").
      false_negatives, false_negative_rule, false_negative_threshold, false_negative_margin: in-batch candidates
        flagged by their relevance masked out of the softmax or counted as positives (kitm.losses.false_negatives;
        the same keywords on every contrastive loss; then `y_true["relevance"]` is read).
    Terms: "i2t" (image anchors) and "t2i" (caption anchors). Logged besides: "logit_scale" (exp(t)).
    Example: on the module docstring's s with exp(t) = 2, per row [0.31326, 0.31326].
    """

    def __init__(self, logit_scale_init: float = CLIP_LOGIT_SCALE,
                 max_logit_scale: float | None = CLIP_MAX_LOGIT_SCALE, learnable: bool = True, name: str = "infonce",
                 reduction: str = "sum", dtype=None, negatives: str = "local", **false_negatives):
        super().__init__(name=name, reduction=reduction, dtype=dtype, negatives=negatives, **false_negatives)
        self._init_temperature(logit_scale_init=logit_scale_init, max_logit_scale=max_logit_scale, bias_init=None,
                               learnable=learnable, name=name, dtype=dtype)

    def compute_terms(self, y_true, y_pred):
        if self._uses_blocks(y_pred):
            b = self._anchor_blocks(y_true, y_pred)
            i2t, t2i = info_nce_block_terms(b.rows, b.columns, self._scale(b.rows.dtype), b.row_positives,
                                            b.column_positives, b.row_excluded, b.column_excluded)
            return {"i2t": i2t, "t2i": t2i}
        similarity = self.similarity(y_pred)
        i2t, t2i = info_nce_terms(similarity, self._scale(similarity.dtype),
                                  image_index=self.optional(y_true, "image_index"))
        return {"i2t": i2t, "t2i": t2i}


@keras.saving.register_keras_serializable(package="kitm")
class GradedInfoNCELoss(_LearnableTemperature, RetrievalLoss):
    """Graded InfoNCE (kitm; docs/methods.md#graded-infonce): InfoNCE against soft targets from the batch relevance.

    `Y_i2t[p, :] = softmax_q(R'[p, :] / tau_R)`, `Y_t2i[:, q]` likewise down the columns, R' the relevance with the
    positives raised to the row (column) maximum; `L = 1/2 * ( sum_p -sum_q Y_i2t log softmax_q(z[p, :])
    + sum_q -sum_p Y_t2i log softmax_p(z[:, q]) )`, `z = exp(t) * s` (module docstring). tau_R -> 0 is InfoNCE.

    Uses `y_true["relevance"]` ([B, B], relevance of caption q to image p) and, when present, `"image_index"`.

    Args:
      tau_relevance: tau_R > 0, the targets' temperature, on the relevance's own scale (e.g. 0.1 for relevance in
        [0, 1]; CIDEr-D spans about [0, 10]).
      logit_scale_init, max_logit_scale, learnable, negatives: as `InfoNCELoss` (with global negatives,
        `y_true["relevance"]` holds the replica's rows of the global batch's relevance, [b, B]).
    Terms: "i2t", "t2i". Logged besides: "logit_scale".
    Example: `graded_info_nce_loss` (per row [0.58220, 0.58220] on its docstring's inputs).
    """

    needs_relevance = True

    def __init__(self, tau_relevance: float, logit_scale_init: float = CLIP_LOGIT_SCALE,
                 max_logit_scale: float | None = CLIP_MAX_LOGIT_SCALE, learnable: bool = True,
                 name: str = "graded_infonce", reduction: str = "sum", dtype=None, negatives: str = "local",
                 **false_negatives):
        super().__init__(name=name, reduction=reduction, dtype=dtype, negatives=negatives, **false_negatives)
        self._init_temperature(logit_scale_init=logit_scale_init, max_logit_scale=max_logit_scale, bias_init=None,
                               learnable=learnable, name=name, dtype=dtype)
        self.tau_relevance = _positive_number("tau_relevance", tau_relevance)

    def compute_terms(self, y_true, y_pred):
        relevance = self.optional(y_true, "relevance")
        if relevance is None:
            raise ValueError(f"{type(self).__name__} needs y_true['relevance'] ([B, B], the batch relevance).")
        if self._uses_blocks(y_pred):
            b = self._anchor_blocks(y_true, y_pred, relevance)
            i2t, t2i = graded_info_nce_block_terms(b.rows, b.columns, b.relevance_rows, b.relevance_columns,
                                                   self._scale(b.rows.dtype), b.row_positives, b.column_positives,
                                                   tau_relevance=self.tau_relevance, row_excluded=b.row_excluded,
                                                   column_excluded=b.column_excluded)
            return {"i2t": i2t, "t2i": t2i}
        similarity = self.similarity(y_pred)
        i2t, t2i = graded_info_nce_terms(similarity, relevance, self._scale(similarity.dtype),
                                         tau_relevance=self.tau_relevance,
                                         image_index=self.optional(y_true, "image_index"))
        return {"i2t": i2t, "t2i": t2i}

    def get_config(self):
        config = super().get_config()
        config.update(tau_relevance=self.tau_relevance)
        return config


@keras.saving.register_keras_serializable(package="kitm")
class SigLIPLoss(_LearnableTemperature, RetrievalLoss):
    """SigLIP's pairwise sigmoid loss (Zhai et al. 2023), with its learnable temperature and bias.

    `L = -sum_p sum_q log sigmoid(y[p, q] * (exp(t') * s[p, q] + b))`, y = +1 on positive pairs (the diagonal and
    samples of one image, `y_true["image_index"]`), else -1 (module docstring).

    Args:
      logit_scale_init: exp(t') at the start (SigLIP: 10).
      bias_init: b at the start (SigLIP: -10).
      max_logit_scale: a clip of exp(t') (SigLIP has none: None).
      learnable: train t' and b (with the model's optimizer).
      negatives: as `InfoNCELoss`.
    Terms: "i2t" (half of image p's row) and "t2i" (half of caption p's column). Logged besides: "logit_scale"
    (exp(t')) and "bias".
    Example: `siglip_loss` (per row [0.69986, 0.69986] on its docstring's inputs).
    """

    def __init__(self, logit_scale_init: float = SIGLIP_LOGIT_SCALE, bias_init: float = SIGLIP_BIAS,
                 max_logit_scale: float | None = None, learnable: bool = True, name: str = "siglip",
                 reduction: str = "sum", dtype=None, negatives: str = "local", **false_negatives):
        self.bias_init = _finite_number("bias_init", bias_init)
        super().__init__(name=name, reduction=reduction, dtype=dtype, negatives=negatives, **false_negatives)
        self._init_temperature(logit_scale_init=logit_scale_init, max_logit_scale=max_logit_scale,
                               bias_init=self.bias_init, learnable=learnable, name=name, dtype=dtype)

    @property
    def bias(self):
        return ops.convert_to_tensor(self.temperature.bias)

    def compute_terms(self, y_true, y_pred):
        similarity = self.similarity(y_pred)
        scale = self._scale(similarity.dtype)
        bias = ops.cast(self.bias, similarity.dtype)
        self.monitored["bias"] = ops.cast(ops.stop_gradient(bias), "float32")
        if self._uses_blocks(y_pred):
            b = self._anchor_blocks(y_true, y_pred)
            i2t, t2i = siglip_block_terms(b.rows, b.columns, scale, bias, b.row_positives, b.column_positives,
                                          b.row_excluded, b.column_excluded)
            return {"i2t": i2t, "t2i": t2i}
        i2t, t2i = siglip_terms(similarity, scale, bias, image_index=self.optional(y_true, "image_index"))
        return {"i2t": i2t, "t2i": t2i}

    def get_config(self):
        config = super().get_config()
        config.update(bias_init=self.bias_init)
        return config

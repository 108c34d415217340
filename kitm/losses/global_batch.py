"""Global-batch negatives: under several replicas, each replica's loss sees every row of the global batch.

Under R replicas of b rows each (global batch B = R b), replica r holds the image embeddings x_r and the caption
embeddings y_r of its rows ([b, D]). With local negatives (the default of every loss) its loss compares them with
each other only: b - 1 negatives per anchor, whatever R. With `negatives="global"` it gathers the embeddings of
every replica, X = [x_0; ...; x_{R-1}] and Y = [y_0; ...; y_{R-1}] ([B, D], `ReplicaContext.all_gather`, which
is differentiable: its gradient adds up the gradients that every replica sends to a slice and hands each replica
its own), and computes the terms of its own anchors against the whole batch:

    image anchors p of replica r:    the rows block     S_rows = x_r Y^T   [b, B]
    caption anchors q of replica r:  the columns block  S_cols = X y_r^T   [B, b]

(the contrastive losses, `kitm.losses.contrastive`, with the block forms of their terms below:
`info_nce_block_terms`, `graded_info_nce_block_terms`, `siglip_block_terms`), or, for the losses that read the
whole similarity matrix (the triplet and SAM), the full S = X Y^T [B, B] and keeps its own rows' terms. Either way
the replicas' per-row values, put together, are the values of the global batch on one device, and so are the
gradients (summed over replicas by the optimizer): docs/scale.md, "Global negatives".

The batch's labels travel with it. `y_true["image_index"]` ([b] per replica) is gathered too, so that two samples
of one image on different replicas are positives of each other. `y_true["relevance"]` must hold the replica's rows
of the global batch's relevance, [b, B] (relevance[p, q]: caption q of the global batch to image p of this replica;
kitm's input pipeline gives them under `negatives="global"`, `kitm.data.own_rows.replica_rows`); the columns a
loss needs ([B, b], every image against this replica's captions) come from gathering the rows (no gradient).

Reductions. With local negatives each replica's reduced loss is divided by R (Keras' convention: the update is
that of the mean over replicas). With global negatives the replicas' per-row values are the global batch's rows:
"sum" adds them up undivided and "sum_over_batch_size" divides by B, so the update is exactly that of one device
with the whole batch (`replica_share`).

Backends. The replica-context gather is TensorFlow's (`tf.distribute`), and only TensorFlow needs one: on JAX and
PyTorch one process's loss sees the whole (global) batch already, so there `global_batch()` returns None (nothing to
gather) and a replica's share is the whole loss (one replica). On JAX under `keras.distribution` (DataParallel over
D devices, or a ModelParallel mesh's batch axis) the jit-compiled step takes the global batch as one array sharded
along its rows; the loss is written over that array and XLA partitions it, so S = X Y^T [B, B] compares every row
with every row of the global batch: the step is that of one device with the whole batch, for every loss, and
`negatives="global"` needs no gather. What JAX cannot give without per-device code (shard_map) is the opposite,
negatives="local" on several devices (each device's own b = B / D rows): `data_parallel_devices()` tells
`kitm.models.DualEncoder.compile`, which refuses it. The replicas, the gather and a replica's share are
`kitm.distribute`'s (re-exported here); this module holds the losses' arithmetic on the blocks, in keras.ops.
"""

from __future__ import annotations

from keras import ops

from kitm.distribute.global_batch import GlobalBatch, global_batch
from kitm.distribute.replicas import data_parallel_devices, num_replicas_in_sync, replica_share
from kitm.negatives import LOSS_NEGATIVES as NEGATIVES

__all__ = ["NEGATIVES", "check_negatives", "GlobalBatch", "global_batch", "replica_share", "num_replicas_in_sync",
           "data_parallel_devices", "info_nce_block_terms", "graded_info_nce_block_terms", "siglip_block_terms"]


def check_negatives(negatives) -> str:
    if negatives not in NEGATIVES:
        raise ValueError(f"negatives must be one of {NEGATIVES}; got {negatives!r}.")
    return negatives


# --------------------------------------------------------------------------------------------------
# The contrastive losses' terms on a replica's blocks (kitm.losses.contrastive, "Global negatives")
# --------------------------------------------------------------------------------------------------

def _scalar(value, dtype, name: str):
    # A Python number goes straight to `dtype` (exact in float64; through float32 first it would not be).
    if isinstance(value, (int, float)):
        value = ops.convert_to_tensor(value, dtype=dtype)
    value = ops.cast(value, dtype)
    if len(value.shape) != 0:
        raise ValueError(f"{name} must be a scalar; got shape {value.shape}.")
    return value


# The logit of a candidate excluded from an anchor's softmax (kitm.losses.false_negatives' "mask"): finite, so that a
# target of 0 times its log-probability is 0, and far enough below every logit (|exp(t) s| <= 100) that exp of it
# is 0 in every float type, float16 included.
_EXCLUDED_LOGIT = -1.0e4


def _without(logits, excluded):
    """`logits` with the `excluded` entries (bool, or None for none) at `_EXCLUDED_LOGIT`."""
    if excluded is None:
        return logits
    return ops.where(excluded, ops.full_like(logits, _EXCLUDED_LOGIT), logits)


def _renormalised_without(targets, excluded, axis: int):
    """Targets (summing to 1 along `axis`) with the `excluded` entries at 0, summing to 1 again: the targets' softmax
    over the entries that are not excluded (an anchor's positives are never excluded, so the sum is > 0)."""
    if excluded is None:
        return targets
    kept = ops.where(excluded, ops.zeros_like(targets), targets)
    return kept / ops.sum(kept, axis=axis, keepdims=True)


def _block_cross_entropy(row_logits, row_targets, column_logits, column_targets) -> tuple:
    """The soft cross-entropies of one replica's anchors, halved, each [b]: i2t along the rows of the rows block
    [b, B] (row targets sum to 1 along rows), t2i down the columns of the columns block [B, b]."""
    i2t = -ops.sum(row_targets * ops.log_softmax(row_logits, axis=1), axis=1)
    t2i = -ops.sum(column_targets * ops.log_softmax(column_logits, axis=0), axis=0)
    return 0.5 * i2t, 0.5 * t2i


def info_nce_block_terms(rows, columns, logit_scale, row_positives, column_positives, row_excluded=None,
                         column_excluded=None) -> tuple:
    """InfoNCE's (i2t, t2i) of one replica's anchors, each [b], from its rows block [b, B] and columns block [B, b]
    and their bool positive masks (module docstring, "Global negatives"; `GlobalBatch.similarity_blocks`,
    `GlobalBatch.positive_blocks`). With one replica (rows = columns = s) this is `info_nce_terms`.
    `*_excluded` (bool, optional): candidates out of the anchor's softmax (kitm.losses.false_negatives)."""
    rows, columns = ops.convert_to_tensor(rows), ops.convert_to_tensor(columns)
    scale = _scalar(logit_scale, rows.dtype, "logit_scale")
    row_positives = ops.cast(row_positives, rows.dtype)
    column_positives = ops.cast(column_positives, rows.dtype)
    return _block_cross_entropy(_without(scale * rows, row_excluded),
                                row_positives / ops.sum(row_positives, axis=1, keepdims=True),
                                _without(scale * columns, column_excluded),
                                column_positives / ops.sum(column_positives, axis=0, keepdims=True))


def graded_info_nce_block_terms(rows, columns, relevance_rows, relevance_columns, logit_scale, row_positives,
                                column_positives, *, tau_relevance: float, row_excluded=None,
                                column_excluded=None) -> tuple:
    """Graded InfoNCE's (i2t, t2i) of one replica's anchors, each [b]: `Y_i2t` from the relevance rows [b, B]
    (positives raised to the row maximum), `Y_t2i` from the relevance columns [B, b] (positives raised to the column
    maximum), as `kitm.losses.contrastive.graded_info_nce_targets` does on the whole matrix (kitm.losses.contrastive,
    "Global negatives"). `*_excluded` (bool, optional): candidates out of the anchor's softmax and targets, the
    targets a softmax over the rest (kitm.losses.false_negatives)."""
    if isinstance(tau_relevance, bool) or not float(tau_relevance) > 0:
        raise ValueError(f"tau_relevance must be a positive number; got {tau_relevance!r}.")
    rows, columns = ops.convert_to_tensor(rows), ops.convert_to_tensor(columns)
    relevance_rows = ops.stop_gradient(ops.cast(relevance_rows, rows.dtype))
    relevance_columns = ops.stop_gradient(ops.cast(relevance_columns, rows.dtype))
    row_raised = ops.where(row_positives, ops.max(relevance_rows, axis=1, keepdims=True)
                           + ops.zeros_like(relevance_rows), relevance_rows)
    column_raised = ops.where(column_positives, ops.max(relevance_columns, axis=0, keepdims=True)
                              + ops.zeros_like(relevance_columns), relevance_columns)
    scale = _scalar(logit_scale, rows.dtype, "logit_scale")
    row_targets = _renormalised_without(ops.softmax(row_raised / tau_relevance, axis=1), row_excluded, axis=1)
    column_targets = _renormalised_without(ops.softmax(column_raised / tau_relevance, axis=0), column_excluded,
                                           axis=0)
    return _block_cross_entropy(_without(scale * rows, row_excluded), row_targets,
                                _without(scale * columns, column_excluded), column_targets)


def siglip_block_terms(rows, columns, logit_scale, bias, row_positives, column_positives, row_excluded=None,
                       column_excluded=None) -> tuple:
    """SigLIP's (half of row p's sum over the rows block [b, B], half of column q's sum over the columns block
    [B, b]) of one replica's anchors, each [b] (kitm.losses.contrastive, "Global negatives"). `*_excluded` (bool,
    optional): pairs left out of the sums (kitm.losses.false_negatives)."""
    rows, columns = ops.convert_to_tensor(rows), ops.convert_to_tensor(columns)
    scale = _scalar(logit_scale, rows.dtype, "logit_scale")
    bias = _scalar(bias, rows.dtype, "bias")

    def negative_log_sigmoid(similarity, positives, excluded):
        signs = ops.where(positives, ops.ones_like(similarity), -ops.ones_like(similarity))
        terms = ops.softplus(-signs * (scale * similarity + bias))
        return terms if excluded is None else ops.where(excluded, ops.zeros_like(terms), terms)

    return (0.5 * ops.sum(negative_log_sigmoid(rows, row_positives, row_excluded), axis=1),
            0.5 * ops.sum(negative_log_sigmoid(columns, column_positives, column_excluded), axis=0))

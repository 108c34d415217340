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
kitm's input pipeline gives them under `negatives="global"`, `kitm.data.pipeline.replica_rows`); the columns a
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
`kitm.models.DualEncoder.compile`, which refuses it. TensorFlow is imported lazily, only on the TensorFlow backend
(`_tensorflow`): the arithmetic of the blocks is keras.ops.
"""

from __future__ import annotations

from typing import Mapping

import keras
from keras import ops

from kitm.negatives import LOSS_NEGATIVES as NEGATIVES

__all__ = ["NEGATIVES", "check_negatives", "GlobalBatch", "global_batch", "replica_share", "num_replicas_in_sync",
           "data_parallel_devices", "info_nce_block_terms", "graded_info_nce_block_terms", "siglip_block_terms"]


def _tensorflow():
    """The `tensorflow` module where Keras runs on it, else None: the one backend branch here (module docstring,
    "Backends"); imported on demand so that the other backends never need TensorFlow."""
    if keras.backend.backend() != "tensorflow":
        return None
    import tensorflow as tf

    return tf


def check_negatives(negatives) -> str:
    if negatives not in NEGATIVES:
        raise ValueError(f"negatives must be one of {NEGATIVES}; got {negatives!r}.")
    return negatives


def num_replicas_in_sync() -> int:
    """R, the replicas a reduced loss is shared by: the `tf.distribute` strategy's on TensorFlow; 1 elsewhere (JAX
    and PyTorch compute the loss once, over the global batch, also under JAX's DataParallel over several devices, so
    "sum" and "sum_over_batch_size" are the global batch's; module docstring, "Backends")."""
    tf = _tensorflow()
    return 1 if tf is None else int(tf.distribute.get_strategy().num_replicas_in_sync)


def data_parallel_devices() -> int:
    """D, the devices `keras.distribution` splits the batch's rows over on JAX: the size of the distribution's batch
    axis (DataParallel: its devices), 1 without a distribution and on the other backends. The loss still runs once,
    over the global batch (`num_replicas_in_sync` is 1; module docstring, "Backends")."""
    if keras.backend.backend() != "jax":
        return 1
    distribution = keras.distribution.distribution()
    if distribution is None:
        return 1
    mesh, axis = distribution.device_mesh, distribution.batch_dim_name
    if axis is None or axis not in mesh.axis_names:
        return 1
    return int(mesh.shape[list(mesh.axis_names).index(axis)])


def replica_share(value, reduction: str | None, global_negatives: bool = False):
    """A replica's reduced loss scaled for the optimizer's sum over replicas (module docstring, "Reductions").

    Local negatives, or "sum_over_batch_size": divided by R (a mean over b rows / R is the mean over B rows).
    Global negatives with "sum": undivided (the replicas' sums add up to the global batch's sum).
    """
    if reduction in (None, "none"):
        return value
    replicas = num_replicas_in_sync()
    if replicas > 1 and not (global_negatives and reduction == "sum"):
        value = value / ops.cast(replicas, value.dtype)
    return value


def _rows(start, count):
    return start + ops.arange(count, dtype="int32")


class GlobalBatch:
    """One replica's view of the global batch: gathers, the replica's offset, its blocks (module docstring).

    Built by `global_batch()` inside a TensorFlow replica context with R > 1; `local` is b, `offset` is r * b.
    """

    def __init__(self, context, local_rows):
        self.context = context  # a tf.distribute.ReplicaContext
        self.replicas = int(context.num_replicas_in_sync)
        self.local = ops.cast(local_rows, "int32")
        replica = ops.cast(ops.convert_to_tensor(context.replica_id_in_sync_group), "int32")
        self.offset = replica * self.local
        self.size = self.local * self.replicas

    def gather(self, value):
        """[b, ...] -> [B, ...], the replicas' rows in replica order; differentiable."""
        return self.context.all_gather(value, axis=0)

    def gather_constant(self, value):
        """`gather` of a tensor that carries no gradient (labels, relevance)."""
        return self.context.all_gather(ops.stop_gradient(value), axis=0)

    def own_rows(self, values):
        """The replica's b entries of a [B, ...] tensor."""
        return ops.take(values, _rows(self.offset, self.local), axis=0)

    def similarity_blocks(self, y_pred: Mapping) -> tuple:
        """(S_rows = x_r Y^T [b, B], S_cols = X y_r^T [B, b]) of unit-norm embeddings."""
        image, text = ops.convert_to_tensor(y_pred["image"]), ops.convert_to_tensor(y_pred["text"])
        rows = ops.matmul(image, ops.transpose(self.gather(text)))
        columns = ops.matmul(self.gather(image), ops.transpose(text))
        return rows, columns

    def positive_blocks(self, image_index=None) -> tuple:
        """Bool (rows [b, B], columns [B, b]): the pair of a row and its own caption (column offset + p), and with
        `image_index` every pair of two samples of one image across the whole batch."""
        mine = _rows(self.offset, self.local)
        everyone = ops.arange(self.size, dtype="int32")
        rows = ops.equal(ops.expand_dims(mine, 1), ops.expand_dims(everyone, 0))
        columns = ops.transpose(rows)
        if image_index is not None:
            local_index = ops.reshape(ops.convert_to_tensor(image_index), (-1,))
            all_index = self.gather_constant(local_index)
            rows = ops.logical_or(rows, ops.equal(ops.expand_dims(local_index, 1), ops.expand_dims(all_index, 0)))
            columns = ops.logical_or(columns, ops.equal(ops.expand_dims(all_index, 1),
                                                        ops.expand_dims(local_index, 0)))
        return rows, columns

    def check_relevance_rows(self, relevance):
        """The replica's relevance rows [b, B], refused when they are a replica's own [b, b] block."""
        relevance = ops.convert_to_tensor(relevance)
        if len(relevance.shape) != 2:
            raise ValueError(f"relevance must be [b, B] (this replica's rows of the global batch's relevance); got "
                             f"shape {relevance.shape}.")
        rows, width = relevance.shape
        if width is not None and rows is not None and width != rows * self.replicas:
            raise ValueError(
                f"negatives='global' needs each replica's rows of the global batch's relevance, [b, B] = "
                f"[{rows}, {rows * self.replicas}]; got {relevance.shape} (a replica's own "
                "block?). kitm's input pipeline gives the rows when it trains with global negatives "
                "(kitm.data.pipeline.replica_rows).")
        return relevance

    def relevance_blocks(self, relevance) -> tuple:
        """(rows [b, B], columns [B, b]) of the relevance, from the replica's rows; no gradient."""
        rows = ops.stop_gradient(self.check_relevance_rows(relevance))
        columns = ops.take(self.gather_constant(rows), _rows(self.offset, self.local), axis=1)
        return rows, columns

    def gather_batch(self, y_true, y_pred: Mapping):
        """(y_true, y_pred) of the whole global batch: embeddings gathered with their gradients, every [b, ...] label
        gathered without, the relevance rows [b, B] gathered into the global [B, B]."""
        y_pred = {key: self.gather(value) for key, value in y_pred.items()}
        if isinstance(y_true, Mapping):
            y_true = dict(y_true)
            if y_true.get("relevance") is not None:
                y_true["relevance"] = self.check_relevance_rows(y_true["relevance"])
            y_true = {key: None if value is None else self.gather_constant(ops.convert_to_tensor(value))
                      for key, value in y_true.items()}
        return y_true, y_pred


def global_batch(y_pred: Mapping) -> GlobalBatch | None:
    """This replica's `GlobalBatch`, or None where there is nothing to gather: one replica, no replica context (then
    global and local negatives are the same), or a backend other than TensorFlow, whose loss already sees the global
    batch (module docstring, "Backends")."""
    tf = _tensorflow()
    if tf is None:
        return None
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync <= 1:
        return None
    image = ops.convert_to_tensor(y_pred["image"])
    return GlobalBatch(context, ops.shape(image)[0])


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


def _block_cross_entropy(row_logits, row_targets, column_logits, column_targets) -> tuple:
    """The soft cross-entropies of one replica's anchors, halved, each [b]: i2t along the rows of the rows block
    [b, B] (row targets sum to 1 along rows), t2i down the columns of the columns block [B, b]."""
    i2t = -ops.sum(row_targets * ops.log_softmax(row_logits, axis=1), axis=1)
    t2i = -ops.sum(column_targets * ops.log_softmax(column_logits, axis=0), axis=0)
    return 0.5 * i2t, 0.5 * t2i


def info_nce_block_terms(rows, columns, logit_scale, row_positives, column_positives) -> tuple:
    """InfoNCE's (i2t, t2i) of one replica's anchors, each [b], from its rows block [b, B] and columns block [B, b]
    and their bool positive masks (module docstring, "Global negatives"; `GlobalBatch.similarity_blocks`,
    `GlobalBatch.positive_blocks`). With one replica (rows = columns = s) this is `info_nce_terms`."""
    rows, columns = ops.convert_to_tensor(rows), ops.convert_to_tensor(columns)
    scale = _scalar(logit_scale, rows.dtype, "logit_scale")
    row_positives = ops.cast(row_positives, rows.dtype)
    column_positives = ops.cast(column_positives, rows.dtype)
    return _block_cross_entropy(scale * rows, row_positives / ops.sum(row_positives, axis=1, keepdims=True),
                                scale * columns,
                                column_positives / ops.sum(column_positives, axis=0, keepdims=True))


def graded_info_nce_block_terms(rows, columns, relevance_rows, relevance_columns, logit_scale, row_positives,
                                column_positives, *, tau_relevance: float) -> tuple:
    """Graded InfoNCE's (i2t, t2i) of one replica's anchors, each [b]: `Y_i2t` from the relevance rows [b, B]
    (positives raised to the row maximum), `Y_t2i` from the relevance columns [B, b] (positives raised to the column
    maximum), as `kitm.losses.contrastive.graded_info_nce_targets` does on the whole matrix (kitm.losses.contrastive,
    "Global negatives")."""
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
    return _block_cross_entropy(scale * rows, ops.softmax(row_raised / tau_relevance, axis=1),
                                scale * columns, ops.softmax(column_raised / tau_relevance, axis=0))


def siglip_block_terms(rows, columns, logit_scale, bias, row_positives, column_positives) -> tuple:
    """SigLIP's (half of row p's sum over the rows block [b, B], half of column q's sum over the columns block
    [B, b]) of one replica's anchors, each [b] (kitm.losses.contrastive, "Global negatives")."""
    rows, columns = ops.convert_to_tensor(rows), ops.convert_to_tensor(columns)
    scale = _scalar(logit_scale, rows.dtype, "logit_scale")
    bias = _scalar(bias, rows.dtype, "bias")

    def negative_log_sigmoid(similarity, positives):
        signs = ops.where(positives, ops.ones_like(similarity), -ops.ones_like(similarity))
        return ops.softplus(-signs * (scale * similarity + bias))

    return (0.5 * ops.sum(negative_log_sigmoid(rows, row_positives), axis=1),
            0.5 * ops.sum(negative_log_sigmoid(columns, column_positives), axis=0))

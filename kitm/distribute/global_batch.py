"""Global-batch negatives across TensorFlow's replicas: one replica's view of the global batch.

Under R replicas of b rows each (global batch B = R b), replica r holds the image embeddings x_r and the caption
embeddings y_r of its rows ([b, D]). A loss with `negatives="global"` gathers every replica's, X = [x_0; ...;
x_{R-1}] and Y = [y_0; ...; y_{R-1}] ([B, D], `ReplicaContext.all_gather`, differentiable: its gradient adds up what
every replica sends to a slice and hands each replica its own), and computes its own anchors' terms against the
whole batch, from the blocks S_rows = x_r Y^T [b, B] and S_cols = X y_r^T [B, b] or the full S = X Y^T
(`kitm.losses.global_batch`: how each loss uses them; docs/scale.md, "Global negatives").

Only TensorFlow runs a loss per replica; on JAX (`keras.distribution`) and PyTorch one loss sees the global batch,
and `global_batch()` returns None: nothing to gather. The arithmetic is keras.ops; the replica context is the one
TensorFlow object (`kitm.distribute.replicas.tensorflow_replica_context`).
"""

from __future__ import annotations

from typing import Mapping

from keras import ops

from kitm.distribute.replicas import tensorflow_replica_context

__all__ = ["GlobalBatch", "global_batch"]


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

    def own_columns(self, values):
        """The replica's b columns of a [..., B] matrix (the positives' column of each of its rows)."""
        return ops.take(values, _rows(self.offset, self.local), axis=1)

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
                "(kitm.data.own_rows.replica_rows).")
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
    batch (module docstring)."""
    context = tensorflow_replica_context()
    if context is None:
        return None
    image = ops.convert_to_tensor(y_pred["image"])
    return GlobalBatch(context, ops.shape(image)[0])

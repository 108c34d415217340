"""`RelevanceStatistics`: how much graded relevance the semantic losses see per batch, as a Keras metric.

For `DualEncoder.compile(monitors=[...])`. Over an epoch it pools the batch relevance matrix R
(`y_true["relevance"]`, R[p, q] = relevance of caption q to image p) and reports

    relevance/negative_mean = mean of R[p, q] over negative pairs (q != p, and not two captions of one image)
    relevance/negative_std  = sqrt(E[R^2] - E[R]^2) over the same pairs
    relevance/positive_mean = mean of the diagonal R[p, p]

Under global negatives (`kitm.losses.global_batch`) each replica holds its rows of the global batch's relevance,
[b, B]: the negatives are then its rows' negatives among the whole global batch, and the positives the entries
(p, r b + p).

With a sharp relevance source the negatives' mean is near 0 and SAM or the ladder behave like the plain triplet.
Keras' TensorBoard callback writes them to the `train` writer as `epoch_relevance/...`.
"""

from __future__ import annotations

from collections.abc import Mapping

import keras
from keras import ops

from kitm.distribute.backend import widest_float
from kitm.distribute.global_batch import GlobalBatch
from kitm.distribute.replicas import tensorflow_replica_context
from kitm.ops.similarity import negative_mask


class RelevanceStatistics(keras.metrics.Metric):
    """Pooled statistics of the batch relevance matrix over an epoch (module docstring).

    `update_state(y_true, y_pred)` takes the pipeline's `y` dict; without a "relevance" entry it does nothing.
    Accumulates in float64 (an epoch of COCO has ~10^9 negative pairs), except on JAX without 64-bit types
    (`jax_enable_x64` off, JAX's default), where it has float32 only (each batch's sums are added as they come, so
    the mean keeps about 6 digits; the standard deviation fewer when it is small beside the mean); under a
    distribution strategy the replicas' sums add up.
    """

    def __init__(self, name: str = "relevance", **kwargs):
        super().__init__(name=name, **kwargs)
        self.accumulator_dtype = widest_float()
        self.sums = {key: self.add_variable(shape=(), initializer="zeros", dtype=self.accumulator_dtype, name=key)
                     for key in ("negative_count", "negative_sum", "negative_squares", "positive_count",
                                 "positive_sum")}

    def update_state(self, y_true, y_pred=None, sample_weight=None):
        relevance = y_true.get("relevance") if isinstance(y_true, Mapping) else None
        if relevance is None:
            return
        relevance = ops.cast(relevance, self.accumulator_dtype)
        replica_rows = _replica_rows_of_global_batch(relevance, y_true.get("image_index"))
        if replica_rows is not None:
            mask, diagonal = replica_rows
        else:
            mask = ops.cast(negative_mask(relevance, y_true.get("image_index")), self.accumulator_dtype)
            diagonal = ops.diagonal(relevance)
        updates = {"negative_count": ops.sum(mask), "negative_sum": ops.sum(relevance * mask),
                   "negative_squares": ops.sum(ops.square(relevance) * mask),
                   "positive_count": ops.cast(ops.size(diagonal), self.accumulator_dtype),
                   "positive_sum": ops.sum(diagonal)}
        for key, value in updates.items():
            self.sums[key].assign_add(value)

    def result(self):
        negatives = ops.maximum(self.sums["negative_count"], 1.0)
        mean = self.sums["negative_sum"] / negatives
        variance = ops.maximum(self.sums["negative_squares"] / negatives - ops.square(mean), 0.0)
        positive = self.sums["positive_sum"] / ops.maximum(self.sums["positive_count"], 1.0)
        return {f"{self.name}/negative_mean": ops.cast(mean, "float32"),
                f"{self.name}/negative_std": ops.cast(ops.sqrt(variance), "float32"),
                f"{self.name}/positive_mean": ops.cast(positive, "float32")}


def _replica_rows_of_global_batch(relevance, image_index):
    """(negative mask, positives' relevance) of a replica's [b, B] rows of the global batch's relevance under a
    TensorFlow strategy with several replicas (module docstring), else None. Only TensorFlow's replicas hold a slice
    of the global batch: JAX's `keras.distribution` computes on the global [B, B] array."""
    rows, width = relevance.shape[0], relevance.shape[1]
    if rows is None or width is None or width == rows:
        return None
    context = tensorflow_replica_context()
    if context is None:
        return None
    batch = GlobalBatch(context, ops.shape(relevance)[0])
    positives, _ = batch.positive_blocks(image_index)
    mask = ops.cast(ops.logical_not(positives), "float64")
    diagonal = ops.diagonal(batch.own_columns(relevance))
    return mask, diagonal

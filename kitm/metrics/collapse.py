"""How close a batch's embeddings are to one point: the statistic behind kitm's collapse monitor.

For unit embeddings x_1..x_B of one modality, the mean pairwise cosine over the B (B - 1) ordered pairs i != j is

    c = (|sum_i x_i|^2 - sum_i |x_i|^2) / (B (B - 1))

(expand |sum_i x_i|^2 = sum_i sum_j x_i^T x_j), computed in O(B D) without the B x B matrix. c is 1 when every
embedding is the same vector (a collapsed model: every similarity is equal, every triplet hinge sits at its margin
and retrieval is at chance), about 0 for directions spread at random, and a trained retrieval model on the
synthetic world sits well below 1 (about 0.1-0.5). A loss whose global minimum is a collapse (the hinge angular
loss) or whose gradient vanishes there (a hardest-negative triplet from random weights) shows up as c -> 1.
"""

from __future__ import annotations

from collections.abc import Mapping

import keras
from keras import ops

# Above this mean pairwise cosine (either modality) the monitor calls the embeddings collapsed.
COLLAPSE_THRESHOLD = 0.9


def mean_pairwise_cosine(embeddings):
    """Mean cosine over the pairs i != j of the rows of `embeddings` [B, D] (rows need not be unit: they are
    normalised here); 0 for B < 2. Formula in the module docstring."""
    embeddings = ops.cast(ops.convert_to_tensor(embeddings), "float32")
    if len(embeddings.shape) != 2:
        raise ValueError(f"embeddings must be [B, D]; got shape {tuple(embeddings.shape)}.")
    # x / max(|x|, 1e-6), as tf.math.l2_normalize: an all-zero row stays zero.
    embeddings = embeddings * ops.rsqrt(ops.maximum(ops.sum(ops.square(embeddings), axis=-1, keepdims=True), 1e-12))
    rows = ops.cast(ops.shape(embeddings)[0], "float32")
    total = ops.sum(embeddings, axis=0)
    self_similarity = ops.sum(ops.square(embeddings))  # B for unit rows (0 for an all-zero row)
    return ops.divide_no_nan(ops.sum(ops.square(total)) - self_similarity, rows * (rows - 1))


class EmbeddingCollapse(keras.metrics.Metric):
    """Epoch means of the batch statistic `mean_pairwise_cosine` of the image and of the caption embeddings.

    For `DualEncoder.compile(monitors=[...])`: `update_state(y_true, y_pred)` with y_pred = {"image", "text"}.
    Reported as `<name>/image_cosine` and `<name>/text_cosine` (TensorBoard: `epoch_collapse/...`); under a
    distribution strategy the replicas' sums add up.
    """

    def __init__(self, name: str = "collapse", **kwargs):
        super().__init__(name=name, **kwargs)
        self.sums = {key: self.add_variable(shape=(), initializer="zeros", dtype="float32", name=key)
                     for key in ("image", "text", "batches")}

    def update_state(self, y_true=None, y_pred=None, sample_weight=None):
        if not isinstance(y_pred, Mapping) or "image" not in y_pred or "text" not in y_pred:
            raise ValueError("EmbeddingCollapse takes y_pred = {'image': [B, D], 'text': [B, D]}.")
        self.sums["image"].assign_add(mean_pairwise_cosine(y_pred["image"]))
        self.sums["text"].assign_add(mean_pairwise_cosine(y_pred["text"]))
        self.sums["batches"].assign_add(1.0)

    def result(self):
        batches = self.sums["batches"]
        return {f"{self.name}/image_cosine": ops.divide_no_nan(self.sums["image"], batches),
                f"{self.name}/text_cosine": ops.divide_no_nan(self.sums["text"], batches)}

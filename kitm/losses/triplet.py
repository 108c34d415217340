"""VSE++ triplet ranking loss (Faghri et al., 2018), the baseline every kitm method extends.

docs/methods.md#triplet: with `s[p, q]` the cosine of image p and caption q and margin `a`,

    L = sum_p max_{q != p} [a + s[p, q] - s[p, p]]+  +  sum_q max_{p != q} [a + s[p, q] - s[q, q]]+

(hardest negative, `max_violation=True`), or the same with sums over all negatives instead of the maxima.
The per-row value for row p is the caption-retrieval term of image p plus the image-retrieval term of
caption p, so the sum over rows is the paper's loss.

Example (hand-computed): s = [[0.9, 0.5], [0.8, 0.6]], a = 0.2.
Image 0: [0.2 + 0.5 - 0.9]+ = 0; caption 0 vs image 1: [0.2 + 0.8 - 0.9]+ = 0.1.
Image 1: [0.2 + 0.8 - 0.6]+ = 0.4; caption 1 vs image 0: [0.2 + 0.5 - 0.6]+ = 0.1.
Per row: [0.1, 0.5]; sum 0.6.
"""

from __future__ import annotations

import keras
from keras import ops

from kitm.losses.base import RetrievalLoss, check_margin, hardest_or_sum
from kitm.ops.similarity import negative_mask


def triplet_terms(similarity, margin: float = 0.2, max_violation: bool = True, image_index=None,
                  negatives=None) -> tuple:
    """Per-anchor hinge terms: (caption retrieval for image anchor p, image retrieval for caption anchor q), each [B].

    `max_violation` is a Python bool or a scalar bool tensor (True: the hardest negative; False: the sum).

    Pairs of two samples of the same image (equal `image_index`) are not negatives. An anchor with no
    negative at all contributes 0: every hinge is >= 0, so masking to 0 before the max is exact.
    `negatives`: bool (row negatives, column negatives) [B, B] in place of that rule, e.g. without the false
    negatives (kitm.losses.false_negatives): caption q is a negative of image anchor p where rows[p, q], image p
    of caption anchor q where columns[p, q].
    """
    similarity = ops.convert_to_tensor(similarity)
    if len(similarity.shape) != 2:
        raise ValueError(f"similarity must be a [B, B] matrix; got shape {similarity.shape}.")
    positives = ops.diagonal(similarity)
    if negatives is None:
        negatives = (negative_mask(similarity, image_index),) * 2
    row_negatives, column_negatives = negatives
    zeros = ops.zeros_like(similarity)
    # cost_caption[p, q]: caption q as the negative of image p; cost_image[p, q]: image p as the negative of caption q.
    cost_caption = ops.where(row_negatives, ops.relu(margin + similarity - ops.expand_dims(positives, 1)), zeros)
    cost_image = ops.where(column_negatives, ops.relu(margin + similarity - ops.expand_dims(positives, 0)), zeros)
    if not ops.is_tensor(max_violation):
        max_violation = bool(max_violation)
    if max_violation is False:
        return ops.sum(cost_caption, axis=1), ops.sum(cost_image, axis=0)
    hardest = ops.max(cost_caption, axis=1), ops.max(cost_image, axis=0)
    if max_violation is True:
        return hardest
    # A bool tensor: the hardest-negative warm-up (kitm.losses.base) switches between the two forms.
    totals = ops.sum(cost_caption, axis=1), ops.sum(cost_image, axis=0)
    return tuple(hardest_or_sum(h, t, max_violation) for h, t in zip(hardest, totals))


def triplet_loss(similarity, margin: float = 0.2, max_violation: bool = True, image_index=None):
    """VSE++ triplet loss per batch row [B]; its sum is the loss of docs/methods.md#triplet (see module docstring)."""
    margin = check_margin(margin)
    i2t, t2i = triplet_terms(similarity, margin, max_violation, image_index)
    return i2t + t2i


@keras.saving.register_keras_serializable(package="kitm")
class TripletLoss(RetrievalLoss):
    """VSE++ triplet loss on `y_pred = {"image", "text"}`; uses `y_true["image_index"]` when present.

    Args:
        margin: the hinge margin `a` (VSE++: 0.2).
        max_violation: hardest negative (VSE++ "MH") when True, sum over negatives ("SH") otherwise.
        hardest_warmup_steps: with max_violation, the sum over negatives for this many training steps first
            (kitm.losses.base, "Hardest-negative warm-up").
        negatives: "local" or "global": under several replicas every replica builds the global batch's [B, B]
            similarity from the gathered embeddings and keeps its own anchors' terms (`kitm.losses.global_batch`).
        false_negatives, false_negative_rule, false_negative_threshold, false_negative_margin: the candidates
            whose relevance flags them leave the negatives, "mask" and "positive" alike
            (kitm.losses.false_negatives; then `y_true["relevance"]` is read).
    Terms: "i2t" (image anchors) and "t2i" (caption anchors).
    """

    term_names = ("i2t", "t2i")
    has_hardest_negatives = True
    supports_global_negatives = True
    supports_false_negatives = True

    def __init__(self, margin: float = 0.2, max_violation: bool = True, name: str = "triplet",
                 reduction: str = "sum", dtype=None, hardest_warmup_steps: int = 0, negatives: str = "local",
                 **false_negatives):
        super().__init__(name=name, reduction=reduction, dtype=dtype, hardest_warmup_steps=hardest_warmup_steps,
                         negatives=negatives, **false_negatives)
        self.margin = check_margin(margin)
        self.max_violation = bool(max_violation)

    def compute_terms(self, y_true, y_pred):
        return self.whole_batch_terms(y_true, y_pred, self._terms)

    def _terms(self, y_true, y_pred):
        image_index = self.optional(y_true, "image_index")
        hardest = self.max_violation and self.hardest_negatives_on()
        similarity = self.similarity(y_pred)
        i2t, t2i = triplet_terms(similarity, self.margin, hardest, image_index,
                                 self.filtered_negatives(y_true, similarity, image_index))
        return {"i2t": i2t, "t2i": t2i}

    def get_config(self):
        config = super().get_config()
        config.update(margin=self.margin, max_violation=self.max_violation)
        return config

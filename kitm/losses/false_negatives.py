"""False-negative filtering for the in-batch objectives (docs/methods.md#false-negatives).

A batch's other captions are an anchor's negatives, yet some of them describe its image well (COCO and Flickr label
five captions per image and call the rest irrelevant). The batch relevance R (`y_true["relevance"]`, R[p, q] the
relevance of caption q to image p, from any source kitm has) says which: a candidate is *flagged* for an anchor by

- rule "threshold": `R[p, q] >= threshold` (both directions: image anchor p with caption q, caption anchor q with
  image p);
- rule "above_positive" (GISTEmbed's guide-model rule; Solatorio 2024, "GISTEmbed: Guided In-sample Selection of
  Training Negatives for Text Embedding Fine-tuning"; sentence-transformers' GISTEmbedLoss with its absolute margin):
  the candidate is more relevant to the anchor than the anchor's own positive, less a margin m >= 0:
  image anchor p: `R[p, q] > R[p, p] - m`; caption anchor q: `R[p, q] > R[q, q] - m`. With a sentence-model source
  (`--relevance=sbert`) R is the guide model's similarity.

and then, by mode:

- "keep": nothing changes (the objectives as published);
- "mask": flagged candidates leave the anchor's negatives: out of the softmax's denominator (InfoNCE, graded
  InfoNCE), out of the sum of pair terms (SigLIP), out of the hinge's maximum or sum (the triplet, SAM);
- "positive": flagged candidates count as positives, as samples of the anchor's own image do: a share of the
  uniform target (InfoNCE), raised to the row's maximum relevance before the targets' softmax (graded InfoNCE),
  y = +1 (SigLIP). The triplet and SAM hinge on the anchor's own pair and treat other positives by leaving them out
  of the negatives, so for them "positive" is "mask".

Samples of the anchor's own image are positives in every mode, whatever their relevance.

Under global negatives the flags come from the replica's relevance blocks (rows [b, B], columns [B, b],
`kitm.distribute.global_batch.GlobalBatch.relevance_blocks`), each anchor's own pair from the positive blocks
without image indices, so a replica's flags are the rows and columns of the one-device flags.
"""

from __future__ import annotations

import dataclasses

from keras import ops

MODES = ("keep", "mask", "positive")
RULES = ("threshold", "above_positive")


@dataclasses.dataclass(frozen=True)
class FalseNegativeFilter:
    """Which in-batch candidates are false negatives, and what becomes of them (module docstring).

    Args:
      mode: "keep", "mask" or "positive".
      rule: "threshold" (R >= threshold) or "above_positive" (R above the anchor's positive's, less `margin`).
      threshold: the relevance level of rule "threshold", on the source's own scale.
      margin: the margin m >= 0 of rule "above_positive".
    """

    mode: str = "keep"
    rule: str = "threshold"
    threshold: float = 0.8
    margin: float = 0.0

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"false_negatives must be one of {MODES}; got {self.mode!r}.")
        if self.rule not in RULES:
            raise ValueError(f"false_negative_rule must be one of {RULES}; got {self.rule!r}.")
        for name in ("threshold", "margin"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
                raise ValueError(f"false_negative_{name} must be a number; got {value!r}.")
        if self.margin < 0:
            raise ValueError(f"false_negative_margin must be >= 0; got {self.margin!r}.")

    @property
    def active(self) -> bool:
        return self.mode != "keep"

    def flags(self, relevance_rows, relevance_columns, own_rows, own_columns) -> tuple:
        """Bool (rows [b, B], columns [B, b]): candidate q flagged for image anchor p (rows), image p flagged for
        caption anchor q (columns). `own_*`: bool, each anchor's own pair (one True per anchor)."""
        relevance_rows = ops.stop_gradient(ops.convert_to_tensor(relevance_rows))
        relevance_columns = ops.stop_gradient(ops.convert_to_tensor(relevance_columns))
        if self.rule == "threshold":
            return (ops.greater_equal(relevance_rows, self.threshold),
                    ops.greater_equal(relevance_columns, self.threshold))
        zeros_rows, zeros_columns = ops.zeros_like(relevance_rows), ops.zeros_like(relevance_columns)
        own_row_relevance = ops.sum(ops.where(own_rows, relevance_rows, zeros_rows), axis=1, keepdims=True)
        own_column_relevance = ops.sum(ops.where(own_columns, relevance_columns, zeros_columns), axis=0, keepdims=True)
        return (ops.greater(relevance_rows, own_row_relevance - self.margin),
                ops.greater(relevance_columns, own_column_relevance - self.margin))

    def apply(self, row_positives, column_positives, row_flags, column_flags) -> tuple:
        """(row positives, column positives, row excluded, column excluded), bool: "positive" adds the flagged
        candidates to the positives; "mask" excludes the flagged candidates that are not positives already."""
        if self.mode == "positive":
            return (ops.logical_or(row_positives, row_flags), ops.logical_or(column_positives, column_flags),
                    None, None)
        return (row_positives, column_positives, ops.logical_and(row_flags, ops.logical_not(row_positives)),
                ops.logical_and(column_flags, ops.logical_not(column_positives)))

    def negatives(self, is_negative, row_flags, column_flags) -> tuple:
        """(row negatives, column negatives), bool [B, B], of a loss that hinges on the anchor's own pair (the
        triplet, SAM): its negatives less the flagged candidates, in either mode (module docstring)."""
        return (ops.logical_and(is_negative, ops.logical_not(row_flags)),
                ops.logical_and(is_negative, ops.logical_not(column_flags)))

    def get_config(self) -> dict:
        return {"false_negatives": self.mode, "false_negative_rule": self.rule,
                "false_negative_threshold": self.threshold, "false_negative_margin": self.margin}


KEEP = FalseNegativeFilter()

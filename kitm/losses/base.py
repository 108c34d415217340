"""The contract every kitm loss follows.

A kitm loss is a plain function that returns one value per batch row (image p and caption p) plus a
thin `keras.losses.Loss` class around it, as Keras pairs `mean_squared_error` with `MeanSquaredError`.
On top of Keras' contract, a kitm loss can report *named terms* (for instance SAM's triplet part and
its adaptive-margin part) so that the model logs each one; `call` returns their sum.

Inputs of every loss class:
- `y_pred = {"image": [B, D], "text": [B, D]}`: unit-norm embeddings of image p and caption p.
- `y_true`: a dict from the input pipeline (`"relevance"`: [B, B] with relevance[p, q] the relevance of
  caption q to image p; `"image_index"`: [B] the dataset index of image p; whatever else a loss needs),
  or None for losses that need nothing.

Reduction defaults to `"sum"`, because the papers' losses are batch sums (docs/methods.md#reduction-and-warm-up), and
their margins and the VSE++ gradient clip (2.0) are tuned for sums.

Hardest-negative warm-up. A hardest-negative term (VSE++ `max_violation`, the ladder's first rung, a
`hardest` sampler) gives an encoder that starts from random weights one gradient per anchor, towards its
currently closest negative; early in training that negative is arbitrary and the embeddings can collapse
into one point, where every hinge equals its margin and the gradient vanishes (the ladder flagfiles did so on
the synthetic world). VSE++ practice (Faghri et al. 2018 train from a pretrained CNN; VSE-infinity, Chen et al.
2021, `--vse_mean_warmup_epochs`) is to start from the sum over negatives and switch to the hardest one after a
warm-up. A loss whose class sets `has_hardest_negatives` takes `hardest_warmup_steps`: for the first that many
training steps its hardest-negative terms use the sum over negatives (a max becomes a sum) and its `hardest`
samplers draw a random negative instead. The step is the model optimizer's `iterations`, bound by
`DualEncoder.compile` (`bind_training_step`), so a resumed run continues the warm-up where it stopped.

Global negatives. A loss whose class sets `supports_global_negatives` takes `negatives="global"`: under several
replicas each replica's anchors meet the negatives of the whole global batch, not only its own b rows
(`kitm.losses.global_batch`; docs/scale.md). With one replica it changes nothing.

What a loss can do is declared once, on its class, and read from there by kitm.experiment's objective registry (so a
user's own loss registered with `register_objective` gets the same treatment as kitm's):
    has_hardest_negatives       it takes hardest_warmup_steps
    supports_global_negatives   it takes negatives="global"
    needs_relevance             it reads y_true["relevance"] (a run needs a relevance source)
    supports_gradient_caching   its step can be replayed chunk by chunk (False where it trains state of its own
                                from each batch with optimizers of its own, as the semantic centres do)
    supports_false_negatives    it takes false_negatives="mask" / "positive" and the rule's settings
                                (kitm.losses.false_negatives; then it reads y_true["relevance"])
    uses_model_optimizer        its trainable variables train with the model's optimizer (a learnable temperature)
"""

from __future__ import annotations

from typing import Mapping

import keras
from keras import ops

from kitm.losses.false_negatives import FalseNegativeFilter
from kitm.losses.global_batch import GlobalBatch, check_negatives, global_batch, replica_share
from kitm.ops.similarity import cosine_similarity_matrix, diagonal_mask, negative_mask


def shapes_compatible(shape, other) -> bool:
    """Static shapes that can be equal: the same rank, each dimension equal or unknown (None)."""
    return len(shape) == len(other) and all(a is None or b is None or a == b for a, b in zip(shape, other))


def check_margin(margin: float) -> float:
    """A hinge margin as a float, refused when negative or NaN: `[m + s(negative) - s(positive)]+` with m < 0 would
    reward ranking the negative above the positive. The losses that take the `margin` setting (triplet, SAM, the
    angular losses, the adaptive ladder's rungs) and the experiment configuration, before any data is built, check
    it here, so the setting has one rule."""
    margin = float(margin)
    if not margin >= 0:
        raise ValueError(f"margin must be >= 0 (a hinge margin); got {margin}.")
    return margin


def reduce_per_row(values, reduction: str | None):
    """Reduce a [B] vector of per-row loss values the way `keras.losses.Loss` would."""
    if reduction in (None, "none"):
        return values
    values = ops.convert_to_tensor(values)
    if reduction == "sum":
        return ops.sum(values)
    if reduction in ("sum_over_batch_size", "mean"):
        # sum / max(B, 1): divide_no_nan's 0 for an empty batch, in the values' dtype on every backend.
        return ops.sum(values) / ops.cast(ops.maximum(ops.size(values), 1), values.dtype)
    raise ValueError(f"Unsupported reduction {reduction!r}; use 'sum', 'sum_over_batch_size', 'mean' or 'none'.")


def scale_for_replicas(value, reduction: str | None):
    """Divide a reduced loss by the number of replicas in sync, as Keras does for its own losses.

    Each replica reduces its local batch; the optimizer sums gradients over replicas, so the division
    makes the update that of the mean over replicas of the per-replica losses. (A loss with global negatives is
    scaled by `kitm.losses.global_batch.replica_share` instead.) Only TensorFlow's `tf.distribute` runs a loss per
    replica; on JAX and PyTorch the loss sees the global batch and R is 1 (`kitm.losses.global_batch`, "Backends").
    """
    return replica_share(value, reduction, global_negatives=False)


class RetrievalLoss(keras.losses.Loss):
    """Base class: subclasses implement `compute_terms` and list their `term_names`."""

    term_names: tuple[str, ...] = ("loss",)
    has_hardest_negatives = False  # True where hardest_warmup_steps means something (module docstring)
    supports_global_negatives = False  # True where negatives="global" means something (module docstring)
    needs_relevance = False  # True where compute_terms reads y_true["relevance"]
    supports_gradient_caching = True  # False where each batch trains state of its own (module docstring)
    supports_false_negatives = False  # True where false_negatives != "keep" means something (module docstring)

    def __init__(self, name: str, reduction: str = "sum", dtype=None, hardest_warmup_steps: int = 0,
                 negatives: str = "local", false_negatives: str = "keep", false_negative_rule: str = "threshold",
                 false_negative_threshold: float = 0.8, false_negative_margin: float = 0.0):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        self.negatives = check_negatives(negatives)
        self.false_negative_filter = FalseNegativeFilter(false_negatives, false_negative_rule,
                                                         false_negative_threshold, false_negative_margin)
        if self.false_negative_filter.active:
            if not self.supports_false_negatives:
                raise ValueError(f"{type(self).__name__} has no in-batch negatives to filter; got "
                                 f"false_negatives={false_negatives!r}.")
            self.needs_relevance = True  # the flags come from y_true["relevance"]
        if self.negatives == "global" and not self.supports_global_negatives:
            raise ValueError(f"{type(self).__name__} cannot take negatives='global': it reads more than the batch's "
                             "similarity matrix and labels (per-replica state, within-replica positions), so it "
                             "cannot gather the other replicas' rows; use negatives='local'.")
        if isinstance(hardest_warmup_steps, bool) or int(hardest_warmup_steps) != hardest_warmup_steps \
                or hardest_warmup_steps < 0:
            raise ValueError(f"hardest_warmup_steps must be an integer >= 0; got {hardest_warmup_steps!r}.")
        if hardest_warmup_steps and not self.has_hardest_negatives:
            raise ValueError(f"{type(self).__name__} has no hardest-negative term to warm up; "
                             f"got hardest_warmup_steps={hardest_warmup_steps}.")
        self.hardest_warmup_steps = int(hardest_warmup_steps)
        self._training_step = None

    def bind_training_step(self, step) -> None:
        """Count the hardest-negative warm-up in `step` (a scalar integer variable, e.g. an optimizer's
        `iterations`); `DualEncoder.compile` binds its optimizer's."""
        self._training_step = step

    def hardest_negatives_on(self):
        """Whether hardest-negative terms are in force: True without a warm-up, else a scalar bool tensor,
        False for the first `hardest_warmup_steps` training steps (module docstring). The step is read as a
        tensor, so one traced step function (tf.function, jax.jit) switches when the step passes the warm-up."""
        if not self.hardest_warmup_steps:
            return True
        if self._training_step is None:
            raise ValueError(f"{type(self).__name__}(hardest_warmup_steps={self.hardest_warmup_steps}) needs the "
                             "training step: compile it into a kitm DualEncoder, or call "
                             "loss.bind_training_step(optimizer.iterations).")
        return ops.greater_equal(ops.convert_to_tensor(self._training_step), self.hardest_warmup_steps)

    def compute_terms(self, y_true, y_pred: Mapping) -> dict:
        """Return {term name: per-row values [B]}; their sum is the loss."""
        raise TypeError(f"{type(self).__name__} is abstract: subclasses define compute_terms")

    def call(self, y_true, y_pred):
        terms = list(self.compute_terms(y_true, y_pred).values())
        total = terms[0]
        for term in terms[1:]:
            total = total + term
        return total

    def __call__(self, y_true, y_pred, sample_weight=None):
        # Keras' Loss.__call__ casts every y_true entry to the loss dtype and rejects None; kitm's y_true is a
        # dict that mixes float relevance with integer indices (or is None), so only y_pred is cast here.
        if not isinstance(y_pred, Mapping):
            raise ValueError(f"{type(self).__name__} takes y_pred = {{'image': [B, D], 'text': [B, D]}}; got "
                             f"{type(y_pred).__name__}.")
        with keras.name_scope(self.name):
            y_pred = {key: ops.cast(value, self.dtype) for key, value in y_pred.items()}
            values = self.call(y_true, y_pred)
            if sample_weight is not None:
                values = values * ops.cast(ops.reshape(sample_weight, (-1,)), values.dtype)
            return replica_share(reduce_per_row(values, self.reduction), self.reduction, self.global_negatives)

    @property
    def global_negatives(self) -> bool:
        return self.negatives == "global"

    def global_batch(self, y_pred) -> GlobalBatch | None:
        """This replica's view of the global batch under `negatives="global"` and several replicas, else None."""
        return global_batch(y_pred) if self.global_negatives else None

    def whole_batch_terms(self, y_true, y_pred, compute) -> dict:
        """`compute(y_true, y_pred)` -> {term: [B]}, and under global negatives with several replicas the same on
        the gathered global batch (`GlobalBatch.gather_batch`), of which this replica keeps its own rows: for the
        losses that read the whole similarity matrix (`kitm.losses.global_batch`)."""
        batch = self.global_batch(y_pred)
        if batch is None:
            return compute(y_true, y_pred)
        y_true, y_pred = batch.gather_batch(y_true, y_pred)
        return {term: batch.own_rows(values) for term, values in compute(y_true, y_pred).items()}

    def get_config(self):
        config = super().get_config()
        if self.has_hardest_negatives:
            config["hardest_warmup_steps"] = self.hardest_warmup_steps
        if self.supports_global_negatives:
            config["negatives"] = self.negatives
        if self.supports_false_negatives:
            config.update(self.false_negative_filter.get_config())
        return config

    @staticmethod
    def similarity(y_pred: Mapping):
        if not isinstance(y_pred, Mapping) or "image" not in y_pred or "text" not in y_pred:
            raise ValueError(
                "kitm losses take y_pred = {'image': [B, D], 'text': [B, D]}; got "
                f"{type(y_pred).__name__} with keys {list(y_pred) if isinstance(y_pred, Mapping) else 'n/a'}."
            )
        image, text = ops.convert_to_tensor(y_pred["image"]), ops.convert_to_tensor(y_pred["text"])
        if len(image.shape) != 2 or len(text.shape) != 2:
            raise ValueError(f"Embeddings must be [B, D]; got image {image.shape} and text {text.shape}.")
        return cosine_similarity_matrix(image, text)

    def false_negative_relevance(self, y_true):
        """y_true["relevance"], which the false-negative filter flags candidates by; a ValueError without it."""
        relevance = self.optional(y_true, "relevance")
        if relevance is None:
            raise ValueError(f"{type(self).__name__}(false_negatives={self.false_negative_filter.mode!r}) needs "
                             "y_true['relevance'] ([B, B], relevance of caption q to image p) to flag them.")
        return relevance

    def filtered_negatives(self, y_true, similarity, image_index=None):
        """(row negatives, column negatives) [B, B] without the flagged false negatives, for a loss that hinges on
        the anchor's own pair (`triplet_terms`' `negatives`); None when the filter keeps them (the loss's own
        rule applies)."""
        if not self.false_negative_filter.active:
            return None
        relevance = ops.convert_to_tensor(self.false_negative_relevance(y_true))
        own = diagonal_mask(ops.shape(similarity)[0], ops.shape(similarity)[0])
        row_flags, column_flags = self.false_negative_filter.flags(relevance, relevance, own, own)
        return self.false_negative_filter.negatives(negative_mask(similarity, image_index), row_flags, column_flags)

    @staticmethod
    def optional(y_true, key: str):
        """`y_true[key]` when y_true is a dict that has it, else None."""
        if isinstance(y_true, Mapping):
            return y_true.get(key)
        return None


def hardest_or_sum(hardest, total, hardest_on):
    """`hardest` where the hardest-negative terms are in force (`hardest_on`, a Python bool or a scalar bool
    tensor from `RetrievalLoss.hardest_negatives_on`), else `total` (the sum over negatives).

    A tensor switch is an elementwise select on a scalar condition, not a branch: both forms are computed, so it
    traces under tf.function and jax.jit alike."""
    if isinstance(hardest_on, bool):
        return hardest if hardest_on else total
    return ops.where(hardest_on, hardest, total)

"""Triplet hinge loss with adaptive margins on L2 distances (Malali & Keller, Sec. 3.5, Eqs. 10-13).

With D(a, b) = |a - b|_2, image anchors x_p and caption anchors y_q (Eq. 10):

    L_T = sum_p [ D(x_p, y_p) - D(x_p, y_{n_p}) + m_x ]+  +  sum_q [ D(y_q, x_q) - D(y_q, x_{m_q}) + m_y ]+

where y_{n_p} is the negative caption of image p and x_{m_q} the negative image of caption q. The paper
draws each negative at random within the batch (Sec. 4.1); kitm also offers the hardest (closest) and
easiest (furthest) negative, or every negative of the anchor (`sampling="all"`, a sum over them).

m_x and m_y are non-trainable variables. Every q batches `kitm.callbacks.AdaptiveMarginCallback` sets
M = (negatives used in those batches whose distance gap already exceeds the margin) / (negatives used),
i.e. those with `D+ - D- + m <= 0` (zero hinge), and m <- c m when M > r (Eq. 13). docs/methods.md#adaptive-margins:
the printed Eq. 11 counts the violations (`> 0`) while the text says "adhering to the margins"; kitm
follows the text. For that the loss adds, on every call, the satisfied and used counts of each
direction to per-replica accumulators (`synchronization=ON_READ`, `aggregation=SUM`): a replica only
writes its own copy, and a read in cross-replica context sums the replicas. Those are TensorFlow's
(`tf.distribute`); on JAX and PyTorch, where one loss sees the whole batch, they are plain Keras variables
(`kitm.distribute.per_replica_variable`: the backend and its replicas are kitm.distribute's). Every variable the loss
reads or updates in a training step (margins, counters, the random draws' seed states) is listed in
`non_trainable_variables`, for a stateless trainer (JAX) to carry through its step.

Example (hand-computed, one direction): x = [1, 0], y+ = [0.6, 0.8], y- = [0, 1], m = 0.2:
D+ = |[0.4, -0.8]| = 0.8944, D- = |[1, -1]| = 1.4142, hinge [0.8944 - 1.4142 + 0.2]+ = 0 (satisfied);
with m = 0.6 the hinge is 0.0802 and the negative is not satisfied.
"""

from __future__ import annotations

from typing import Mapping, NamedTuple

import keras
import numpy as np
from keras import ops

from kitm.distribute.replica_local import assign_replica_local, per_replica_variable, replica_local_values
from kitm.losses import samplers
from kitm.losses.base import RetrievalLoss
from kitm.ops.similarity import cosine_similarity_matrix, negative_mask

__all__ = [
    "SAMPLINGS",
    "l2_distance",
    "pairwise_l2_distances",
    "exact_pairwise_l2_distances",
    "AdaptiveMarginTerms",
    "adaptive_margin_triplet_terms",
    "adaptive_margin_triplet_loss",
    "AdaptiveMarginTripletLoss",
    "replica_local_values",
    "assign_replica_local",
]

SAMPLINGS = ("random", "hardest", "easiest", "all")


# --------------------------------------------------------------------------------------------------
# Distances and the plain functions
# --------------------------------------------------------------------------------------------------

def _safe_sqrt(squared):
    """sqrt with a zero (not NaN) gradient at 0: two identical embeddings are a valid input."""
    positive = squared > 0
    return ops.where(positive, ops.sqrt(ops.where(positive, squared, ops.ones_like(squared))),
                     ops.zeros_like(squared))


def l2_distance(a, b, squared: bool = False):
    """Row-wise `|a_i - b_i|_2` (or its square), [B]; from the differences, exact near 0."""
    a, b = ops.convert_to_tensor(a), ops.convert_to_tensor(b)
    squared_distance = ops.sum(ops.square(a - b), axis=-1)
    return squared_distance if squared else _safe_sqrt(squared_distance)


# Elements of the [rows, Bb, D] differences `exact_pairwise_l2_distances` holds at once (64 MB in float32).
_EXACT_CHUNK_ELEMENTS = 1 << 24


def pairwise_l2_distances(a, b, squared: bool = False):
    """`D[i, j] = |a_i - b_j|_2` (or its square), [Ba, Bb], via the Gram matrix (no [Ba, Bb, D] tensor).

    Fast, but `|a|^2 + |b|^2 - 2 a.b` cancels for near pairs: two equal float32 rows give a rounding residue
    (about 1e-7, so a distance near 3e-4) instead of 0. Good for ranking negatives; the loss's own distances use
    `exact_pairwise_l2_distances`."""
    a, b = ops.convert_to_tensor(a), ops.convert_to_tensor(b)
    squared_distance = ops.relu(ops.expand_dims(ops.sum(ops.square(a), axis=1), 1)
                                + ops.expand_dims(ops.sum(ops.square(b), axis=1), 0)
                                - 2.0 * cosine_similarity_matrix(a, b))
    return squared_distance if squared else _safe_sqrt(squared_distance)


def exact_pairwise_l2_distances(a, b, squared: bool = False):
    """`D[i, j] = |a_i - b_j|_2` (or its square), [Ba, Bb], from the differences themselves: exact near 0 (equal
    rows give exactly 0, with a zero gradient). Rows of `a` go in chunks so that the [rows, Bb, D] differences stay
    under 2^24 elements; a batch whose size is unknown when traced goes in one chunk."""
    a, b = ops.convert_to_tensor(a), ops.convert_to_tensor(b)
    rows, columns, width = a.shape[0], b.shape[0], a.shape[-1]
    chunk = rows
    if rows is not None and columns is not None and width is not None:
        chunk = max(1, _EXACT_CHUNK_ELEMENTS // max(columns * width, 1))
    if rows is None or chunk >= rows:
        parts = [a]
    else:
        parts = [a[start:start + chunk] for start in range(0, rows, chunk)]
    squared_distance = ops.concatenate(
        [ops.sum(ops.square(ops.expand_dims(part, 1) - ops.expand_dims(b, 0)), axis=-1) for part in parts], axis=0)
    return squared_distance if squared else _safe_sqrt(squared_distance)


class AdaptiveMarginTerms(NamedTuple):
    """Per-row hinge terms and the statistics of Eq. 11 (satisfied and used negatives per direction).

    i2t, t2i: [B] (image anchor p; caption anchor p). satisfied_x/used_x, satisfied_y/used_y: int32 scalars.
    """

    i2t: object  # backend tensors
    t2i: object
    satisfied_x: object
    used_x: object
    satisfied_y: object
    used_y: object


def _dtype(tensor) -> str:
    return keras.backend.standardize_dtype(tensor.dtype)


def _check_embeddings(image, text) -> tuple:
    image, text = ops.convert_to_tensor(image), ops.convert_to_tensor(text)
    same_shape = len(image.shape) == len(text.shape) and all(
        a is None or b is None or a == b for a, b in zip(image.shape, text.shape))
    if len(image.shape) != 2 or len(text.shape) != 2 or not same_shape:
        raise ValueError(f"image and text must be [B, D] embeddings of one shape; got {image.shape} and {text.shape}.")
    if "float" not in _dtype(image) or _dtype(image) != _dtype(text):
        raise ValueError(f"image and text must be floats of one dtype; got {_dtype(image)} and {_dtype(text)}.")
    return image, text


def _is_tensor(value) -> bool:
    return isinstance(value, keras.Variable) or ops.is_tensor(value)


def _check_margin(name: str, margin):
    if _is_tensor(margin):
        return margin
    margin = float(margin)
    if not margin >= 0:
        raise ValueError(f"{name} must be >= 0; got {margin}.")
    return margin


def _as_dtype(value, dtype):
    # A Python float goes straight to `dtype` (a cast would round it through float32 first on TensorFlow).
    if _is_tensor(value):
        return ops.cast(value, dtype)
    return ops.convert_to_tensor(value, dtype=dtype)


def _count(mask):
    return ops.sum(ops.cast(mask, "int32"))


def adaptive_margin_triplet_terms(image, text, negative_captions=None, negative_images=None, *,
                                  margin_x=0.2, margin_y=0.2, image_index=None,
                                  squared: bool = False) -> AdaptiveMarginTerms:
    """Eq. 10's hinges per row plus the satisfied/used counts of Eq. 11 (module docstring).

    Args:
      image, text: [B, D] embeddings (x_p, y_p).
      negative_captions: int [B], the negative caption n_p of image anchor p (-1: none, the term is 0
        and the anchor is not counted); negative_images: int [B], the negative image m_q of caption q.
        Both None: every negative of each anchor (off the diagonal and, with `image_index`, not the same
        image), summed.
      margin_x, margin_y: the margins of image and caption anchors (floats or scalar tensors).
      image_index: optional int [B]; only used when both index vectors are None.
      squared: squared L2 distances instead of L2 (the paper uses L2).
    A negative is *satisfied* when its hinge argument `D+ - D- + m` is <= 0.
    """
    image, text = _check_embeddings(image, text)
    margin_x = _as_dtype(_check_margin("margin_x", margin_x), image.dtype)
    margin_y = _as_dtype(_check_margin("margin_y", margin_y), image.dtype)
    positive = l2_distance(image, text, squared)  # D(x_p, y_p) = D(y_p, x_p)
    if (negative_captions is None) != (negative_images is None):
        raise ValueError("Give both negative_captions and negative_images, or neither (every negative).")
    if negative_captions is None:
        distances = exact_pairwise_l2_distances(image, text, squared)  # [p, q] = D(x_p, y_q), exact near 0
        negative = negative_mask(distances, image_index)
        zeros = ops.zeros_like(distances)
        # Rows: image anchor p against captions q; columns: caption anchor q against images p.
        argument_x = ops.expand_dims(positive, 1) - distances + margin_x
        argument_y = ops.expand_dims(positive, 0) - distances + margin_y
        i2t = ops.sum(ops.where(negative, ops.relu(argument_x), zeros), axis=1)
        t2i = ops.sum(ops.where(negative, ops.relu(argument_y), zeros), axis=0)
        return AdaptiveMarginTerms(i2t, t2i, _count(ops.logical_and(negative, argument_x <= 0)), _count(negative),
                                   _count(ops.logical_and(negative, argument_y <= 0)), _count(negative))
    terms = []
    for anchors, candidates, index, margin, name in ((image, text, negative_captions, margin_x, "negative_captions"),
                                                     (text, image, negative_images, margin_y, "negative_images")):
        index = ops.convert_to_tensor(index)
        if len(index.shape) != 1 or "int" not in _dtype(index):
            raise ValueError(f"{name} must be an int [B] vector; got {_dtype(index)} {index.shape}.")
        index = ops.cast(index, "int32")
        valid = index >= 0
        negatives = ops.take(candidates, ops.where(valid, index, ops.zeros_like(index)), axis=0)
        argument = positive - l2_distance(anchors, negatives, squared) + margin
        hinge = ops.where(valid, ops.relu(argument), ops.zeros_like(argument))
        terms.append((hinge, _count(ops.logical_and(valid, argument <= 0)), _count(valid)))
    (i2t, sat_x, used_x), (t2i, sat_y, used_y) = terms
    return AdaptiveMarginTerms(i2t, t2i, sat_x, used_x, sat_y, used_y)


def adaptive_margin_triplet_loss(image, text, negative_captions=None, negative_images=None, *, margin_x=0.2,
                                 margin_y=0.2, image_index=None, squared: bool = False):
    """Eq. 10 per batch row [B] (image anchor p's term plus caption anchor p's); the sum is L_T.

    Arguments as in `adaptive_margin_triplet_terms`.
    """
    terms = adaptive_margin_triplet_terms(image, text, negative_captions, negative_images, margin_x=margin_x,
                                          margin_y=margin_y, image_index=image_index, squared=squared)
    return terms.i2t + terms.t2i


# --------------------------------------------------------------------------------------------------
# The loss class
# --------------------------------------------------------------------------------------------------

@keras.saving.register_keras_serializable(package="kitm")
class AdaptiveMarginTripletLoss(RetrievalLoss):
    """Symmetric triplet loss on L2 distances with margins m_x, m_y that a callback adapts (Eqs. 10-13).

    Uses `y_true["image_index"]` when present (same-image samples are not negatives).

    Args:
      margin_x, margin_y: initial margins of image and caption anchors (paper: 0.2).
      sampling: "random" (the paper, Sec. 4.1), "hardest" (closest), "easiest" (furthest) or "all".
      squared: squared L2 distances instead of L2.
      seed: op seed of the random sampler (None: nondeterministic) on TensorFlow; on JAX and PyTorch the start of
        the loss's `keras.random.SeedGenerator`s (`samplers.seed_stream`).
      hardest_warmup_steps: with `sampling="hardest"`, random negatives for this many training steps first
        (kitm.losses.base, "Hardest-negative warm-up").
    State (create the loss inside `strategy.scope()`): `margin_x`, `margin_y` (non-trainable variables,
    assigned by `kitm.callbacks.AdaptiveMarginCallback`) and the satisfied/used counters read by
    `statistics()`; `non_trainable_variables` lists them with the random draws' seed states. Terms: "i2t", "t2i".
    """

    term_names = ("i2t", "t2i")
    has_hardest_negatives = True

    def __init__(self, margin_x: float = 0.2, margin_y: float = 0.2, sampling: str = "random",
                 squared: bool = False, seed: int | None = None, name: str = "adaptive_triplet",
                 reduction: str = "sum", dtype=None, hardest_warmup_steps: int = 0):
        super().__init__(name=name, reduction=reduction, dtype=dtype, hardest_warmup_steps=hardest_warmup_steps)
        if sampling not in SAMPLINGS:
            raise ValueError(f"sampling must be one of {SAMPLINGS}; got {sampling!r}.")
        self.initial_margins = (_check_margin("margin_x", margin_x), _check_margin("margin_y", margin_y))
        self.sampling = sampling
        self.squared = bool(squared)
        self.seed = None if seed is None else int(seed)
        self.margin_x = keras.Variable(self.initial_margins[0], trainable=False, dtype="float32",
                                       name=f"{name}_margin_x")
        self.margin_y = keras.Variable(self.initial_margins[1], trainable=False, dtype="float32",
                                       name=f"{name}_margin_y")
        # [x, y] counts; int64 so that long accumulation windows cannot lose counts.
        self.satisfied_counts = per_replica_variable(np.zeros([2], np.int64), f"{name}_satisfied")
        self.used_counts = per_replica_variable(np.zeros([2], np.int64), f"{name}_used")
        # A different stream for the other direction, so the two draws are independent.
        self._seeds = (samplers.seed_stream(self.seed), samplers.seed_stream(self.seed, 1))

    @property
    def non_trainable_variables(self) -> list:
        """The variables the loss reads or updates in a training step: the margins, the counters and (on JAX and
        PyTorch) the random draws' seed states; a stateless trainer (JAX) carries them through its step."""
        seeds = [seed.state for seed in self._seeds if isinstance(seed, keras.random.SeedGenerator)]
        return [self.margin_x, self.margin_y, self.satisfied_counts, self.used_counts] + seeds

    def _negatives(self, image, text, image_index):
        if self.sampling == "all":
            return None, None
        scores = -pairwise_l2_distances(ops.stop_gradient(image), ops.stop_gradient(text), self.squared)
        negative = negative_mask(scores, image_index)
        mode = {"random": "random", "hardest": "hardest", "easiest": "easiest"}[self.sampling]
        hardest_on = self.hardest_negatives_on() if mode == "hardest" else True
        captions = samplers.sample_negatives(scores, negative, mode, axis=1, seed=self._seeds[0],
                                             hardest_on=hardest_on)
        # A different op seed (stream) for the other direction, so the two draws are independent.
        images = samplers.sample_negatives(scores, negative, mode, axis=0, seed=self._seeds[1], hardest_on=hardest_on)
        return captions.indices, images.indices

    def compute_terms(self, y_true, y_pred):
        if not isinstance(y_pred, Mapping) or "image" not in y_pred or "text" not in y_pred:
            raise ValueError(f"{type(self).__name__} takes y_pred = {{'image': [B, D], 'text': [B, D]}}; got "
                             f"{type(y_pred).__name__}.")
        image, text = _check_embeddings(y_pred["image"], y_pred["text"])
        image_index = self.optional(y_true, "image_index")
        negative_captions, negative_images = self._negatives(image, text, image_index)
        terms = adaptive_margin_triplet_terms(
            image, text, negative_captions, negative_images, margin_x=ops.cast(self.margin_x, image.dtype),
            margin_y=ops.cast(self.margin_y, image.dtype), image_index=image_index, squared=self.squared)
        counts_dtype = keras.backend.standardize_dtype(self.satisfied_counts.dtype)
        self.satisfied_counts.assign_add(ops.cast(ops.stack([terms.satisfied_x, terms.satisfied_y]), counts_dtype))
        self.used_counts.assign_add(ops.cast(ops.stack([terms.used_x, terms.used_y]), counts_dtype))
        return {"i2t": terms.i2t, "t2i": terms.t2i}

    # Called eagerly by the callback, outside the training step.
    def statistics(self) -> dict[str, int]:
        """Satisfied and used negatives since the last reset, summed over replicas."""
        satisfied = np.sum(replica_local_values(self.satisfied_counts), axis=0)
        used = np.sum(replica_local_values(self.used_counts), axis=0)
        return {"satisfied_x": int(satisfied[0]), "used_x": int(used[0]),
                "satisfied_y": int(satisfied[1]), "used_y": int(used[1])}

    def reset_statistics(self) -> None:
        assign_replica_local(self.satisfied_counts, np.zeros(2, np.int64))
        assign_replica_local(self.used_counts, np.zeros(2, np.int64))

    def statistics_state(self):
        """Every replica's raw counters, for `restore_statistics` (e.g. around a validation run)."""
        return replica_local_values(self.satisfied_counts), replica_local_values(self.used_counts)

    def restore_statistics(self, state) -> None:
        satisfied, used = state
        assign_replica_local(self.satisfied_counts, list(satisfied))
        assign_replica_local(self.used_counts, list(used))

    def get_config(self):
        config = super().get_config()
        config.update(margin_x=self.initial_margins[0], margin_y=self.initial_margins[1], sampling=self.sampling,
                      squared=self.squared, seed=self.seed)
        return config

"""Negative samplers shared by kitm's losses: choosing negatives is a separate concern from the loss.

Every sampler works on a [B, B] score matrix (usually the image-by-caption cosine `s[p, q]`) and a
bool [B, B] `negative` mask (usually `kitm.ops.similarity.negative_mask`: off the diagonal and not two
samples of the same image). `axis` says which anchors are served, as in `tf.argmax`:

- `axis=1`: one pick per *row* among its columns: image anchor p gets a negative caption q;
- `axis=0`: one pick per *column* among its rows: caption anchor q gets a negative image m.

Modes (named by what they do; SAM paper Sec. 5.4, docs/methods.md#sam):

- `hardest`: the negative with the highest score, i.e. closest to the anchor (VSE++ hard negative, "HN");
- `easiest`: the lowest score, furthest from the anchor (the paper's "SN", soft negative);
- `random`: uniform among the anchor's negatives ("RS").

Every sampler returns `NegativeSample(indices, valid)`, both [B]: `indices` int32, -1 where the anchor
has no negative at all (a batch of one image, B = 1) and `valid` False there. Losses drop such anchors'
terms instead of computing them against a made-up negative. Ties go to the smallest index (first
maximum, as `tf.argmax` on CPU; -0.0 and 0.0 tie). Nothing here is differentiable: indices carry no gradient.

Hard contrastive selection (ladder loss, Zhou et al., Eq. 8) needs the extreme *value* of a masked set
rather than its index: `masked_max` / `masked_min` return it with a `nonempty` flag, and
`hard_contrastive` pairs the furthest member of the closer set with the closest member of the farther
set. An empty set gives value 0 and `nonempty=False`, and the loss drops the term (docs/methods.md#ladder:
an empty set contributes nothing, unlike the reference's `scores * mask`).
"""

from __future__ import annotations

from typing import NamedTuple

import keras
from keras import ops

from kitm.distribute.backend import static_rank
from kitm.distribute.random_draws import seed_stream, uniform_keys
from kitm.losses.base import shapes_compatible

SAMPLING_MODES = ("hardest", "easiest", "random")

__all__ = [
    "SAMPLING_MODES",
    "NegativeSample",
    "hardest_negatives",
    "easiest_negatives",
    "random_negatives",
    "sample_negatives",
    "masked_max",
    "masked_min",
    "hard_contrastive",
    "check_sampling",
    "seed_stream",
]


class NegativeSample(NamedTuple):
    """indices: int32 [B], the chosen negative per anchor (-1 when none); valid: bool [B]."""

    indices: object  # int32 [B], a backend tensor
    valid: object  # bool [B]


def check_sampling(sampling: str) -> str:
    """Return `sampling` if it is a known mode, else raise ValueError naming the argument."""
    if sampling not in SAMPLING_MODES:
        raise ValueError(f"sampling must be one of {SAMPLING_MODES}; got {sampling!r}.")
    return sampling


def _check_axis(axis: int) -> int:
    if axis not in (0, 1):
        raise ValueError(f"axis must be 1 (one negative per row: image anchors) or 0 (per column: caption "
                         f"anchors); got {axis!r}.")
    return axis


def _check_mask(negative, like=None, name: str = "negative"):
    negative = ops.convert_to_tensor(negative)
    dtype = keras.backend.standardize_dtype(negative.dtype)
    if dtype != "bool":
        raise ValueError(f"{name} must be a bool mask; got dtype {dtype}.")
    rank = static_rank(negative)
    if rank is not None and rank != 2:
        raise ValueError(f"{name} must be a [B, B] matrix; got shape {negative.shape}.")
    if like is not None and rank is not None and static_rank(like) is not None \
            and not shapes_compatible(tuple(negative.shape), tuple(like.shape)):
        raise ValueError(f"{name} must have the shape of the scores; got {negative.shape} and {like.shape}.")
    return negative


def _check_scores(scores, name: str = "scores"):
    scores = ops.convert_to_tensor(scores)
    rank = static_rank(scores)
    if rank is not None and rank != 2:
        raise ValueError(f"{name} must be a [B, B] matrix; got shape {scores.shape}.")
    return scores


def _pick(keys, negative, axis: int) -> NegativeSample:
    """argmax of `keys` over the True entries of `negative` along `axis`; -1 where none is True."""
    valid = ops.any(negative, axis=axis)
    # -0.0 and 0.0 are one value here, as for a comparison (and tf.argmax): keras.ops.argmax ranks -0.0 below 0.0,
    # which would move a tie (rounded scores give both) away from the smallest index.
    keys = ops.where(ops.equal(keys, 0), ops.zeros_like(keys), keys)
    floor = ops.full_like(keys, -float("inf"))
    best = ops.cast(ops.argmax(ops.where(negative, keys, floor), axis=axis), "int32")
    return NegativeSample(ops.where(valid, best, -ops.ones_like(best)), valid)


def hardest_negatives(scores, negative, axis: int = 1) -> NegativeSample:
    """Per anchor, the negative with the highest score (closest to the anchor): `argmax_{n in N(a)} s`."""
    scores = _check_scores(scores)
    negative = _check_mask(negative, scores)
    return _pick(ops.stop_gradient(scores), negative, _check_axis(axis))


def easiest_negatives(scores, negative, axis: int = 1) -> NegativeSample:
    """Per anchor, the negative with the lowest score (furthest from the anchor): `argmin_{n in N(a)} s`."""
    scores = _check_scores(scores)
    negative = _check_mask(negative, scores)
    return _pick(-ops.stop_gradient(scores), negative, _check_axis(axis))


def random_negatives(negative, axis: int = 1, seed=None) -> NegativeSample:
    """Per anchor, a negative drawn uniformly among its negatives.

    The argmax of i.i.d. uniform keys restricted to the anchor's negatives is uniform over them, so the
    whole batch is drawn at once without a loop or a variable-length gather.

    Args:
      negative: bool [B, B] mask of allowed negatives.
      axis: 1 for row anchors (image anchors), 0 for column anchors (caption anchors).
      seed: None (nondeterministic), a Python int, an int tensor of shape [2] (the same seed gives the same
        draw), or a `keras.random.SeedGenerator` (a new draw per call, from its state: what a traced step on JAX
        needs; `seed_stream` makes one). On TensorFlow an int is the op-level seed of a stateful
        `tf.random.uniform`, which still changes from call to call, and a [2] tensor seeds
        `tf.random.stateless_uniform`; on the other backends an int seeds `keras.random.uniform` (the same draw
        every call: pass a SeedGenerator for fresh draws).
    """
    negative = _check_mask(negative)
    axis = _check_axis(axis)
    return _pick(uniform_keys(ops.shape(negative), seed), negative, axis)


def sample_negatives(scores, negative, sampling: str, axis: int = 1, seed=None, hardest_on=True) -> NegativeSample:
    """Dispatch to `hardest_negatives`, `easiest_negatives` or `random_negatives` by name.

    `hardest_on` (a Python bool or a scalar bool tensor; `RetrievalLoss.hardest_negatives_on`): where False,
    `sampling="hardest"` draws a random negative instead (the hardest-negative warm-up, kitm.losses.base).
    """
    sampling = check_sampling(sampling)
    if sampling == "hardest":
        if hardest_on is True:
            return hardest_negatives(scores, negative, axis)
        drawn = random_negatives(negative, axis, seed)
        if hardest_on is False:
            return drawn
        hardest = hardest_negatives(scores, negative, axis)
        return NegativeSample(ops.where(hardest_on, hardest.indices, drawn.indices),
                              ops.where(hardest_on, hardest.valid, drawn.valid))
    if sampling == "easiest":
        return easiest_negatives(scores, negative, axis)
    return random_negatives(negative, axis, seed)


def masked_max(values, mask, axis: int = 1) -> tuple:
    """`max_{j in M} values` along `axis`, with `nonempty = any(M)`; value 0 where M is empty.

    Masked-out entries are filled with a constant strictly below every value, not 0: with negative
    similarities a 0 fill would win the max (the reference ladder loss's `scores * mask` bug). The
    gradient reaches only the chosen member (split evenly among exact ties, as `tf.reduce_max`).
    """
    values = ops.convert_to_tensor(values)
    mask = _check_mask(mask, values, "mask")
    floor = ops.stop_gradient(ops.min(values)) - 1
    nonempty = ops.any(mask, axis=axis)
    best = ops.max(ops.where(mask, values, floor), axis=axis)
    return ops.where(nonempty, best, ops.zeros_like(best)), nonempty


def masked_min(values, mask, axis: int = 1) -> tuple:
    """`min_{i in M} values` along `axis`, with `nonempty = any(M)`; value 0 where M is empty."""
    values = ops.convert_to_tensor(values)
    best, nonempty = masked_max(-values, mask, axis)
    return -best, nonempty


def hard_contrastive(values, closer, farther, axis: int = 1) -> tuple:
    """Hard contrastive pair of Zhou et al., Eq. 8: `(min_{i in closer} v, max_{j in farther} v, valid)`.

    `closer` is the set that should score higher (e.g. the positive and the more relevant ladder levels),
    `farther` the set that should score lower; `valid` is False where either set is empty, and the loss
    must then drop the term.
    """
    low, has_closer = masked_min(values, closer, axis)
    high, has_farther = masked_max(values, farther, axis)
    return low, high, ops.logical_and(has_closer, has_farther)

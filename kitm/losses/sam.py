"""SAM: the semantic adaptive margin triplet loss (Biten, Mafla et al., WACV 2022, Eq. 7).

docs/methods.md#sam. With `s[p, q]` the cosine of image p and caption q and `R[p, q]` the relevance
(CIDEr-D) of caption q to image p, anchor image p with its chosen negative caption n, and anchor
caption q with its chosen negative image m:

    i2t(p) = [ alpha(p, n)  + s[p, n] - s[p, p] ]+,   alpha(p, n)  = min((R[p, p] - R[p, n]) / tau, max_margin)
    t2i(q) = [ alpha'(q, m) + s[m, q] - s[q, q] ]+,   alpha'(q, m) = min((R[q, q] - R[m, q]) / tau, max_margin)

The margin may be negative (a "negative" caption more relevant than the positive one). The clip at 1
and the division by tau are the reference code's (`metric_div`); the paper's Table 4 uses tau in
{3, 5, 10}. The per-row value of row p is i2t(p) + t2i(p), so the sum over rows is L_SAM.

Pairing (`pairing=`):

- `"matched"` (default): each margin belongs to its own negative, as above.
- `"reference"`: what the reference implementation (AndresPMD/semantic_adaptive_margin, `model_CVSE.py`,
  `ContrastiveLossMetric.forward`) computes, index for index. It adds a length-B margin vector to a BxB
  cost matrix, which broadcasts along the last axis, so row p's term gets the margin computed for another
  row. Given its two index vectors n0 and n1 (one entry per image row p, drawn by its sampler):

      ms[k] = min((R[k, k] - R[k, n1[k]]) / tau, 1),   mi[k] = min((R[k, k] - R[k, n0[k]]) / tau, 1)
      caption retrieval of row p: [ ms[n0[p]] + s[p, n0[p]] - s[p, p] ]+
      image retrieval of row p:   [ mi[n1[p]] + s[p, n1[p]] - s[n1[p], n1[p]] ]+
                                  (anchor caption n1[p], negative image p)

  `sam_loss` then takes (n0, n1) as `(negative_captions, negative_images)`. In the reference, n0[p] is
  picked along row p of `cost_s[p, q] = s[p, q] - s[p, p]` and n1[p] along row p of
  `cost_im[p, q] = s[p, q] - s[q, q]` (a caption q for which image p is the negative); `SAMLoss` draws
  them the same way, with kitm's samplers.

The reference's sampling names are inverted against the paper's text. Its `hard` takes the
*second-lowest* cost (`topk(cost, 2, largest=False)[1][:, 1]`), which is close to the *easiest* negative
(the lowest is usually the easiest negative itself); its `soft` takes the *second-highest* cost, which,
once the positive (cost 0) leads the row, is the *hardest* negative. So the paper's best runs,
reported as "SN" (soft negative), used a sampler that picks near-hardest negatives. kitm names modes by
what they do: `hardest` ~ reference `soft`, `easiest` ~ reference `hard`, `random` = reference `random`;
kitm excludes the positive (and same-image samples) by mask instead of skipping the first of the top 2.

Example (hand-computed, matched pairing): s = [[0.9, 0.5], [0.8, 0.6]], R = [[3.0, 1.0], [2.0, 2.5]],
tau = 4, negatives: caption 1 for image 0, caption 0 for image 1, image 1 for caption 0, image 0 for
caption 1.
  i2t(0) = [min((3.0 - 1.0)/4, 1) + 0.5 - 0.9]+ = [0.5 - 0.4]+ = 0.1
  i2t(1) = [min((2.5 - 2.0)/4, 1) + 0.8 - 0.6]+ = [0.125 + 0.2]+ = 0.325
  t2i(0) = [min((3.0 - 2.0)/4, 1) + 0.8 - 0.9]+ = [0.25 - 0.1]+ = 0.15
  t2i(1) = [min((2.5 - 1.0)/4, 1) + 0.5 - 0.6]+ = [0.375 - 0.1]+ = 0.275
  per row: [0.25, 0.6]; sum 0.85.
"""

from __future__ import annotations

import keras
from keras import ops

from kitm.losses.base import RetrievalLoss, check_margin
from kitm.losses.samplers import check_sampling, sample_negatives, seed_stream
from kitm.losses.triplet import triplet_terms
from kitm.ops.similarity import negative_mask

PAIRINGS = ("matched", "reference")

__all__ = ["PAIRINGS", "sam_terms", "sam_loss", "SAMLoss"]


def _check_tau(tau) -> float:
    if tau is None or isinstance(tau, bool):
        raise ValueError(f"tau must be a positive number; got {tau!r}.")
    tau = float(tau)
    if not tau > 0:
        raise ValueError(f"tau must be > 0 (it divides the relevance gap); got {tau}.")
    return tau


def _check_max_margin(max_margin) -> float | None:
    if max_margin is None:
        return None
    max_margin = float(max_margin)
    if max_margin != max_margin:
        raise ValueError(f"max_margin must be a number or None; got {max_margin}.")
    return max_margin


def _check_pairing(pairing: str) -> str:
    if pairing not in PAIRINGS:
        raise ValueError(f"pairing must be one of {PAIRINGS}; got {pairing!r}.")
    return pairing


def _check_weight(name: str, weight) -> float:
    weight = float(weight)
    if not weight >= 0:
        raise ValueError(f"{name} must be >= 0; got {weight}.")
    return weight


def _margin(gap, tau: float, max_margin: float | None):
    margin = gap / tau
    if max_margin is not None:
        # min(margin, max_margin) as a select, with tf.minimum's gradient (to margin at a tie) and in margin's
        # dtype (Keras' PyTorch backend computes ops.minimum of float64 in float32).
        cap = ops.convert_to_tensor(max_margin, dtype=margin.dtype)
        margin = ops.where(margin <= cap, margin, cap)
    return margin


def _same_shape(shape, other) -> bool:
    return len(shape) == len(other) and all(a is None or b is None or a == b for a, b in zip(shape, other))


def sam_terms(similarity, relevance, negative_captions, negative_images, *, tau: float,
              max_margin: float | None = 1.0, pairing: str = "matched") -> tuple:
    """Per-anchor SAM hinges (i2t, t2i), each [B]; their sum is `sam_loss` (module docstring).

    An index outside [0, B) (the samplers' -1 for an anchor without a negative) drops that term (0).
    For `pairing="reference"`, `negative_captions` and `negative_images` are the reference's n0 and n1;
    a reference term is dropped when either index it reads is out of range.
    """
    tau = _check_tau(tau)
    max_margin = _check_max_margin(max_margin)
    pairing = _check_pairing(pairing)
    similarity = ops.convert_to_tensor(similarity)
    if len(similarity.shape) != 2:
        raise ValueError(f"similarity must be a [B, B] matrix; got shape {similarity.shape}.")
    relevance = ops.convert_to_tensor(relevance)
    if len(relevance.shape) != 2 or not _same_shape(relevance.shape, similarity.shape):
        raise ValueError(f"relevance must be [B, B] like similarity {similarity.shape}; got {relevance.shape}.")
    relevance = ops.cast(relevance, similarity.dtype)
    n_cap = ops.cast(ops.convert_to_tensor(negative_captions), "int32")
    n_img = ops.cast(ops.convert_to_tensor(negative_images), "int32")
    for name, index in (("negative_captions", n_cap), ("negative_images", n_img)):
        if len(index.shape) != 1:
            raise ValueError(f"{name} must be a [B] index vector; got shape {index.shape}.")

    b = ops.shape(similarity)[0]
    rows = ops.arange(b, dtype="int32")
    positive_sim = ops.diagonal(similarity)
    positive_rel = ops.diagonal(relevance)
    has_cap = ops.logical_and(n_cap >= 0, n_cap < b)
    has_img = ops.logical_and(n_img >= 0, n_img < b)
    # Out-of-range indices are replaced by the anchor itself only to keep the gathers legal;
    # the term is zeroed below.
    n_cap_safe = ops.where(has_cap, n_cap, rows)
    n_img_safe = ops.where(has_img, n_img, rows)

    def in_row(matrix, columns):  # matrix[p, columns[p]] for every row p
        return ops.squeeze(ops.take_along_axis(matrix, ops.expand_dims(columns, 1), axis=1), 1)

    def in_column(matrix, rows_):  # matrix[rows_[q], q] for every column q
        return ops.squeeze(ops.take_along_axis(matrix, ops.expand_dims(rows_, 0), axis=0), 0)

    zeros = ops.zeros_like(positive_sim)
    if pairing == "matched":
        alpha_i2t = _margin(positive_rel - in_row(relevance, n_cap_safe), tau, max_margin)
        i2t = ops.relu(alpha_i2t + in_row(similarity, n_cap_safe) - positive_sim)
        alpha_t2i = _margin(positive_rel - in_column(relevance, n_img_safe), tau, max_margin)
        t2i = ops.relu(alpha_t2i + in_column(similarity, n_img_safe) - positive_sim)
        return ops.where(has_cap, i2t, zeros), ops.where(has_img, t2i, zeros)

    # Reference pairing: ms[k] is built from n1[k], mi[k] from n0[k], then read at another row.
    ms = _margin(positive_rel - in_row(relevance, n_img_safe), tau, max_margin)
    mi = _margin(positive_rel - in_row(relevance, n_cap_safe), tau, max_margin)
    caption_retrieval = ops.relu(ops.take(ms, n_cap_safe, axis=0) + in_row(similarity, n_cap_safe) - positive_sim)
    image_retrieval = ops.relu(ops.take(mi, n_img_safe, axis=0) + in_row(similarity, n_img_safe)
                               - ops.take(positive_sim, n_img_safe, axis=0))
    ok_cap = ops.logical_and(has_cap, ops.take(has_img, n_cap_safe, axis=0))
    ok_img = ops.logical_and(has_img, ops.take(has_cap, n_img_safe, axis=0))
    return ops.where(ok_cap, caption_retrieval, zeros), ops.where(ok_img, image_retrieval, zeros)


def sam_loss(similarity, relevance, negative_captions, negative_images, *, tau: float,
             max_margin: float | None = 1.0, pairing: str = "matched"):
    """SAM per batch row [B]; the sum is L_SAM of docs/methods.md#sam (module docstring has the formula).

    Args:
      similarity: [B, B] image-by-caption cosine matrix `s[p, q]`.
      relevance: [B, B], `relevance[p, q]` the relevance (CIDEr-D) of caption q to image p.
      negative_captions: int [B], the negative caption of anchor image p (reference pairing: n0).
      negative_images: int [B], the negative image of anchor caption q (reference pairing: n1).
      tau: > 0, the temperature dividing the relevance gap (reference `metric_div`).
      max_margin: the margin clip (reference: 1.0); None for no clip.
      pairing: "matched" or "reference".
    """
    i2t, t2i = sam_terms(similarity, relevance, negative_captions, negative_images, tau=tau,
                         max_margin=max_margin, pairing=pairing)
    return i2t + t2i


@keras.saving.register_keras_serializable(package="kitm")
class SAMLoss(RetrievalLoss):
    """VSE++ triplet plus the semantic adaptive margin: `triplet_weight * L_triplet + sam_weight * L_SAM`.

    The paper (Table 4) compares keeping the triplet (its default) with SAM alone: that is
    `triplet_weight=1` versus `triplet_weight=0`. Both weights are explicit so that any mix can be
    expressed; a term whose weight is 0 is neither computed nor listed in `term_names`.

    Uses `y_true["relevance"]` ([B, B], relevance[p, q] of caption q to image p) and, when present,
    `y_true["image_index"]` (two samples of one image are not negatives of each other, neither for the
    triplet nor for SAM's sampler).

    Args:
      tau: SAM temperature (> 0); the paper uses 3, 5 or 10 (the reference's default `metric_div` is 3).
      sampling: "hardest", "easiest" or "random" negative for SAM (see the module docstring for the
        reference's inverted names). The default, "hardest", is what the reference's `soft` (the paper's
        best "SN" runs) effectively selects.
      pairing: "matched" or "reference" (module docstring).
      triplet_weight, sam_weight: the weights of the two losses (>= 0, not both 0).
      margin: the fixed triplet margin (VSE++: 0.2).
      max_violation: hardest-negative triplet (True) or sum over negatives.
      max_margin: SAM's margin clip (1.0; None for none).
      seed: for `sampling="random"` (and the warm-up's random draws): None or a Python int, the op seed of
        `samplers.random_negatives` on TensorFlow; on JAX and PyTorch the start of the loss's
        `keras.random.SeedGenerator`s (`samplers.seed_stream`; their state in `non_trainable_variables`).
      hardest_warmup_steps: for this many training steps first, the triplet sums over negatives and the
        `hardest` sampler draws at random (kitm.losses.base, "Hardest-negative warm-up").
      negatives: "local" or "global": under several replicas every replica builds the global batch's [B, B]
        similarity and relevance from the gathered embeddings and relevance rows ([b, B] per replica) and keeps its
        own anchors' terms, so the negatives and margins cover the whole batch (`kitm.losses.global_batch`).
      false_negatives, false_negative_rule, false_negative_threshold, false_negative_margin: the candidates whose
        relevance flags them leave the negatives of the triplet and of SAM's sampler, "mask" and "positive" alike
        (kitm.losses.false_negatives).
    Terms: "triplet_i2t", "triplet_t2i" (image / caption anchors of the triplet), "sam_i2t", "sam_t2i"
    (SAM's image / caption anchors; with `pairing="reference"`, the reference's caption-retrieval and
    image-retrieval terms of row p), each already multiplied by its weight.
    """

    term_names = ("triplet_i2t", "triplet_t2i", "sam_i2t", "sam_t2i")
    has_hardest_negatives = True
    supports_global_negatives = True
    needs_relevance = True
    supports_false_negatives = True

    def __init__(self, tau: float, sampling: str = "hardest", pairing: str = "matched",
                 triplet_weight: float = 1.0, sam_weight: float = 1.0, margin: float = 0.2,
                 max_violation: bool = True, max_margin: float | None = 1.0, seed: int | None = None,
                 name: str = "sam", reduction: str = "sum", dtype=None, hardest_warmup_steps: int = 0,
                 negatives: str = "local", **false_negatives):
        super().__init__(name=name, reduction=reduction, dtype=dtype, hardest_warmup_steps=hardest_warmup_steps,
                         negatives=negatives, **false_negatives)
        self.tau = _check_tau(tau)
        self.sampling = check_sampling(sampling)
        self.pairing = _check_pairing(pairing)
        self.triplet_weight = _check_weight("triplet_weight", triplet_weight)
        self.sam_weight = _check_weight("sam_weight", sam_weight)
        if self.triplet_weight == 0 and self.sam_weight == 0:
            raise ValueError("triplet_weight and sam_weight are both 0: the loss would be identically 0.")
        self.margin = check_margin(margin)
        self.max_violation = bool(max_violation)
        self.max_margin = _check_max_margin(max_margin)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"seed must be None or an int; got {seed!r}.")
        self.seed = seed
        # What the random draws are seeded with: the op seeds on TensorFlow, SeedGenerators elsewhere; the
        # reference pairing's second draw a stream of its own (seed + 1).
        self._seeds = (seed_stream(seed), seed_stream(seed, 1))
        names = []
        if self.triplet_weight:
            names += ["triplet_i2t", "triplet_t2i"]
        if self.sam_weight:
            names += ["sam_i2t", "sam_t2i"]
        self.term_names = tuple(names)

    @property
    def non_trainable_variables(self) -> list:
        """The state of the random draws' `keras.random.SeedGenerator`s on JAX and PyTorch (none on TensorFlow, whose
        draws are op-seeded): what a stateless trainer (JAX) carries through its step, as for
        `AdaptiveMarginTripletLoss`."""
        return [seed.state for seed in self._seeds if isinstance(seed, keras.random.SeedGenerator)]

    def sample(self, similarity, image_index=None, hardest_on=True, negatives=None) -> tuple:
        """The two SAM index vectors for this batch: (negative_captions, negative_images), or (n0, n1)
        for the reference pairing. -1 marks an anchor without a negative. `hardest_on`: see
        `samplers.sample_negatives`. `negatives`: bool (row negatives, column negatives) [B, B] in place of
        `negative_mask` (as `triplet_terms` takes them): caption q for image anchor p where rows[p, q], image p for
        caption anchor q where columns[p, q]."""
        if negatives is None:
            negatives = (negative_mask(similarity, image_index),) * 2
        row_negatives, column_negatives = negatives
        # Caption negatives of image anchors: along each row (the reference's n0 uses s[p, q] - s[p, p],
        # whose order along a row is that of s).
        negative_captions = sample_negatives(similarity, row_negatives, self.sampling, axis=1, seed=self._seeds[0],
                                             hardest_on=hardest_on)
        if self.pairing == "matched":
            negative_images = sample_negatives(similarity, column_negatives, self.sampling, axis=0,
                                               seed=self._seeds[0], hardest_on=hardest_on)
        else:
            # The reference's n1[p]: a caption q, chosen along row p of cost_im[p, q] = s[p, q] - s[q, q] (image p
            # as the negative of caption q: the columns' relation).
            cost_im = similarity - ops.expand_dims(ops.diagonal(similarity), 0)
            negative_images = sample_negatives(cost_im, column_negatives, self.sampling, axis=1, seed=self._seeds[1],
                                               hardest_on=hardest_on)
        return negative_captions.indices, negative_images.indices

    def compute_terms(self, y_true, y_pred):
        return self.whole_batch_terms(y_true, y_pred, self._terms)

    def _terms(self, y_true, y_pred):
        similarity = self.similarity(y_pred)
        image_index = self.optional(y_true, "image_index")
        terms = {}
        hardest_on = self.hardest_negatives_on()
        negatives = self.filtered_negatives(y_true, similarity, image_index)
        if self.triplet_weight:
            i2t, t2i = triplet_terms(similarity, self.margin, self.max_violation and hardest_on, image_index,
                                     negatives)
            terms["triplet_i2t"] = self.triplet_weight * i2t
            terms["triplet_t2i"] = self.triplet_weight * t2i
        if self.sam_weight:
            relevance = self.optional(y_true, "relevance")
            if relevance is None:
                raise ValueError("SAMLoss needs y_true['relevance'] ([B, B], relevance of caption q to image p).")
            negative_captions, negative_images = self.sample(similarity, image_index, hardest_on, negatives)
            i2t, t2i = sam_terms(similarity, relevance, negative_captions, negative_images, tau=self.tau,
                                 max_margin=self.max_margin, pairing=self.pairing)
            terms["sam_i2t"] = self.sam_weight * i2t
            terms["sam_t2i"] = self.sam_weight * t2i
        return terms

    def get_config(self):
        config = super().get_config()
        config.update(tau=self.tau, sampling=self.sampling, pairing=self.pairing,
                      triplet_weight=self.triplet_weight, sam_weight=self.sam_weight, margin=self.margin,
                      max_violation=self.max_violation, max_margin=self.max_margin, seed=self.seed)
        return config

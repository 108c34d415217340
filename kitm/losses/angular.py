"""Angular loss (Wang et al., ICCV 2017) in N-pair symmetric form, and the semantic-neighbourhood loss
of Thomas & Kovashka (ECCV 2020).

docs/methods.md#angular. Two forms (`form=`), angle = 45 degrees by default:

- `"npair"` (the default; Wang et al.'s N-pair angular loss, what Thomas & Kovashka's code trains), over the
  in-batch negatives n of anchor a with positive p:

      L_ang(a, p) = log( 1 + sum_n exp( 4 tan^2(angle) (a + p)^T n - 2 (1 + tan^2(angle)) a^T p ) )

  At collapse (every embedding the same unit vector) it is log(1 + N e^4) at 45 degrees, far from its
  minimum, so the loss pushes the embeddings apart.
- `"hinge"` (Thomas & Kovashka, Eq. 2 as printed), with C = (a + p) / 2, summed over the negatives (Eq. 3):

      L_ang(a, p, n) = [ |a - p|^2 - 4 tan^2(angle) |n - C|^2 ]+

  Degenerate on its own with unit embeddings: when all embeddings are the same vector every term is 0, so
  collapse is a global minimum (measured: the neighbourhood flagfile on the synthetic world ended at chance
  with its loss at 0.015). Kept as an option for comparison with the paper's equation, never the default.

Symmetric (Eq. 4): image -> text plus text -> image.

The neighbourhood loss (Eq. 8) adds two within-modality terms built from a semantic neighbour i' of
each pair i (drawn by the input pipeline from the precomputed k = 200 neighbours and given as its
in-batch row `y_true["neighbor_position"][i]`, -1 when the batch holds none):

    L = L_ang^{NP+SYM} + alpha * L_text^{NP} + beta * L_img^{NP},
    L_text(i) = sum_j L_ang(y_i, y_i', y_j),   L_img(i) = sum_j L_ang(x_i, x_i', x_j)

with (alpha, beta) = (0.2, 0.3). Anchors without a neighbour contribute 0 to L_text and L_img. The
negatives j of anchor i are the batch rows other than i (Thomas & Kovashka: "j != i"); kitm also leaves out the
neighbour i' itself (it is the positive of the triplet; at 45 degrees its term is identically 0 anyway)
and, with `y_true["image_index"]`, every sample of the image of i or of i' (another caption of the same
picture is not a negative), as `kitm.ops.similarity.negative_mask` does for the cross-modal terms.

`base="triplet"` gives the paper's triplet-based variant (Trip+NP+Sym, Eq. 1 on squared Euclidean
distances, `[ |a - p|^2 - |a - n|^2 + m ]+` summed over negatives) with (alpha, beta) = (0.3, 0.1).
The "Img NNs" variant differs only in where the neighbours come from (the image feature space instead
of the text space): the pipeline fills `neighbor_position` from the records' `image_neighbors` rows
(`PipelineConfig.neighbor_space="image"`, the launcher's `--neighbor_space=image`; the rows are built by
`kitm.relevance.image_features`), and `neighbor_space` records it in the config.

Example (hand-computed, angle 45 degrees so 4 tan^2 = 4 and 2 (1 + tan^2) = 4): a = (1, 0), p = (0, 1).
Hinge: n = (-1, 0): |a - p|^2 = 2, C = (0.5, 0.5), |n - C|^2 = 1.5^2 + 0.5^2 = 2.5, L = [2 - 4 * 2.5]+ = 0;
with n = (0.6, 0.8): |n - C|^2 = 0.01 + 0.09 = 0.1, L = [2 - 0.4]+ = 1.6.
N-pair with the two negatives n1 = (-1, 0), n2 = (0.6, 0.8): a^T p = 0, (a + p)^T n1 = -1, (a + p)^T n2 = 1.4,
L = log(1 + e^-4 + e^5.6) = 5.6038...
"""

from __future__ import annotations

import math
from typing import Mapping

import keras
import tensorflow as tf

from kitm.losses.base import RetrievalLoss, check_margin
from kitm.ops import similarity as sim_ops

BASES = ("angular", "triplet")
FORMS = ("npair", "hinge")
NEIGHBOR_SPACES = ("text", "image")
DEFAULT_WEIGHTS = {"angular": (0.2, 0.3), "triplet": (0.3, 0.1)}

__all__ = [
    "angular_loss",
    "squared_distance_triplet_loss",
    "neighbor_coverage",
    "AngularLoss",
    "NeighborhoodAngularLoss",
]


def _check_angle(angle_degrees) -> float:
    angle = float(angle_degrees)
    if not 0 < angle < 90:
        raise ValueError(f"angle_degrees must be in (0, 90) (tan must be finite and positive); got {angle}.")
    return angle


def _embeddings(name: str, value) -> tf.Tensor:
    value = tf.convert_to_tensor(value)
    if value.shape.rank != 2:
        raise ValueError(f"{name} must be [B, D] embeddings; got shape {value.shape}.")
    return value


def _pool_and_mask(anchors, positives, negatives, negative_mask):
    """The negative pool [N, D] and the bool [B, N] mask of each anchor's negatives."""
    anchors = _embeddings("anchors", anchors)
    positives = _embeddings("positives", tf.cast(positives, anchors.dtype))
    if not anchors.shape.is_compatible_with(positives.shape):
        raise ValueError(f"anchors and positives must have the same shape; got {anchors.shape} and {positives.shape}.")
    if negatives is None:
        pool = positives
        if negative_mask is None:
            b = tf.shape(anchors)[0]
            negative_mask = tf.logical_not(tf.eye(b, dtype=tf.bool))
    else:
        pool = _embeddings("negatives", tf.cast(negatives, anchors.dtype))
        if not pool.shape[1:].is_compatible_with(anchors.shape[1:]):
            raise ValueError(f"negatives must be [N, D] with D = {anchors.shape[1]}; got {pool.shape}.")
    if negative_mask is None:
        negative_mask = tf.ones([tf.shape(anchors)[0], tf.shape(pool)[0]], tf.bool)
    negative_mask = tf.convert_to_tensor(negative_mask)
    if negative_mask.dtype != tf.bool or negative_mask.shape.rank != 2:
        raise ValueError(f"negative_mask must be a bool [B, N] matrix; got {negative_mask.dtype.name} "
                         f"{negative_mask.shape}.")
    expected = tf.TensorShape([anchors.shape[0], pool.shape[0]])
    if not negative_mask.shape.is_compatible_with(expected):
        raise ValueError(f"negative_mask must be [B, N] = {expected}; got {negative_mask.shape}.")
    return anchors, positives, pool, negative_mask


def _sum_over_negatives(values, negative_mask):
    return tf.reduce_sum(tf.where(negative_mask, values, tf.zeros_like(values)), axis=1)


def _check_form(form: str) -> str:
    if form not in FORMS:
        raise ValueError(f"form must be one of {FORMS} (npair: log-sum-exp, hinge: Thomas & Kovashka, Eq. 2); got {form!r}.")
    return form


def angular_loss(anchors, positives, negatives=None, *, angle_degrees: float = 45.0,
                 negative_mask=None, form: str = "npair") -> tf.Tensor:
    """N-pair angular loss per anchor [B] (Wang et al. 2017; Thomas & Kovashka, Eqs. 2-3; docs/methods.md#angular).

    `form="npair"` (default): `log(1 + sum_j exp(4 tan^2 (a_i + p_i)^T n_j - 2 (1 + tan^2) a_i^T p_i))`;
    `form="hinge"`: `sum_j [ |a_i - p_i|^2 - 4 tan^2(angle) |n_j - C_i|^2 ]+` with C_i = (a_i + p_i) / 2
    (collapse is a global minimum of the hinge form: module docstring). An anchor without negatives gives 0.

    Args:
      anchors, positives: [B, D]; row i is a pair.
      negatives: [N, D] pool; None uses the other rows of `positives` (j != i).
      angle_degrees: the angle bound, in (0, 90) degrees.
      negative_mask: optional bool [B, N], True where pool item j is a negative of anchor i; default
        every j != i when `negatives` is None, every pool item otherwise.
      form: "npair" or "hinge".
    """
    tan2 = math.tan(math.radians(_check_angle(angle_degrees))) ** 2
    form = _check_form(form)
    anchors, positives, pool, negative_mask = _pool_and_mask(anchors, positives, negatives, negative_mask)
    if form == "npair":
        logits = (4 * tan2 * tf.matmul(anchors + positives, pool, transpose_b=True)
                  - 2 * (1 + tan2) * tf.reduce_sum(anchors * positives, axis=1)[:, None])
        # log(1 + sum exp) as a log-sum-exp with a 0 logit; masked entries get a finite floor (not -inf) so
        # that neither the value nor the gradient can turn NaN when an anchor has no negative.
        floor = tf.fill(tf.shape(logits), tf.constant(-1e9, logits.dtype))
        logits = tf.concat([tf.zeros_like(logits[:, :1]), tf.where(negative_mask, logits, floor)], axis=1)
        return tf.reduce_logsumexp(logits, axis=1)
    pair = tf.reduce_sum(tf.square(anchors - positives), axis=1)  # |a - p|^2, [B]
    center = (anchors + positives) / 2
    # |n_j - C_i|^2 expanded, so that no [B, N, D] tensor is formed.
    to_center = (tf.reduce_sum(tf.square(pool), axis=1)[None, :]
                 - 2 * tf.matmul(center, pool, transpose_b=True)
                 + tf.reduce_sum(tf.square(center), axis=1)[:, None])
    hinge = tf.nn.relu(pair[:, None] - 4 * tan2 * to_center)
    return _sum_over_negatives(hinge, negative_mask)


def squared_distance_triplet_loss(anchors, positives, negatives=None, *, margin: float = 0.2,
                                  negative_mask=None) -> tf.Tensor:
    """N-pair triplet loss on squared Euclidean distances per anchor [B] (Thomas & Kovashka, Eq. 1, N-pairs):
    `sum_j [ |a_i - p_i|^2 - |a_i - n_j|^2 + m ]+`. Arguments as in `angular_loss`."""
    margin = check_margin(margin)
    anchors, positives, pool, negative_mask = _pool_and_mask(anchors, positives, negatives, negative_mask)
    pair = tf.reduce_sum(tf.square(anchors - positives), axis=1)
    to_negative = (tf.reduce_sum(tf.square(anchors), axis=1)[:, None]
                   - 2 * tf.matmul(anchors, pool, transpose_b=True)
                   + tf.reduce_sum(tf.square(pool), axis=1)[None, :])
    hinge = tf.nn.relu(pair[:, None] - to_negative + margin)
    return _sum_over_negatives(hinge, negative_mask)


def neighbor_coverage(y_true_or_positions) -> tf.Tensor:
    """Share of anchors whose semantic neighbour is in the batch (`neighbor_position >= 0`), float32 scalar.

    Accepts `y_true` (a dict with "neighbor_position") or the [B] positions; 0 for an empty batch. A
    metric the model can log next to the loss terms (a low share means L_text / L_img see few pairs).
    """
    positions = y_true_or_positions
    if isinstance(positions, Mapping):
        positions = positions.get("neighbor_position")
        if positions is None:
            raise ValueError("neighbor_coverage needs y_true['neighbor_position'] ([B] int, -1 = no neighbour).")
    positions = tf.reshape(tf.convert_to_tensor(positions), [-1])
    has = tf.cast(positions >= 0, tf.float32)
    return tf.math.divide_no_nan(tf.reduce_sum(has), tf.cast(tf.size(has), tf.float32))


def _image_and_text(loss: RetrievalLoss, y_pred) -> tuple[tf.Tensor, tf.Tensor]:
    """y_pred's embeddings as tensors of one dtype, after the base class's shape checks."""
    if isinstance(y_pred, Mapping) and "image" in y_pred and "text" in y_pred:
        image = tf.convert_to_tensor(y_pred["image"])
        y_pred = {"image": image, "text": tf.cast(y_pred["text"], image.dtype)}
    loss.similarity(y_pred)  # raises the shared error for a malformed y_pred
    return y_pred["image"], y_pred["text"]


@keras.saving.register_keras_serializable(package="kitm")
class AngularLoss(RetrievalLoss):
    """Symmetric N-pair angular loss `L_ang^{NP+SYM}` (Thomas & Kovashka, Eq. 4): image -> text plus text -> image.

    Negatives of pair i are the other rows, except samples of the same image when
    `y_true["image_index"]` is given. `form`: "npair" (log-sum-exp, default) or "hinge" (Thomas & Kovashka, Eq. 2;
    collapse is its global minimum, module docstring). Terms: "i2t" (image anchors, caption negatives) and
    "t2i" (caption anchors, image negatives).
    """

    term_names = ("i2t", "t2i")

    def __init__(self, angle_degrees: float = 45.0, name: str = "angular", reduction: str = "sum", dtype=None,
                 form: str = "npair"):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        self.angle_degrees = _check_angle(angle_degrees)
        self.form = _check_form(form)

    def compute_terms(self, y_true, y_pred):
        image, text = _image_and_text(self, y_pred)
        is_negative = sim_ops.negative_mask(tf.matmul(image, text, transpose_b=True),
                                            self.optional(y_true, "image_index"))
        return {
            "i2t": angular_loss(image, text, text, angle_degrees=self.angle_degrees, negative_mask=is_negative,
                                form=self.form),
            "t2i": angular_loss(text, image, image, angle_degrees=self.angle_degrees,
                                negative_mask=tf.transpose(is_negative), form=self.form),
        }

    def get_config(self):
        config = super().get_config()
        config.update(angle_degrees=self.angle_degrees, form=self.form)
        return config


@keras.saving.register_keras_serializable(package="kitm")
class NeighborhoodAngularLoss(RetrievalLoss):
    """`L = L^{NP+SYM} + alpha L_text^{NP} + beta L_img^{NP}` (Thomas & Kovashka, Eq. 8; module docstring).

    Uses `y_true["neighbor_position"]` (int [B], in-batch row of a semantic neighbour of sample i, -1
    when none) and, when present, `y_true["image_index"]`.

    Args:
      alpha, beta: weights of L_text and L_img; None gives the paper's (0.2, 0.3) for `base="angular"`
        and (0.3, 0.1) for `base="triplet"`.
      base: "angular" (Wang et al., `angle_degrees`, in the `form` given) or "triplet" (squared-distance
        triplet with `margin`), used for all three parts.
      form: the angular base's form, "npair" (log-sum-exp, default) or "hinge" (module docstring).
      angle_degrees: angle bound of the angular form (45).
      margin: margin of the triplet form (0.2).
      neighbor_space: "text" (the paper's main method: neighbours in a text-only space) or "image" (its
        "Img NNs" variant); the computation is the same, this records where the positions came from.
    Terms: "i2t", "t2i" (cross-modal), "text_neighbors" (alpha * L_text), "image_neighbors" (beta * L_img).
    """

    term_names = ("i2t", "t2i", "text_neighbors", "image_neighbors")
    uses_neighbors = True  # needs y_true["neighbor_position"]: the launcher turns on neighbour-aware batching

    def __init__(self, alpha: float | None = None, beta: float | None = None, base: str = "angular",
                 angle_degrees: float = 45.0, margin: float = 0.2, neighbor_space: str = "text",
                 name: str = "neighborhood_angular", reduction: str = "sum", dtype=None, form: str = "npair"):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        if base not in BASES:
            raise ValueError(f"base must be one of {BASES}; got {base!r}.")
        if neighbor_space not in NEIGHBOR_SPACES:
            raise ValueError(f"neighbor_space must be one of {NEIGHBOR_SPACES}; got {neighbor_space!r}.")
        self.base = base
        self.neighbor_space = neighbor_space
        default_alpha, default_beta = DEFAULT_WEIGHTS[base]
        self.alpha = default_alpha if alpha is None else float(alpha)
        self.beta = default_beta if beta is None else float(beta)
        for weight_name, weight in (("alpha", self.alpha), ("beta", self.beta)):
            if not weight >= 0:
                raise ValueError(f"{weight_name} must be >= 0; got {weight}.")
        self.angle_degrees = _check_angle(angle_degrees)
        self.form = _check_form(form)
        self.margin = check_margin(margin)

    def _loss(self, anchors, positives, negatives, negative_mask):
        if self.base == "angular":
            return angular_loss(anchors, positives, negatives, angle_degrees=self.angle_degrees,
                                negative_mask=negative_mask, form=self.form)
        return squared_distance_triplet_loss(anchors, positives, negatives, margin=self.margin,
                                             negative_mask=negative_mask)

    @staticmethod
    def neighbor_coverage(y_true) -> tf.Tensor:
        """Share of anchors with an in-batch neighbour (see the module function `neighbor_coverage`)."""
        return neighbor_coverage(y_true)

    def compute_terms(self, y_true, y_pred):
        image, text = _image_and_text(self, y_pred)
        b = tf.shape(image)[0]
        image_index = self.optional(y_true, "image_index")
        is_negative = sim_ops.negative_mask(tf.matmul(image, text, transpose_b=True), image_index)
        terms = {
            "i2t": self._loss(image, text, text, is_negative),
            "t2i": self._loss(text, image, image, tf.transpose(is_negative)),
        }

        positions = self.optional(y_true, "neighbor_position")
        if positions is None:
            raise ValueError("NeighborhoodAngularLoss needs y_true['neighbor_position'] ([B] int, the in-batch "
                             "row of a semantic neighbour, -1 when none).")
        positions = tf.cast(tf.reshape(positions, [-1]), tf.int32)
        check = tf.debugging.assert_less(positions, b, message="neighbor_position must be < B (an in-batch row)")
        with tf.control_dependencies([check]):
            positions = tf.identity(positions)
        has_neighbor = positions >= 0
        rows = tf.range(b)
        neighbor = tf.where(has_neighbor, positions, rows)  # placeholder for anchors without a neighbour
        columns = rows[None, :]
        # Negatives of anchor i: not i, not its neighbour i', and not a sample of the image of i or i'.
        within = tf.logical_and(tf.not_equal(columns, rows[:, None]), tf.not_equal(columns, neighbor[:, None]))
        if image_index is not None:
            image_index = tf.reshape(image_index, [-1])
            same = sim_ops.same_image_mask(image_index)
            within = tf.logical_and(within, tf.logical_not(tf.logical_or(same, tf.gather(same, neighbor))))
        within = tf.logical_and(within, has_neighbor[:, None])
        terms["text_neighbors"] = self.alpha * self._loss(text, tf.gather(text, neighbor), text, within)
        terms["image_neighbors"] = self.beta * self._loss(image, tf.gather(image, neighbor), image, within)
        return terms

    def get_config(self):
        config = super().get_config()
        config.update(alpha=self.alpha, beta=self.beta, base=self.base, angle_degrees=self.angle_degrees,
                      margin=self.margin, neighbor_space=self.neighbor_space, form=self.form)
        return config

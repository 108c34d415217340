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
from keras import ops

from kitm.distribute.checks import check_index_range
from kitm.losses.base import RetrievalLoss, check_margin, shapes_compatible
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


def _embeddings(name: str, value):
    value = ops.convert_to_tensor(value)
    if len(value.shape) != 2:
        raise ValueError(f"{name} must be [B, D] embeddings; got shape {tuple(value.shape)}.")
    return value


def _dot(rows, columns):
    """[B, N] dot products of two sets of rows (an einsum: the inputs' dtype on every backend, kitm.ops.similarity)."""
    return ops.einsum("id,jd->ij", rows, columns)


def _pool_and_mask(anchors, positives, negatives, negative_mask):
    """The negative pool [N, D] and the bool [B, N] mask of each anchor's negatives."""
    anchors = _embeddings("anchors", anchors)
    positives = _embeddings("positives", ops.cast(positives, anchors.dtype))
    if not shapes_compatible(tuple(anchors.shape), tuple(positives.shape)):
        raise ValueError(f"anchors and positives must have the same shape; got {tuple(anchors.shape)} and "
                         f"{tuple(positives.shape)}.")
    if negatives is None:
        pool = positives
        if negative_mask is None:
            negative_mask = ops.logical_not(sim_ops.diagonal_mask(ops.shape(anchors)[0], ops.shape(anchors)[0]))
    else:
        pool = _embeddings("negatives", ops.cast(negatives, anchors.dtype))
        if not shapes_compatible(tuple(pool.shape[1:]), tuple(anchors.shape[1:])):
            raise ValueError(f"negatives must be [N, D] with D = {anchors.shape[1]}; got {tuple(pool.shape)}.")
    if negative_mask is None:
        negative_mask = ops.ones((ops.shape(anchors)[0], ops.shape(pool)[0]), dtype="bool")
    negative_mask = ops.convert_to_tensor(negative_mask)
    if keras.backend.standardize_dtype(negative_mask.dtype) != "bool" or len(negative_mask.shape) != 2:
        raise ValueError(f"negative_mask must be a bool [B, N] matrix; got "
                         f"{keras.backend.standardize_dtype(negative_mask.dtype)} {tuple(negative_mask.shape)}.")
    expected = (anchors.shape[0], pool.shape[0])
    if not shapes_compatible(tuple(negative_mask.shape), expected):
        raise ValueError(f"negative_mask must be [B, N] = {expected}; got {tuple(negative_mask.shape)}.")
    return anchors, positives, pool, negative_mask


def _sum_over_negatives(values, negative_mask):
    return ops.sum(ops.where(negative_mask, values, ops.zeros_like(values)), axis=1)


def _check_form(form: str) -> str:
    if form not in FORMS:
        raise ValueError(f"form must be one of {FORMS} (npair: log-sum-exp, hinge: Thomas & Kovashka, Eq. 2); got {form!r}.")
    return form


def angular_loss(anchors, positives, negatives=None, *, angle_degrees: float = 45.0,
                 negative_mask=None, form: str = "npair"):
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
        logits = (4 * tan2 * _dot(anchors + positives, pool)
                  - 2 * (1 + tan2) * ops.sum(anchors * positives, axis=1)[:, None])
        # log(1 + sum exp) as a log-sum-exp with a 0 logit; masked entries get a finite floor (not -inf) so
        # that neither the value nor the gradient can turn NaN when an anchor has no negative.
        floor = ops.full_like(logits, -1e9)
        logits = ops.concatenate([ops.zeros_like(logits[:, :1]), ops.where(negative_mask, logits, floor)], axis=1)
        return ops.logsumexp(logits, axis=1)
    pair = ops.sum(ops.square(anchors - positives), axis=1)  # |a - p|^2, [B]
    center = (anchors + positives) / 2
    # |n_j - C_i|^2 expanded, so that no [B, N, D] tensor is formed.
    to_center = (ops.sum(ops.square(pool), axis=1)[None, :]
                 - 2 * _dot(center, pool)
                 + ops.sum(ops.square(center), axis=1)[:, None])
    hinge = ops.relu(pair[:, None] - 4 * tan2 * to_center)
    return _sum_over_negatives(hinge, negative_mask)


def squared_distance_triplet_loss(anchors, positives, negatives=None, *, margin: float = 0.2,
                                  negative_mask=None):
    """N-pair triplet loss on squared Euclidean distances per anchor [B] (Thomas & Kovashka, Eq. 1, N-pairs):
    `sum_j [ |a_i - p_i|^2 - |a_i - n_j|^2 + m ]+`. Arguments as in `angular_loss`."""
    margin = check_margin(margin)
    anchors, positives, pool, negative_mask = _pool_and_mask(anchors, positives, negatives, negative_mask)
    pair = ops.sum(ops.square(anchors - positives), axis=1)
    to_negative = (ops.sum(ops.square(anchors), axis=1)[:, None]
                   - 2 * _dot(anchors, pool)
                   + ops.sum(ops.square(pool), axis=1)[None, :])
    hinge = ops.relu(pair[:, None] - to_negative + margin)
    return _sum_over_negatives(hinge, negative_mask)


def neighbor_coverage(y_true_or_positions):
    """Share of anchors whose semantic neighbour is in the batch (`neighbor_position >= 0`), float32 scalar.

    Accepts `y_true` (a dict with "neighbor_position") or the [B] positions; 0 for an empty batch. A
    metric the model can log next to the loss terms (a low share means L_text / L_img see few pairs).
    """
    positions = y_true_or_positions
    if isinstance(positions, Mapping):
        positions = positions.get("neighbor_position")
        if positions is None:
            raise ValueError("neighbor_coverage needs y_true['neighbor_position'] ([B] int, -1 = no neighbour).")
    positions = ops.reshape(ops.convert_to_tensor(positions), (-1,))
    has = ops.cast(positions >= 0, "float32")
    return ops.sum(has) / ops.maximum(ops.cast(ops.size(has), "float32"), 1.0)


def _checked_positions(positions, batch_size):
    """`neighbor_position` as int32 [B], refused when a row is >= B. On TensorFlow an assertion in the graph (the
    step stops with the message); on the other backends the check runs where the values are concrete (eager), and
    a traced step cannot assert on data (JAX), so there an out-of-range row is caught by the pipeline's own
    construction (kitm.data.neighbor_batching writes rows < B)."""
    positions = ops.cast(ops.reshape(positions, (-1,)), "int32")
    return check_index_range(positions, batch_size, upper_message="neighbor_position must be < B (an in-batch row)"
                             ).values


def _image_and_text(loss: RetrievalLoss, y_pred):
    """y_pred's embeddings as tensors of one dtype, after the base class's shape checks."""
    if isinstance(y_pred, Mapping) and "image" in y_pred and "text" in y_pred:
        image = ops.convert_to_tensor(y_pred["image"])
        y_pred = {"image": image, "text": ops.cast(y_pred["text"], image.dtype)}
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
        is_negative = sim_ops.negative_mask(_dot(image, text), self.optional(y_true, "image_index"))
        return {
            "i2t": angular_loss(image, text, text, angle_degrees=self.angle_degrees, negative_mask=is_negative,
                                form=self.form),
            "t2i": angular_loss(text, image, image, angle_degrees=self.angle_degrees,
                                negative_mask=ops.transpose(is_negative), form=self.form),
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
    def neighbor_coverage(y_true):
        """Share of anchors with an in-batch neighbour (see the module function `neighbor_coverage`)."""
        return neighbor_coverage(y_true)

    def compute_terms(self, y_true, y_pred):
        image, text = _image_and_text(self, y_pred)
        b = ops.shape(image)[0]
        image_index = self.optional(y_true, "image_index")
        is_negative = sim_ops.negative_mask(_dot(image, text), image_index)
        terms = {
            "i2t": self._loss(image, text, text, is_negative),
            "t2i": self._loss(text, image, image, ops.transpose(is_negative)),
        }

        positions = self.optional(y_true, "neighbor_position")
        if positions is None:
            raise ValueError("NeighborhoodAngularLoss needs y_true['neighbor_position'] ([B] int, the in-batch "
                             "row of a semantic neighbour, -1 when none).")
        positions = _checked_positions(positions, b)
        has_neighbor = positions >= 0
        rows = ops.arange(b, dtype="int32")
        neighbor = ops.where(has_neighbor, positions, rows)  # placeholder for anchors without a neighbour
        columns = rows[None, :]
        # Negatives of anchor i: not i, not its neighbour i', and not a sample of the image of i or i'.
        within = ops.logical_and(ops.not_equal(columns, rows[:, None]), ops.not_equal(columns, neighbor[:, None]))
        if image_index is not None:
            image_index = ops.reshape(image_index, (-1,))
            same = sim_ops.same_image_mask(image_index)
            within = ops.logical_and(within, ops.logical_not(ops.logical_or(same, ops.take(same, neighbor, axis=0))))
        within = ops.logical_and(within, has_neighbor[:, None])
        terms["text_neighbors"] = self.alpha * self._loss(text, ops.take(text, neighbor, axis=0), text, within)
        terms["image_neighbors"] = self.beta * self._loss(image, ops.take(image, neighbor, axis=0), image, within)
        return terms

    def get_config(self):
        config = super().get_config()
        config.update(alpha=self.alpha, beta=self.beta, base=self.base, angle_degrees=self.angle_degrees,
                      margin=self.margin, neighbor_space=self.neighbor_space, form=self.form)
        return config

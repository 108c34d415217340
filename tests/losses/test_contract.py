"""The loss contract (docs/library.md, kitm.losses.base): one harness that every kitm loss passes.

`CASES` says how to build each loss and which plain function it wraps; `test_every_loss_class_is_in_the_registry`
walks kitm (LOSS_PACKAGES) for `RetrievalLoss` subclasses, so a new loss fails here until it has a case. Each case
is checked for:

1. per-row values: `call` returns [B], the sum of `compute_terms` (keys = `term_names`), equal to the plain
   function kitm.losses exports where one exists, and reduced by `reduce_per_row` as the `reduction` says it is
   what `loss(y_true, y_pred)` returns ("sum", "sum_over_batch_size", "none");
2. `get_config`: JSON-safe, `from_config` and `keras.saving.(de)serialize_keras_object` / `keras.losses.(de)serialize`
   give the same config and (with the loss-owned state copied: centres, heads, margins, thresholds) the same value;
3. gradients w.r.t. both embeddings and the loss-owned trainable variables are finite everywhere, and move the
   embeddings along the unit sphere on random inputs, on ties (equal rows, a pair at distance 0, tied relevance) and
   near the collapse point; at the collapse point itself (every embedding the same vector) only the losses with
   parameters of their own that break its symmetry (centres, heads) do: for the others (a contrastive loss's
   temperature scales every similarity alike) it is a stationary point on the sphere (kitm.losses.base, the
   hardest-negative warm-up), which the test pins down;
4. under MirroredStrategy on 2 logical CPUs (a fresh process: logical devices are set before TensorFlow
   starts), what `kitm.losses.base.scale_for_replicas` promises: each replica's value and embedding gradients are
   those of the same loss on one device and that replica's batch, divided by the number of replicas, so the
   all-reduced (summed) gradient of the loss-owned variables is the mean over replicas of the one-device gradients.
   A replica never sees the other replica's rows, so for losses with in-batch negatives the global-batch value is
   not promised; for row-separable losses (each row's value depends only on its own row) it is: the replicas'
   values add up to the global-batch value divided by the number of replicas (reduction "sum"). The centre
   gradient of the centre losses equals the one-device global-batch gradient (kitm.losses.centers, "Centre
   learning rate"); `QuantizedCenterLoss` keeps it since its repulsion (one term per batch) is split over the replicas.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import pathlib
import pkgutil
import textwrap
from typing import Callable

import numpy as np
import pytest
import tensorflow as tf

import kitm  # noqa: F401  (selects the TensorFlow backend)
import keras
from kitm.losses import (AdaptiveLadderLoss, AdaptiveMarginTripletLoss, AngularLoss, ImageIndexCrossEntropy,
                         LadderLoss, NeighborhoodAngularLoss, QuantizedCenterLoss, RetrievalLoss, SAMLoss,
                         SemanticCenterLoss, TripletLoss, adaptive_levels, adaptive_margin_triplet_loss, angular_loss,
                         index_cross_entropy_terms, ladder_levels, ladder_loss, quantized_center_loss, reduce_per_row,
                         sam_loss, samplers, semantic_center_loss, triplet_loss)
from kitm.layers import SoftmaxQuantizedCenters
from kitm.losses.adaptive_margin import pairwise_l2_distances
from kitm.ops.similarity import negative_mask

from kitm.losses import ReclusterableLadderLoss
from kitm.losses import (GradedInfoNCELoss, InfoNCELoss, SigLIPLoss, graded_info_nce_loss, info_nce_loss,
                         siglip_loss)

B, D = 8, 6          # one-device batch and embedding size
LOCAL_B = 6          # per-replica batch of the MirroredStrategy check (global 12)
NUM_IMAGES = 10      # image indices are in [0, NUM_IMAGES)
REPLICAS = 2
REDUCTIONS = ("sum", "sum_over_batch_size", "none")


# ------------------------------------------------------------------------------------------------
# Inputs
# ------------------------------------------------------------------------------------------------

def _unit(rng, rows, dim=D):
    x = rng.normal(size=(rows, dim))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def make_inputs(kind: str = "random", b: int = B, seed: int = 0):
    """(y_true, y_pred) with every y_true key some kitm loss reads; `kind` is "random", "collapse" or "ties"."""
    rng = np.random.default_rng(seed)
    image, text = _unit(rng, b), _unit(rng, b)
    relevance = rng.uniform(size=(b, b)).astype(np.float32)
    if kind in ("collapse", "near_collapse"):  # every embedding the same unit vector (or within 0.01 of it)
        image = text = np.tile(_unit(rng, 1), (b, 1))
        if kind == "near_collapse":
            image, text = (x + 0.01 * rng.normal(size=x.shape) for x in (image, text))
            image, text = (x / np.linalg.norm(x, axis=1, keepdims=True) for x in (image, text))
        image, text = image.astype(np.float32), text.astype(np.float32)
    elif kind == "ties":
        image[1] = image[0]          # two equal images: tied similarities, tied hardest negatives
        text[3] = text[2]            # two equal captions
        text[4] = text[5] = image[4]  # a pair at distance 0 and a negative at distance 0 (active hinges at sqrt(0))
        relevance = np.round(relevance * 2) / 2  # three distinct relevance values, many ties
    # Two samples of image 0 (they are positives of each other, not negatives), the rest distinct.
    image_index = np.concatenate([[0, 0], rng.choice(np.arange(1, NUM_IMAGES), size=b - 2, replace=False)])
    neighbor_position = (np.arange(b) + 1) % b  # the next row is the semantic neighbour ...
    neighbor_position[-1] = -1                  # ... except the last row, which has none in the batch
    y_true = {"relevance": relevance, "image_index": image_index.astype(np.int32),
              "neighbor_position": neighbor_position.astype(np.int32)}
    return y_true, {"image": image.copy(), "text": text.copy()}


# ------------------------------------------------------------------------------------------------
# The registry
# ------------------------------------------------------------------------------------------------

def _similarity(y_pred):
    return tf.matmul(tf.convert_to_tensor(y_pred["image"]), tf.convert_to_tensor(y_pred["text"]), transpose_b=True)


def _plain_triplet(loss, y_true, y_pred):
    return triplet_loss(_similarity(y_pred), loss.margin, loss.max_violation, y_true["image_index"])


def _plain_sam(loss, y_true, y_pred):
    similarity = _similarity(y_pred)
    negative_captions, negative_images = loss.sample(similarity, y_true["image_index"])
    return (loss.triplet_weight * triplet_loss(similarity, loss.margin, loss.max_violation, y_true["image_index"])
            + loss.sam_weight * sam_loss(similarity, y_true["relevance"], negative_captions, negative_images,
                                         tau=loss.tau, max_margin=loss.max_margin, pairing=loss.pairing))


def _plain_ladder(loss, y_true, y_pred):
    levels = ladder_levels(y_true["relevance"], loss.thresholds, image_index=y_true["image_index"])
    return ladder_loss(_similarity(y_pred), levels, levels, margins=loss.margins, betas=loss.betas,
                       cumulative=loss.cumulative)


def _plain_adaptive_ladder(loss, y_true, y_pred):
    row_levels, column_levels = adaptive_levels(y_true["relevance"], *loss.level_bounds,
                                                image_index=y_true["image_index"], lloyd_runs=loss.lloyd_runs,
                                                jit_compile=loss.jit_compile)
    levels = loss.level_bounds[1]
    betas = (1.0,) + tuple(1.0 / 2 ** l for l in range(2, levels + 1))  # the documented default betas
    return ladder_loss(_similarity(y_pred), row_levels, column_levels, margins=loss.margins, betas=betas,
                       cumulative=loss.cumulative)


def _plain_angular(loss, y_true, y_pred):
    image, text = y_pred["image"], y_pred["text"]
    negatives = negative_mask(_similarity(y_pred), y_true["image_index"])
    return (angular_loss(image, text, text, angle_degrees=loss.angle_degrees, negative_mask=negatives,
                         form=loss.form)
            + angular_loss(text, image, image, angle_degrees=loss.angle_degrees,
                           negative_mask=tf.transpose(negatives), form=loss.form))


def _plain_semantic_centers(loss, y_true, y_pred):
    centers = tf.gather(tf.convert_to_tensor(loss.centers), y_true["image_index"])
    return semantic_center_loss(y_pred["image"], y_pred["text"], centers, delta=loss.delta)


def _plain_quantized_centers(loss, y_true, y_pred):
    image, text = tf.convert_to_tensor(y_pred["image"]), tf.convert_to_tensor(y_pred["text"])
    return quantized_center_loss(image, text, loss.quantizer(image), loss.quantizer(text),
                                 tf.convert_to_tensor(loss.centers), delta=loss.delta,
                                 repulsion_weight=loss.repulsion_weight)


def _plain_index_cross_entropy(loss, y_true, y_pred):
    image_logits, text_logits = loss.heads(tf.convert_to_tensor(y_pred["image"]), tf.convert_to_tensor(y_pred["text"]))
    image_term, text_term = index_cross_entropy_terms(image_logits, text_logits, y_true["image_index"])
    return image_term + text_term


def _plain_adaptive_margin(loss, y_true, y_pred):
    image, text = tf.convert_to_tensor(y_pred["image"]), tf.convert_to_tensor(y_pred["text"])
    margins = dict(margin_x=float(loss.margin_x.numpy()), margin_y=float(loss.margin_y.numpy()),
                   squared=loss.squared)
    if loss.sampling == "all":
        return adaptive_margin_triplet_loss(image, text, image_index=y_true["image_index"], **margins)
    # The hardest negative is the closest one: the highest score -distance.
    scores = -pairwise_l2_distances(image, text, loss.squared)
    negatives = negative_mask(scores, y_true["image_index"])
    captions = samplers.hardest_negatives(scores, negatives, axis=1).indices
    images = samplers.hardest_negatives(scores, negatives, axis=0).indices
    return adaptive_margin_triplet_loss(image, text, captions, images, **margins)


def _plain_info_nce(loss, y_true, y_pred):
    return info_nce_loss(_similarity(y_pred), loss.logit_scale, image_index=y_true["image_index"])


def _plain_graded_info_nce(loss, y_true, y_pred):
    return graded_info_nce_loss(_similarity(y_pred), y_true["relevance"], loss.logit_scale,
                                tau_relevance=loss.tau_relevance, image_index=y_true["image_index"])


def _plain_siglip(loss, y_true, y_pred):
    return siglip_loss(_similarity(y_pred), loss.logit_scale, loss.bias, image_index=y_true["image_index"])


@dataclasses.dataclass(frozen=True)
class Case:
    """How to build one loss configuration for the harness.

    build: keyword arguments (e.g. `reduction`) -> a new loss.
    plain: (loss, y_true, y_pred) -> per-row [B] from the loss's plain function (kitm.losses exports it), or None.
    state: the loss's variables that are not in its config (copied onto a rebuilt loss to compare values).
    random: the loss draws random negatives (stateful op seeds): values are compared after `tf.random.set_seed`,
        and the MirroredStrategy check, whose draws cannot match the one-device draws, is skipped.
    separable: each row's value depends only on its own row (and the loss's parameters), so a global-batch value
        is the sum of the replicas' batches' values.
    owns_parameters: the loss has trainable variables of its own (`trainable_variables`: centres, heads, a
        temperature), whose gradients are checked too.
    breaks_collapse: its parameters break the symmetry of the collapse point (centres and heads do; a contrastive
        loss's temperature and bias scale every similarity alike, so they do not). Default: owns_parameters.
    """

    build: Callable[..., RetrievalLoss]
    plain: Callable | None = None
    state: Callable[[RetrievalLoss], list] = lambda loss: []
    random: bool = False
    separable: bool = False
    owns_parameters: bool = False
    breaks_collapse: bool | None = None

    @property
    def moves_at_collapse(self) -> bool:
        return self.owns_parameters if self.breaks_collapse is None else self.breaks_collapse


def _owned(loss):
    return list(loss.trainable_variables)


CASES = {
    "triplet": Case(lambda **kw: TripletLoss(**kw), _plain_triplet),
    "triplet_sum_of_negatives": Case(lambda **kw: TripletLoss(margin=0.3, max_violation=False, **kw), _plain_triplet),
    "sam": Case(lambda **kw: SAMLoss(tau=3.0, **kw), _plain_sam),
    "sam_reference_easiest": Case(lambda **kw: SAMLoss(tau=5.0, pairing="reference", sampling="easiest", **kw),
                                  _plain_sam),
    "sam_random_alone": Case(lambda **kw: SAMLoss(tau=3.0, sampling="random", triplet_weight=0.0, seed=4, **kw),
                             random=True),
    "ladder": Case(lambda **kw: LadderLoss(**kw), _plain_ladder),
    "ladder_three_cumulative": Case(lambda **kw: LadderLoss(thresholds=(0.7, 0.4), margins=(0.2, 0.05, 0.05),
                                                            betas=(1.0, 0.5, 0.25), cumulative=True, **kw),
                                    _plain_ladder),
    "adaptive_ladder": Case(lambda **kw: AdaptiveLadderLoss(jit_compile=False, **kw), _plain_adaptive_ladder),
    "reclusterable_ladder": Case(lambda **kw: ReclusterableLadderLoss(thresholds=(0.6,), sample_size=32, **kw),
                                 _plain_ladder, state=lambda loss: [loss.threshold_variable]),
    "angular": Case(lambda **kw: AngularLoss(**kw), _plain_angular),
    "angular_hinge": Case(lambda **kw: AngularLoss(angle_degrees=40.0, form="hinge", **kw), _plain_angular),
    "neighborhood_angular": Case(lambda **kw: NeighborhoodAngularLoss(**kw)),
    "neighborhood_triplet": Case(lambda **kw: NeighborhoodAngularLoss(base="triplet", neighbor_space="image", **kw)),
    "semantic_centers": Case(
        lambda **kw: SemanticCenterLoss(NUM_IMAGES, D, centers_initializer=keras.initializers.RandomNormal(
            stddev=0.5, seed=1), **kw),
        _plain_semantic_centers, state=_owned, separable=True, owns_parameters=True),
    # delta = 1 keeps the centre repulsion active (4 centres of about unit norm, squared distances about 2 < 2 delta).
    "quantized_centers": Case(
        lambda **kw: QuantizedCenterLoss(4, D, delta=1.0, quantizer=SoftmaxQuantizedCenters(
            4, centers_initializer=keras.initializers.RandomNormal(stddev=D ** -0.5, seed=2),
            kernel_initializer=keras.initializers.GlorotUniform(seed=3)), **kw),
        _plain_quantized_centers, state=_owned, owns_parameters=True),
    "index_cross_entropy": Case(lambda **kw: ImageIndexCrossEntropy(NUM_IMAGES, D, **kw), _plain_index_cross_entropy,
                                state=_owned, separable=True, owns_parameters=True),
    "adaptive_margin_random": Case(lambda **kw: AdaptiveMarginTripletLoss(seed=3, **kw), random=True,
                                   state=lambda loss: [loss.margin_x, loss.margin_y]),
    "adaptive_margin_hardest": Case(lambda **kw: AdaptiveMarginTripletLoss(0.3, 0.25, sampling="hardest", **kw),
                                    _plain_adaptive_margin, state=lambda loss: [loss.margin_x, loss.margin_y]),
    "adaptive_margin_all_squared": Case(lambda **kw: AdaptiveMarginTripletLoss(sampling="all", squared=True, **kw),
                                        _plain_adaptive_margin, state=lambda loss: [loss.margin_x, loss.margin_y]),
    # Learnable temperature (and bias) trained by the model's optimizer; at their initial values except where noted.
    "infonce": Case(lambda **kw: InfoNCELoss(**kw), _plain_info_nce, state=_owned, owns_parameters=True,
                    breaks_collapse=False),
    "infonce_low_scale": Case(lambda **kw: InfoNCELoss(logit_scale_init=2.0, max_logit_scale=None, **kw),
                              _plain_info_nce, state=_owned, owns_parameters=True, breaks_collapse=False),
    "graded_infonce": Case(lambda **kw: GradedInfoNCELoss(tau_relevance=0.2, logit_scale_init=5.0, **kw),
                           _plain_graded_info_nce, state=_owned, owns_parameters=True, breaks_collapse=False),
    "siglip": Case(lambda **kw: SigLIPLoss(**kw), _plain_siglip, state=_owned, owns_parameters=True,
                   breaks_collapse=False),
}


# Where a loss can live. The data, relevance, eval, serving and study packages are left out: importing them all
# takes seconds (sentence-transformers) and a loss has no business there.
LOSS_PACKAGES = ("kitm.losses", "kitm.callbacks", "kitm.layers", "kitm.metrics", "kitm.models", "kitm.ops",
                 "kitm.training")


def _kitm_loss_classes() -> set[type]:
    """Every RetrievalLoss subclass defined in kitm (every module of LOSS_PACKAGES imported first)."""
    for name in LOSS_PACKAGES:
        package = importlib.import_module(name)
        for module in pkgutil.walk_packages(package.__path__, name + "."):
            importlib.import_module(module.name)
    found, stack = set(), [RetrievalLoss]
    while stack:
        for sub in stack.pop().__subclasses__():
            stack.append(sub)
            if sub.__module__.startswith("kitm."):
                found.add(sub)
    return found


def test_every_loss_class_is_in_the_registry():
    losses = {name: case.build() for name, case in CASES.items()}
    missing = _kitm_loss_classes() - {type(loss) for loss in losses.values()}
    assert not missing, f"add a Case to CASES for {sorted(c.__qualname__ for c in missing)}"
    for name, loss in losses.items():
        # A loss with trainable variables of its own must have them checked (gradients, replicas, state copies).
        assert bool(getattr(loss, "trainable_variables", None)) == CASES[name].owns_parameters, name


# ------------------------------------------------------------------------------------------------
# Helpers
# ------------------------------------------------------------------------------------------------

def _evaluate(case: Case, fn):
    """`fn()`, with the global seed reset first for losses that draw random negatives (the same draws each time)."""
    if case.random:
        tf.random.set_seed(11)
    return fn()


def _copy_state(case: Case, source, target) -> None:
    for a, b in zip(case.state(source), case.state(target), strict=True):
        b.assign(a)


def _json(config):
    return json.loads(json.dumps(config))


def _close(got, expected, what):
    np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=1e-5, atol=1e-6, err_msg=what)


# ------------------------------------------------------------------------------------------------
# 1. Per-row values and their reduction
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", CASES)
def test_per_row_values_reduce_to_the_loss(name):
    case = CASES[name]
    y_true, y_pred = make_inputs(seed=1)
    for reduction in REDUCTIONS:
        loss = case.build(reduction=reduction)
        per_row = _evaluate(case, lambda: loss.call(y_true, y_pred)).numpy()
        assert per_row.shape == (B,) and np.all(np.isfinite(per_row)), (reduction, per_row)
        terms = _evaluate(case, lambda: loss.compute_terms(y_true, y_pred))
        assert tuple(terms) == tuple(loss.term_names), (tuple(terms), loss.term_names)
        assert all(t.shape == (B,) for t in terms.values())
        _close(sum(t.numpy() for t in terms.values()), per_row, f"{name}: terms do not add up to call()")
        if case.plain is not None:
            _close(_evaluate(case, lambda: case.plain(loss, y_true, y_pred)), per_row, f"{name}: plain function")
        value = _evaluate(case, lambda: loss(y_true, y_pred)).numpy()
        expected = {"sum": per_row.sum(), "sum_over_batch_size": per_row.mean(), "none": per_row}[reduction]
        _close(value, expected, f"{name}: reduction {reduction}")
        _close(value, reduce_per_row(tf.constant(per_row), reduction), f"{name}: reduce_per_row {reduction}")
    assert float(np.sum(per_row)) > 0, f"{name}: identically 0 on random inputs"


# ------------------------------------------------------------------------------------------------
# 2. get_config round trip
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", CASES)
def test_config_round_trip(name):
    case = CASES[name]
    y_true, y_pred = make_inputs(seed=2)
    loss = case.build(reduction="sum_over_batch_size", name=f"{name}_custom")
    # Keras saves configs as JSON: the config must survive it (tuples come back as lists, as for Keras' own).
    config = _json(loss.get_config())
    assert config["reduction"] == "sum_over_batch_size" and config["name"] == f"{name}_custom"
    value = _evaluate(case, lambda: loss(y_true, y_pred)).numpy()
    rebuilt = {
        "from_config": type(loss).from_config(config),
        "serialize_keras_object": keras.saving.deserialize_keras_object(
            _json(keras.saving.serialize_keras_object(loss))),
        "keras.losses.serialize": keras.losses.deserialize(_json(keras.losses.serialize(loss))),
    }
    for how, other in rebuilt.items():
        assert type(other) is type(loss), how
        assert _json(other.get_config()) == config, how
        _copy_state(case, loss, other)
        _close(_evaluate(case, lambda: other(y_true, y_pred)), value, f"{name}: value after {how}")


def test_every_loss_class_is_registered_serializable():
    for cls in _kitm_loss_classes():
        assert keras.saving.get_registered_object(f"kitm>{cls.__name__}") is cls, cls


# ------------------------------------------------------------------------------------------------
# 3. Gradients
# ------------------------------------------------------------------------------------------------

def _gradients(case, loss, y_true, y_pred):
    image, text = tf.constant(y_pred["image"]), tf.constant(y_pred["text"])
    variables = case.state(loss) if case.owns_parameters else []
    with tf.GradientTape() as tape:
        tape.watch([image, text])
        value = _evaluate(case, lambda: loss(y_true, {"image": image, "text": text}))
    grads = tape.gradient(value, [image, text] + variables)
    names = ["image", "text"] + [v.name for v in variables]
    return {n: (tf.convert_to_tensor(g).numpy() if g is not None else None) for n, g in zip(names, grads)}


def _tangential(gradient, embeddings):
    """The part of each row's gradient along the unit sphere at that row (what a unit-norm encoder can follow)."""
    return gradient - np.sum(gradient * embeddings, axis=1, keepdims=True) * embeddings


@pytest.mark.parametrize("kind", ["random", "ties", "near_collapse", "collapse"])
@pytest.mark.parametrize("name", CASES)
def test_gradients_are_finite_and_move(name, kind):
    case = CASES[name]
    y_true, y_pred = make_inputs(kind, seed=3)
    grads = _gradients(case, case.build(), y_true, y_pred)
    for what, g in grads.items():
        assert g is not None, f"{name}: no gradient reaches {what}"
        assert np.all(np.isfinite(g)), f"{name} ({kind}): non-finite gradient w.r.t. {what}"
        if what in ("image", "text"):
            tangential = np.abs(_tangential(g, y_pred[what])).max()
            if kind != "collapse" or case.moves_at_collapse:
                assert tangential > 1e-4, f"{name} ({kind}): no gradient along the sphere w.r.t. {what}"
            else:
                # Every embedding the same vector: a loss that sees the embeddings only through their dot products
                # has a radial gradient there (by symmetry), so nothing moves along the sphere: the collapse trap
                # of kitm.losses.base ("Hardest-negative warm-up"). Near it (kind "near_collapse") it does move.
                assert tangential < 1e-5, f"{name}: a gradient along the sphere at the collapse point ({tangential})"
        elif kind != "collapse":
            assert np.any(g != 0), f"{name} ({kind}): zero gradient w.r.t. the loss's {what}"


# ------------------------------------------------------------------------------------------------
# 4. Replicas: MirroredStrategy on 2 logical CPUs, in a fresh process
# ------------------------------------------------------------------------------------------------

CENTER_LOSSES = ("semantic_centers", "quantized_centers")
CENTER_CHECK = "all-reduced centre gradient = global-batch centre gradient"
# Checks that kitm fails today: (case, check) -> why. Each is asserted to still fail (strict xfail), so that a fix
# shows up here and its entry is removed.
KNOWN_VIOLATIONS: dict = {}  # (case, check) -> why; each a strict xfail until the loss is fixed
# Losses with a term computed once per batch rather than per row: each replica charges 1/R of it, so that the
# replicas together weigh it as one device on the global batch (CENTER_CHECK), and a replica's value and centre
# gradient are therefore not those of one device on the replica's own rows.
BATCH_LEVEL_TERMS = {"quantized_centers": ("replica values = one-device values / R",
                                           "all-reduced centre gradient = mean of one-device gradients")}


def replica_report() -> dict:
    """Run in a process with 2 logical CPUs: for every case, what each replica computed and what the same loss
    computes on one device, as {case: {check: [got, expected]}} (plain lists, for JSON)."""
    strategy = tf.distribute.MirroredStrategy([f"/cpu:{r}" for r in range(REPLICAS)])
    local = [make_inputs(b=LOCAL_B, seed=20 + r) for r in range(REPLICAS)]
    names = [name for name, case in CASES.items() if not case.random]
    singles, distributed = {}, {}
    for name in names:
        case = CASES[name]
        singles[name] = case.build()
        with strategy.scope():
            distributed[name] = case.build()
        _copy_state(case, singles[name], distributed[name])

    def one_device(name, y_true, y_pred):
        case, loss = CASES[name], singles[name]
        image, text = tf.constant(y_pred["image"]), tf.constant(y_pred["text"])
        variables = case.state(loss) if case.owns_parameters else []
        with tf.GradientTape() as tape:
            tape.watch([image, text])
            value = loss(y_true, {"image": image, "text": text})
        grads = [tf.convert_to_tensor(g).numpy() for g in tape.gradient(value, [image, text] + variables)]
        return float(value), grads

    expected = {name: [one_device(name, *local[r]) for r in range(REPLICAS)] for name in names}
    inputs = strategy.experimental_distribute_values_from_function(lambda ctx: local[ctx.replica_id_in_sync_group])

    def step(batch):
        def replica(batch):
            y_true, y_pred = batch
            out = {}
            for name in names:
                case, loss = CASES[name], distributed[name]
                image, text = tf.identity(y_pred["image"]), tf.identity(y_pred["text"])
                variables = case.state(loss) if case.owns_parameters else []
                with tf.GradientTape() as tape:
                    tape.watch([image, text])
                    value = loss(y_true, {"image": image, "text": text})
                grads = [tf.convert_to_tensor(g) for g in tape.gradient(value, [image, text] + variables)]
                out[name] = (value, grads[:2], grads[2:])
            return out
        per_replica = strategy.run(replica, args=(batch,))
        summed = {name: [strategy.reduce(tf.distribute.ReduceOp.SUM, g, axis=None) for g in per_replica[name][2]]
                  for name in names}
        return per_replica, summed

    per_replica, summed = step(inputs)
    report = {}
    for name in names:
        value, embedding_grads, _ = per_replica[name]
        values = [float(v) for v in strategy.experimental_local_results(value)]
        checks = {"replica values = one-device values / R": [values, [e[0] / REPLICAS for e in expected[name]]]}
        for i, what in enumerate(("image", "text")):
            got = [g.numpy().tolist() for g in strategy.experimental_local_results(embedding_grads[i])]
            want = [(e[1][i] / REPLICAS).tolist() for e in expected[name]]
            checks[f"replica {what} gradients = one-device gradients / R"] = [got, want]
        center = next((j for j, v in enumerate(getattr(distributed[name], "trainable_variables", []))
                       if v is getattr(distributed[name], "centers", None)), None)
        for j, g in enumerate(summed[name]):
            want = sum(e[1][2 + j] for e in expected[name]) / REPLICAS
            label = "centre gradient" if j == center else f"gradient of loss variable {j}"
            checks[f"all-reduced {label} = mean of one-device gradients"] = [g.numpy().tolist(), want.tolist()]
        if CASES[name].separable:
            y_true = {"image_index": np.concatenate([local[r][0]["image_index"] for r in range(REPLICAS)])}
            y_pred = {key: np.concatenate([local[r][1][key] for r in range(REPLICAS)]) for key in ("image", "text")}
            global_value, global_grads = one_device(name, y_true, y_pred)
            checks["sum of replica values = global-batch value / R"] = [sum(values), global_value / REPLICAS]
        if name in CENTER_LOSSES:
            # kitm.losses.centers, "Centre learning rate": the centre step is lr * the gradient of the batch-mean
            # loss, "whatever the batch size or the number of replicas".
            y_true = {"image_index": np.concatenate([local[r][0]["image_index"] for r in range(REPLICAS)])}
            y_pred = {key: np.concatenate([local[r][1][key] for r in range(REPLICAS)]) for key in ("image", "text")}
            _, global_grads = one_device(name, y_true, y_pred)
            j = next(j for j, v in enumerate(distributed[name].trainable_variables) if v is distributed[name].centers)
            checks[CENTER_CHECK] = [summed[name][j].numpy().tolist(), global_grads[2 + j].tolist()]
        report[name] = checks
    return report


REPLICA_SCRIPT = textwrap.dedent("""
    import json, os, sys, warnings
    warnings.simplefilter("ignore")
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * int(sys.argv[2]))
    sys.path.insert(0, sys.argv[1])
    import test_contract
    print("REPORT " + json.dumps(test_contract.replica_report()))
""")


@pytest.fixture(scope="module")
def replica_results(kitm_python):
    # A fresh process: logical devices must be configured before TensorFlow initialises.
    tests_dir = str(pathlib.Path(__file__).resolve().parent)
    result = kitm_python(["-c", REPLICA_SCRIPT, tests_dir, str(REPLICAS)], timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(line for line in result.stdout.splitlines() if line.startswith("REPORT "))
    return json.loads(line[len("REPORT "):])


@pytest.mark.parametrize("name", CASES)
def test_replicas_compute_what_scale_for_replicas_promises(name, replica_results):
    if CASES[name].random:
        pytest.skip("draws random negatives: a replica's draws cannot match a one-device run's")
    checks = replica_results[name]
    assert checks, name
    local_only = BATCH_LEVEL_TERMS.get(name, ())
    if local_only:
        assert CENTER_CHECK in checks and set(local_only) <= set(checks), name
    for what, (got, expected) in checks.items():
        if (name, what) not in KNOWN_VIOLATIONS and what not in local_only:
            _close(got, expected, f"{name}: {what}")


@pytest.mark.parametrize("name, what", [
    pytest.param(name, what, marks=pytest.mark.xfail(strict=True, reason=reason))
    for (name, what), reason in KNOWN_VIOLATIONS.items()])
def test_known_replica_violations(name, what, replica_results):
    got, expected = replica_results[name][what]
    _close(got, expected, f"{name}: {what}")

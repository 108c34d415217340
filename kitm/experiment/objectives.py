"""The objective registry: each `loss` name, the `keras.losses.Loss` it builds from the settings, and its checks.

`OBJECTIVES` maps a name to an `Objective`: its builder, the key its terms are logged under, and the loss class it
builds, whose attributes say what it can do (needs a relevance source, takes global negatives, can be gradient-cached:
kitm.losses.base, declared there once and read here). Several names are summed with `loss_weights`
(`DualEncoder.compile(losses=..., loss_weights=...)`); `centers` is a whole objective trained in phases
(kitm.training.center_phases) and stands alone.

`register_objective` adds a user's own loss to the registry, so `loss=["triplet", "mine"]` works from Python; the
launcher imports the modules named by `--objective_module` (setting `objective_module`) before it reads `--loss`, so
a module that registers its losses when imported makes them launcher losses too.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable

import keras

from kitm.distribute.backend import backend_name
from kitm.errors import KitmConfigError, KitmError, option, rename_options
from kitm.experiment.config import ExperimentConfig


@dataclasses.dataclass(frozen=True)
class Objective:
    """One `loss` entry: `build(config, hardest_warmup_steps)` -> a keras Loss (created under the strategy's scope).

    key: the name its terms are logged under (`<key>/<term>`; the two ladders share one, so only one of them can be
    used at a time). loss_class: the class `build` returns (a class, or the name of one in kitm.losses, imported when
    first asked), whose attributes declare what it can do: `needs_relevance` (it learns from the batch relevance
    matrix, so `relevance` != "none"), `supports_global_negatives` (it takes `negatives="global"`; the builder passes
    `loss_negatives(config)`), `supports_gradient_caching`.
    """

    build: Callable[[ExperimentConfig, int], object] | None
    key: str
    loss_class: type | str

    def resolved_class(self) -> type:
        if isinstance(self.loss_class, str):
            import kitm.losses

            return getattr(kitm.losses, self.loss_class)
        return self.loss_class

    def _declares(self, capability: str, default: bool) -> bool:
        return bool(getattr(self.resolved_class(), capability, default))

    @property
    def needs_relevance(self) -> bool:
        return self._declares("needs_relevance", False)

    @property
    def global_negatives(self) -> bool:
        return self._declares("supports_global_negatives", False)

    @property
    def gradient_caching(self) -> bool:
        return self._declares("supports_gradient_caching", True)

    @property
    def false_negatives(self) -> bool:
        return self._declares("supports_false_negatives", False)


def loss_negatives(config: ExperimentConfig) -> str:
    """The `negatives` a builder passes to a loss that supports global negatives: the run's resolved setting
    (`resolve_negatives`); "auto", not yet resolved for a replica count (a loss built outside a run), is local."""
    negatives = config.training.negatives
    return "local" if negatives == "auto" else negatives



def false_negative_settings(config: ExperimentConfig) -> dict:
    """The false-negative keywords a builder passes to a loss that supports them (kitm.losses.false_negatives)."""
    o = config.objective
    return {"false_negatives": o.false_negatives, "false_negative_rule": o.false_negative_rule,
            "false_negative_threshold": o.false_negative_threshold, "false_negative_margin": o.false_negative_margin}


def _triplet(config, warmup):
    from kitm.losses import TripletLoss

    o = config.objective
    return TripletLoss(o.margin, o.max_violation, hardest_warmup_steps=warmup, negatives=loss_negatives(config),
                       **false_negative_settings(config))


def _sam(config, warmup):
    from kitm.losses import SAMLoss

    o = config.objective
    return SAMLoss(o.sam_tau, sampling=o.sam_sampling, pairing=o.sam_pairing, sam_weight=o.sam_weight,
                   margin=o.margin, max_violation=o.max_violation, seed=config.training.seed,
                   hardest_warmup_steps=warmup, negatives=loss_negatives(config), **false_negative_settings(config))


def _ladder(config, warmup):
    from kitm.losses import LadderLoss, ReclusterableLadderLoss

    o = config.objective
    if o.ladder_recluster_every:
        return ReclusterableLadderLoss(o.ladder_thresholds, o.ladder_margins, o.ladder_betas,
                                       seed=config.training.seed, hardest_warmup_steps=warmup,
                                       max_violation=o.max_violation)
    return LadderLoss(o.ladder_thresholds, o.ladder_margins, o.ladder_betas, hardest_warmup_steps=warmup,
                      max_violation=o.max_violation)


def _ladder_adaptive(config, warmup):
    from kitm.losses import AdaptiveLadderLoss

    o = config.objective
    return AdaptiveLadderLoss([int(bound) for bound in o.ladder_level_bounds], first_margin=o.margin,
                              lloyd_runs=o.ladder_lloyd_runs, hardest_warmup_steps=warmup,
                              max_violation=o.max_violation)


def _angular(config, warmup):
    from kitm.losses import AngularLoss

    return AngularLoss(config.objective.angle_degrees, form=config.objective.angular_form)


def _neighborhood(config, warmup):
    from kitm.losses import NeighborhoodAngularLoss

    o = config.objective
    return NeighborhoodAngularLoss(o.neighborhood_alpha, o.neighborhood_beta, base=o.neighborhood_base,
                                   angle_degrees=o.angle_degrees, margin=o.margin, neighbor_space=o.neighbor_space,
                                   form=o.angular_form)


def _infonce(config, warmup):
    from kitm.losses import InfoNCELoss

    o = config.objective
    return InfoNCELoss(o.logit_scale_init, max_logit_scale=o.max_logit_scale or None, negatives=loss_negatives(config),
                       **false_negative_settings(config))


def _graded_infonce(config, warmup):
    from kitm.losses import GradedInfoNCELoss

    o = config.objective
    return GradedInfoNCELoss(o.graded_tau, logit_scale_init=o.logit_scale_init,
                             max_logit_scale=o.max_logit_scale or None, negatives=loss_negatives(config),
                             **false_negative_settings(config))


def _siglip(config, warmup):
    from kitm.losses import SigLIPLoss

    o = config.objective
    return SigLIPLoss(o.siglip_logit_scale_init, bias_init=o.siglip_bias_init, negatives=loss_negatives(config),
                      **false_negative_settings(config))


OBJECTIVES: dict[str, Objective] = {
    "triplet": Objective(_triplet, "triplet", "TripletLoss"),  # VSE++
    "sam": Objective(_sam, "sam", "SAMLoss"),  # triplet + sam_weight x the semantic adaptive margin
    "ladder": Objective(_ladder, "ladder", "LadderLoss"),  # fixed thresholds (re-clustered: a subclass)
    "ladder_adaptive": Objective(_ladder_adaptive, "ladder", "AdaptiveLadderLoss"),  # k-means levels per query
    "angular": Objective(_angular, "angular", "AngularLoss"),  # N-pair angular, symmetric
    # + semantic-neighbour terms, neighbour batching
    "neighborhood": Objective(_neighborhood, "neighborhood", "NeighborhoodAngularLoss"),
    # trained in phases by kitm.training.center_phases; its losses own the centres and their optimizers
    "centers": Objective(None, "centers", "QuantizedCenterLoss"),
    # Contrastive (kitm.losses.contrastive); their learnable temperature (and bias) train with the model's optimizer
    # and are logged as <key>/logit_scale (and siglip/bias).
    "infonce": Objective(_infonce, "infonce", "InfoNCELoss"),  # CLIP
    "siglip": Objective(_siglip, "siglip", "SigLIPLoss"),  # SigLIP
    "graded_infonce": Objective(_graded_infonce, "graded_infonce", "GradedInfoNCELoss"),  # soft targets from R
}


def register_objective(name: str, build, *, loss_class: type | None = None, key: str | None = None) -> None:
    """Make `loss=[..., name]` build a user's loss, treated as kitm's own are: what it can do is read from its class.

    `build` is either the loss class itself (a `kitm.losses.RetrievalLoss` subclass, built with its defaults, plus
    `negatives=loss_negatives(config)` where the class supports global negatives and
    `hardest_warmup_steps` where it has hardest negatives), or a function `build(config, hardest_warmup_steps)`
    returning an instance of `loss_class`. The class's attributes (`needs_relevance`, `supports_global_negatives`,
    `supports_gradient_caching`; kitm.losses.base) decide the run's checks; a builder of a class that supports
    global negatives passes `negatives=loss_negatives(config)`.
    """
    if name in OBJECTIVES:
        raise KitmConfigError(f"An objective named {name!r} is already registered.")
    if isinstance(build, type):
        if loss_class is not None and loss_class is not build:
            raise TypeError(f"register_objective({name!r}, {build.__name__}, loss_class={loss_class.__name__}): "
                            "give the class once.")
        loss_class, build = build, _default_builder(build)
    if loss_class is None:
        raise TypeError(f"register_objective({name!r}, build): give loss_class=<the class build returns>; its "
                        "attributes declare what the loss can do (needs_relevance, supports_global_negatives, "
                        "supports_gradient_caching; kitm.losses.base).")
    if not (isinstance(loss_class, type) and issubclass(loss_class, keras.losses.Loss)):
        raise TypeError(f"register_objective({name!r}): loss_class must be a keras.losses.Loss subclass (a "
                        f"kitm.losses.RetrievalLoss); got {loss_class!r}.")
    OBJECTIVES[name] = Objective(build, key or name, loss_class)


def _default_builder(loss_class: type):
    def build(config, warmup):
        arguments = {}
        if getattr(loss_class, "supports_global_negatives", False):
            arguments["negatives"] = loss_negatives(config)
        if getattr(loss_class, "has_hardest_negatives", False):
            arguments["hardest_warmup_steps"] = warmup
        if getattr(loss_class, "supports_false_negatives", False):
            arguments.update(false_negative_settings(config))
        return loss_class(**arguments)
    return build


def load_objective_modules(config: ExperimentConfig) -> None:
    """Import the modules of `objective_module` (each registers its losses when imported), once each."""
    for module in config.objective.objective_module:
        try:
            importlib.import_module(module)
        except ImportError as error:
            raise KitmConfigError(f"{option('objective_module')}={module}: cannot import it ({error}); give a module "
                                  "on the Python path (e.g. my_package.losses) that calls "
                                  "kitm.experiment.register_objective when imported.") from error


def loss_names() -> tuple[str, ...]:
    return tuple(OBJECTIVES)


def uses_center_phases(config: ExperimentConfig) -> bool:
    return "centers" in config.objective.loss


def uses_neighbor_batching(config: ExperimentConfig) -> bool:
    return "neighborhood" in config.objective.loss


def required_relevance_slots(config: ExperimentConfig) -> list[str]:
    """The relevance rows the records must carry for `config` (the neighbour slot of neighbor_space too)."""
    from kitm.data.schema import NEIGHBOR_SLOTS

    slots = [] if config.data.relevance == "none" else [config.data.relevance]
    if uses_neighbor_batching(config):
        slots.append(NEIGHBOR_SLOTS[config.objective.neighbor_space][0])
    return slots


def check_objective(config: ExperimentConfig) -> None:
    """`loss` names known losses (after importing the `objective_module`s), at most once each, with matching
    `loss_weights` and a relevance source."""
    load_objective_modules(config)
    names = list(config.objective.loss)
    shown = f"{option('loss')}={','.join(names)}"
    unknown = [name for name in names if name not in OBJECTIVES]
    if unknown or not names:
        raise KitmConfigError(f"{shown}: unknown loss {unknown or '(none given)'}; choose from "
                              f"{', '.join(OBJECTIVES)}.")
    keys = [OBJECTIVES[name].key for name in names]
    if len(set(keys)) != len(keys):
        raise KitmConfigError(f"{shown} names a loss twice (ladder and ladder_adaptive are one objective with fixed "
                              "or adaptive levels).")
    weights = config.objective.loss_weights
    if weights and len(weights) != len(names):
        raise KitmConfigError(f"{option('loss_weights')}={','.join(map(_number, weights))} gives {len(weights)} "
                              f"weights for the {len(names)} losses of {shown}.")
    if any(weight < 0 for weight in weights):
        raise KitmConfigError(f"{option('loss_weights')}={','.join(map(_number, weights))}: weights must be >= 0.")
    if "centers" in names and len(names) > 1:
        raise KitmConfigError(f"{shown}: centers is a whole objective trained in phases (triplet, centre and "
                              "classification terms); use it alone.")
    _check_false_negatives(config, names, shown)
    needs_relevance = [name for name in names if OBJECTIVES[name].needs_relevance]
    if needs_relevance and config.data.relevance == "none":
        raise KitmConfigError(f"{option('loss')}={needs_relevance[0]} learns from graded relevance: set "
                              f"{option('relevance')} (e.g. truth for the synthetic world, cider for SAM, sbert for "
                              "the ladder loss).")


def resolve_negatives(config: ExperimentConfig, replicas: int, whole_batch: bool = False) -> ExperimentConfig:
    """`config` with `negatives` made concrete for `replicas` (kitm.losses.global_batch; docs/scale.md): "auto" is
    global with several replicas when every loss can gather, else local; "global" with a loss that cannot gather is
    refused, naming it.

    `whole_batch`: the replicas are devices that one loss computation spans (JAX's keras.distribution,
    kitm.distribute.data_parallel), so every loss sees the global batch without gathering: with several of them
    the negatives are global, and "local" is refused."""
    negatives = config.training.negatives  # one of its choices: checked when the configuration was made
    names = list(config.objective.loss)
    if whole_batch and replicas > 1:
        if negatives == "local":
            raise KitmConfigError(
                f"{option('negatives')}=local: on the {backend_name()} backend the {replicas} devices split "
                "one loss computation over the global batch, so every anchor meets all of its rows; per-device "
                f"negatives are not implemented there. Use {option('negatives')}=auto or global (the step of one "
                "device with the whole batch), or KERAS_BACKEND=tensorflow for per-replica negatives.")
        return dataclasses.replace(config, training=dataclasses.replace(config.training, negatives="global"))
    cannot = [name for name in names if name in OBJECTIVES and not OBJECTIVES[name].global_negatives]
    if negatives == "global" and cannot:
        able = ", ".join(name for name, objective in OBJECTIVES.items() if objective.global_negatives)
        raise KitmConfigError(
            f"{option('negatives')}=global: {option('loss')}={cannot[0]} cannot gather the other replicas' rows (it "
            f"reads more than the batch's similarity matrix and labels); the losses that can are {able}. Use "
            f"{option('negatives')}=local (or auto) with it.")
    if negatives == "auto":
        negatives = "global" if replicas > 1 and not cannot else "local"
    return dataclasses.replace(config, training=dataclasses.replace(config.training, negatives=negatives))


def check_grad_cache(config: ExperimentConfig, replicas: int) -> None:
    """`grad_cache_chunk` divides the per-replica batch, and the objective can be replayed (not centers)."""
    chunk, batch = config.training.grad_cache_chunk, config.training.batch_size
    if not chunk:
        return
    cannot = [name for name in config.objective.loss if name in OBJECTIVES and not OBJECTIVES[name].gradient_caching]
    if cannot:
        own = " (the semantic centres and their optimizer)" if cannot[0] == "centers" else ""
        raise KitmConfigError(f"{option('grad_cache_chunk')}={chunk}: {option('loss')}={cannot[0]} trains state of its "
                              f"own{own} from each batch, which gradient caching cannot replay between its two passes; "
                              f"use {option('grad_cache_chunk')}=0 with it.")
    per_replica = batch // replicas if batch % replicas == 0 else None
    if per_replica is None or per_replica % chunk:
        raise KitmConfigError(
            f"{option('grad_cache_chunk')}={chunk} must divide the per-replica batch: {option('batch_size')}={batch} "
            f"over {replicas} replica(s) is {batch / replicas:g} rows; choose a divisor of it (e.g. "
            f"{_largest_divisor(per_replica or batch, chunk)}).")


def _largest_divisor(rows: int, at_most: int) -> int:
    return max(d for d in range(1, min(rows, at_most) + 1) if rows % d == 0)


def _number(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def hardest_warmup_steps(config: ExperimentConfig, steps_per_epoch: int) -> int:
    """hardest_warmup_epochs in training steps."""
    return round(config.objective.hardest_warmup_epochs * steps_per_epoch)


def build_objective(config: ExperimentConfig, steps_per_epoch: int = 1) -> tuple[dict, dict]:
    """(losses, weights) for `DualEncoder.compile(losses=..., loss_weights=...)` from `loss` and `loss_weights`.

    Create under the strategy's scope. Each loss is keyed (and logged) by its objective's key (`sam/...`,
    `ladder/...`). `steps_per_epoch` turns hardest_warmup_epochs into steps. The settings were checked when the
    configuration was made (`kitm.experiment.experiment_config` runs `check_objective`).
    """
    load_objective_modules(config)
    names = config.objective.loss
    weights = config.objective.loss_weights or (1.0,) * len(names)
    warmup = hardest_warmup_steps(config, steps_per_epoch)
    losses, loss_weights = {}, {}
    for name, weight in zip(names, weights):
        objective = OBJECTIVES[name]
        if objective.build is None:
            raise KitmConfigError(f"{option('loss')}={name} is built and trained phase by phase by "
                                  "kitm.training.center_phases.")
        try:
            loss = objective.build(config, warmup)
        except ValueError as error:  # the loss names its argument; say which setting feeds it
            raise KitmConfigError(f"{option('loss')}={name}: {error}") from error
        _check_built(name, objective, loss, config)
        losses[objective.key] = loss
        loss_weights[objective.key] = float(weight)
    return losses, loss_weights


def _check_built(name: str, objective: Objective, loss, config: ExperimentConfig) -> None:
    """The loss a builder made is of its declared class, with the run's negatives where it can take them: the
    registry's checks read the class, so a builder that returned something else would bypass them."""
    declared = objective.resolved_class()
    if not isinstance(loss, declared):
        raise KitmConfigError(f"{option('loss')}={name}: its builder returned {type(loss).__name__}, not the "
                              f"registered loss_class {declared.__name__}; register the class it builds.")
    wanted = loss_negatives(config)
    if objective.global_negatives and getattr(loss, "negatives", wanted) != wanted:
        raise KitmConfigError(f"{option('loss')}={name}: the run's negatives are {wanted!r} but its builder made "
                              f"the loss with negatives={loss.negatives!r}; pass negatives=loss_negatives(config) "
                              "(kitm.experiment.objectives).")


# CenterPhaseConfig's fields -> the settings that feed them (the others have the same name).
CENTER_PHASE_FIELD_SETTINGS = {"phase_epochs": "center_phase_epochs", "learning_rates": "learning_rate",
                         "centers_learning_rate": "center_learning_rate", "delta": "center_delta",
                         "loss_weight": "loss_weights",
                         "triplet_sampling": "center_triplet_sampling", "term_weights": "center_term_weights"}


def center_phase_config(config: ExperimentConfig, num_train_images: int, data_dir=None):
    """The centers objective's settings as a `kitm.training.center_phases.CenterPhaseConfig` (which checks them;
    its errors are shown under the settings' names)."""
    from kitm.training.center_phases import CenterPhaseConfig

    o, t = config.objective, config.training
    epochs = tuple(o.center_phase_epochs)
    if "epochs" in config.explicit and t.epochs != sum(epochs):
        raise KitmConfigError(f"{option('epochs')}={t.epochs} with {option('loss')}=centers: the phases set the "
                              f"epochs ({option('center_phase_epochs')}={','.join(map(str, epochs))}); drop "
                              f"{option('epochs')}.")
    if o.num_quantized_centers > num_train_images:
        where = f" of {data_dir}" if data_dir is not None else ""
        raise KitmConfigError(f"{option('num_quantized_centers')}={o.num_quantized_centers} is more than the "
                              f"{num_train_images} training images{where}: k-means cannot make more quantized "
                              "centres than there are per-image centres; lower it.")
    try:
        return CenterPhaseConfig(
            phase_epochs=epochs, learning_rates=(t.learning_rate, o.center_phase2_learning_rate,
                                                 o.center_phase3_learning_rate),
            centers_learning_rate=o.center_learning_rate, lr_decay_epochs=t.lr_decay_epochs,
            lr_decay_factor=t.lr_decay_factor, grad_clip_norm=t.grad_clip_norm or None, delta=o.center_delta,
            num_quantized_centers=o.num_quantized_centers, margin=o.margin,
            margin_update_every=o.margin_update_every, margin_max=o.margin_max,
            loss_weight=(o.loss_weights or (1.0,))[0], seed=t.seed, triplet_sampling=o.center_triplet_sampling,
            term_weights=tuple(o.center_term_weights))
    except KitmError as error:
        message = rename_options(error.args[0], CENTER_PHASE_FIELD_SETTINGS)
        raise KitmConfigError(f"{option('loss')}=centers: {message}") from error


def total_epochs(config: ExperimentConfig) -> int:
    """The epochs a run trains: `epochs`, or the sum of the centers phases."""
    if uses_center_phases(config):
        return sum(config.objective.center_phase_epochs)
    return config.training.epochs


def _check_false_negatives(config: ExperimentConfig, names: list[str], shown: str) -> None:
    """`false_negatives` other than keep: every loss filters its in-batch negatives, and a relevance source flags
    them."""
    mode = config.objective.false_negatives
    if mode == "keep":
        return
    unable = [name for name in names if not OBJECTIVES[name].false_negatives]
    if unable:
        able = [name for name, objective in OBJECTIVES.items() if objective.false_negatives]
        raise KitmConfigError(f"{option('false_negatives')}={mode}: {shown} includes {', '.join(unable)}, which has "
                              f"no in-batch negatives to filter; the losses that filter them: {', '.join(able)}.")
    if config.data.relevance == "none":
        raise KitmConfigError(f"{option('false_negatives')}={mode} flags candidates by their relevance: set "
                              f"{option('relevance')} (truth for the synthetic world, sbert for a sentence model as "
                              "GISTEmbed's guide, cider).")

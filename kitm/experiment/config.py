"""Typed settings of an experiment: data, model, objective, training, evaluation and export, plus the run directory.

Every setting has one name, the same in Python and on the command line (`python -m kitm.launch --<name>=...`), so
`ExperimentConfig.settings()` is the flat view the launcher, `summary.json` and TensorBoard's hparams show, and
`kitm.experiment.presets.experiment_config(dataset, **settings)` builds a configuration the way the launcher does:
the dataset's presets for every setting not given, the given ones winning. The sections only
type and group the settings; checks that need the data or several sections at once live where they are used
(`kitm.experiment.objectives`, `kitm.experiment.datasets`, `kitm.experiment.runner`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from kitm.errors import KitmConfigError, option


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Which records, and how the input pipeline reads them."""

    dataset: str = "synthetic"  # synthetic, or a built one (coco, f30k, f8k, ...)
    data_dir: str | None = None  # default tfrecords/<dataset> (kitm.experiment.datasets.default_data_dir)
    synthetic_num_scenes: int = 3000
    train_fraction: float = 1.0  # a fixed subset of the training images: those with the smallest ids
    train_subset_seed: int = 0  # 0: that subset; s > 0: a random subset of the same size drawn with seed s
    image_size: int = 64
    captions_per_step: str = "sample"  # sample: one random caption per image per epoch; all: every caption
    relevance: str = "none"  # the batch relevance matrix's source: none, truth, cider, sbert
    flip: bool = True
    crop_area_min: float = 0.8
    eval_crop_fraction: float = 0.875
    max_caption_length: int = 32
    vocab_min_count: int = 1


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """The dual encoder's towers (kitm.experiment.encoders) and the joint space."""

    image_encoder: str = "small_cnn"
    weights: str = "imagenet"  # imagenet, none, or a weights file
    finetune_backbone: bool = False
    embedding_dim: int = 1024
    word_dim: int = 300
    text_units: int = 512
    # keras-hub towers (kitm.layers.hub_towers): image_encoder="hub" / text_encoder="hub" with a preset handle or a
    # local preset directory each, or joint_preset (one CLIP or SigLIP preset: both towers, projections, logit scale).
    text_encoder: str = "gru"  # gru (the papers' BiGRU on kitm's vocabulary) or hub (text_preset)
    image_preset: str | None = None
    text_preset: str | None = None
    joint_preset: str | None = None
    freeze_image_tower: bool = False  # LiT: the image tower's weights stay as loaded
    freeze_text_tower: bool = False
    image_tower_lr_multiplier: float = 1.0  # the image tower's learning rate = learning_rate x this
    text_tower_lr_multiplier: float = 1.0
    text_bidirectional: bool = True  # False: one forward GRU, as the VSE++ reference code
    # masked: Keras' GRU over every row; packed: finished rows skipped (kitm.layers.packed_gru), equal to float
    # rounding and faster, but not the default, so that figures trained before it repeat bit for bit.
    text_recurrence: str = "masked"


@dataclasses.dataclass(frozen=True)
class ObjectiveConfig:
    """The losses (kitm.experiment.objectives) and every method's own settings."""

    loss: tuple[str, ...] = ("triplet",)
    loss_weights: tuple[float, ...] = ()  # one per loss; empty: 1 each
    margin: float = 0.2
    max_violation: bool = True
    hardest_warmup_epochs: float = 0.0
    sam_tau: float = 5.0
    sam_weight: float = 1.0
    sam_sampling: str = "hardest"
    sam_pairing: str = "matched"
    ladder_thresholds: tuple[float, ...] = (0.40,)
    ladder_margins: tuple[float, ...] = (0.2, 0.01)
    ladder_betas: tuple[float, ...] = (1.0, 0.25)
    ladder_level_bounds: tuple[int, ...] = (2, 4)
    ladder_lloyd_runs: int = 1
    ladder_recluster_every: int = 0
    angle_degrees: float = 45.0
    angular_form: str = "npair"
    neighborhood_base: str = "angular"
    neighborhood_alpha: float | None = None
    neighborhood_beta: float | None = None
    neighbor_draw: str = "mutual"
    neighbor_space: str = "text"
    center_phase_epochs: tuple[int, ...] = (30, 15, 10)
    center_phase2_learning_rate: float = 2e-5
    center_phase3_learning_rate: float = 2e-5
    center_learning_rate: float = 0.5
    center_delta: float = 0.1
    num_quantized_centers: int = 1000
    margin_update_every: int = 500
    center_triplet_sampling: str = "random"
    center_term_weights: tuple[float, ...] = (1.0, 1.0, 1.0)  # triplet, centre, image-index CE (the paper: 1 each)
    margin_max: float = 1.0
    # Contrastive losses (kitm.losses.contrastive): infonce and graded_infonce share the first two, siglip has its own.
    logit_scale_init: float = 1.0 / 0.07  # exp(t) at the start (CLIP: 1/0.07)
    max_logit_scale: float = 100.0  # the clip of exp(t) (CLIP: 100); 0: no clip
    siglip_logit_scale_init: float = 10.0  # exp(t') at the start (SigLIP: 10)
    siglip_bias_init: float = -10.0  # b at the start (SigLIP: -10)
    graded_tau: float = 0.1  # tau_R of graded InfoNCE's targets, on the relevance's scale (tau_R -> 0: InfoNCE)


@dataclasses.dataclass(frozen=True)
class TrainingConfig:
    """Optimisation, precision, distribution, fault tolerance and the collapse monitor."""

    epochs: int = 30
    batch_size: int = 128
    learning_rate: float = 2e-4
    lr_decay_epochs: int = 15
    lr_decay_factor: float = 0.1
    grad_clip_norm: float = 2.0
    lr_schedule: str = "step"
    warmup_epochs: float = 0.0
    warmup_steps: int = 0
    mixed_precision: bool = False
    jit_compile: str = "auto"  # auto, true, false
    # Adam's update of each variable as TensorFlow's fused kernel (kitm.training.fused_adam): auto = on for keras-hub
    # towers (where the update is a share of the step worth fusing), off for the papers' towers, whose figures then
    # repeat bit for bit; true / false force it.
    fused_update: str = "auto"
    finetune_after_epochs: int = 0
    finetune_learning_rate: float | None = None
    seed: int = 0
    deterministic_ops: bool = False
    strategy: str = "default"
    negatives: str = "auto"  # auto (global with several replicas where every loss can gather), global, local
    grad_cache_chunk: int = 0  # gradient caching in chunks of this many rows per replica (0: off)
    backup_every_steps: int = 0
    cpu_devices: int = 0
    collapse_threshold: float = 0.9
    stop_on_collapse: bool = False
    progress: bool = True


@dataclasses.dataclass(frozen=True)
class EvaluationConfig:
    """Validation during training and the test at the end."""

    eval_every_epochs: int = 5
    eval_images: int = 1000
    test_crops: int = 1
    projector_samples: int = 500
    eval_relevance: str = "auto"  # auto: truth when the dataset has it, else none
    fold_images: int = 0  # the test also reports R@K on folds of this many images (0: none)


@dataclasses.dataclass(frozen=True)
class ExportConfig:
    """The SavedModel written at the end."""

    export: bool = True


SECTIONS = {"data": DataConfig, "model": ModelConfig, "objective": ObjectiveConfig, "training": TrainingConfig,
            "evaluation": EvaluationConfig, "export": ExportConfig}
# setting name -> its section
SECTION_OF = {field.name: section for section, cls in SECTIONS.items() for field in dataclasses.fields(cls)}
SETTING_NAMES = tuple(sorted([*SECTION_OF, "run_dir"]))


@dataclasses.dataclass(frozen=True)
class ExperimentConfig:
    """One experiment: its sections, its run directory, and which settings were given explicitly (the rest came
    from the defaults or the dataset's presets; `explicit` decides what a preset may fill and lets a check say
    "drop --epochs" only when someone set it)."""

    data: DataConfig = DataConfig()
    model: ModelConfig = ModelConfig()
    objective: ObjectiveConfig = ObjectiveConfig()
    training: TrainingConfig = TrainingConfig()
    evaluation: EvaluationConfig = EvaluationConfig()
    export: ExportConfig = ExportConfig()
    run_dir: str | None = None  # default runs/<dataset>
    explicit: frozenset[str] = frozenset()
    preset: frozenset[str] = frozenset()  # the settings the dataset's presets filled

    def settings(self) -> dict:
        """Every setting by name (lists for the tuple-valued ones), the flat view of summary.json and hparams."""
        flat = {"run_dir": self.run_dir}
        for section in SECTIONS:
            for name, value in dataclasses.asdict(getattr(self, section)).items():
                flat[name] = list(value) if isinstance(value, tuple) else value
        return flat

    def get(self, name: str):
        """One setting by name."""
        if name == "run_dir":
            return self.run_dir
        return getattr(getattr(self, _section(name)), name)

    def replace(self, **settings) -> "ExperimentConfig":
        """A copy with `settings` (flat names) changed; they count as explicitly given."""
        return self._with(settings, explicit=True)

    def _with(self, settings: Mapping[str, object], *, explicit: bool) -> "ExperimentConfig":
        grouped: dict[str, dict] = {}
        top = {}
        for name, value in settings.items():
            if name == "run_dir":
                top["run_dir"] = None if value is None else str(value)
                continue
            section = _section(name)
            grouped.setdefault(section, {})[name] = _typed(name, value)
        changes = {section: dataclasses.replace(getattr(self, section), **values)
                   for section, values in grouped.items()}
        if explicit:
            marks = {"explicit": self.explicit | frozenset(settings), "preset": self.preset - frozenset(settings)}
        else:
            marks = {"preset": self.preset | frozenset(settings)}
        return dataclasses.replace(self, **changes, **top, **marks)


def _section(name: str) -> str:
    try:
        return SECTION_OF[name]
    except KeyError:
        raise KitmConfigError(f"Unknown setting {name!r}; the settings are: {', '.join(SETTING_NAMES)}.") from None


def _typed(name: str, value):
    """Tuple-valued settings accept any sequence (a list from a flag or from JSON)."""
    default = getattr(SECTIONS[SECTION_OF[name]](), name)
    if isinstance(default, tuple):
        if isinstance(value, str):
            raise KitmConfigError(f"{option(name)} takes a sequence of values (e.g. [{default[0]!r}] or "
                                  f"{list(default)!r}); got the string {value!r}.")
        return tuple(value)
    return value

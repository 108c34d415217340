"""Typed settings of an experiment: data, model, objective, training, evaluation and export, plus the run directory.

Each setting is declared once, here: a field of one of the sections below with its type (`typing.Literal` for a
fixed set of choices), its default, its help text and its bounds (`setting(...)`). Everything else is derived from
that declaration: `kitm.launch` generates its flag (`python -m kitm.launch --<name>=...`, the same name, default and
help), `SETTINGS` describes every setting to code that lists them, and a section checks its fields when it is made,
so a setting out of its bounds, a non-finite number or a choice not offered is refused there, once, naming the
setting (`margin` in Python, `--margin` through the launcher: `kitm.errors.option`).

`ExperimentConfig.settings()` is the flat view the launcher, `summary.json` and TensorBoard's hparams show, and
`kitm.experiment.presets.experiment_config(dataset, **settings)` builds a configuration the way the launcher does:
the dataset's presets for every setting not given, the given ones winning. Checks that need the data or several
settings at once live where they are used (`kitm.experiment.objectives`, `kitm.experiment.datasets`,
`kitm.experiment.runner`).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import Literal

from kitm.errors import KitmConfigError
# Setting and bounds_text are read from here too (the launcher makes its flags from them).
from kitm.experiment.setting_checks import Setting, bounds_text, checked, describe, setting  # noqa: F401
from kitm.negatives import SETTING_NEGATIVES

# Choices spelled once: modules that need the list read it from here (`typing.get_args(Negatives)`).
Negatives = Literal[SETTING_NEGATIVES]  # where a loss finds its negatives under several replicas (kitm.negatives)
Relevance = Literal["none", "truth", "cider", "sbert"]  # a relevance source of the records
Switch = Literal["auto", "true", "false"]  # a feature kitm turns on where it pays (auto), or forced on / off
ADAM_RATE = "Adam moves each weight by up to about the learning rate per step; above 1 the loss diverges"


class _Section:
    """A section checks its settings when it is made (also by `dataclasses.replace`)."""

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = checked(SETTINGS[field.name], getattr(self, field.name))
            if value is not getattr(self, field.name):
                object.__setattr__(self, field.name, value)  # a normalised value (list -> tuple, 2.0 -> 2)


@dataclasses.dataclass(frozen=True)
class DataConfig(_Section):
    """Which records, and how the input pipeline reads them."""

    dataset: str = setting("synthetic", "Dataset name: synthetic, or a built one (coco, f30k, f8k, ...).")
    data_dir: str | None = setting(None, "Folder of the built TFRecords (default tfrecords/<dataset>).")
    synthetic_num_scenes: int = setting(3000, "Scenes in the synthetic world (built when absent).", lower=10)
    synthetic_world: Literal["things", "shapes"] = setting("things", help=(
        "Which synthetic world is built when absent: things (everyday objects in settings, captions like people's) "
        "or shapes (the coloured shapes of kitm's first claims studies, to reproduce them)."))
    # A subset of the training images (train_fraction, train_subset_seed): kitm.experiment.datasets.training_subset.
    train_fraction: float = setting(1.0, lower=1e-06, upper=1.0, help=(
        "Train on this fraction of the training images: a fixed subset, the images with the smallest ids (evaluation "
        "splits unchanged; e.g. 0.1 for SAM's limited-data setting)."))
    train_subset_seed: int = setting(0, lower=0, help=(
        "With --train_fraction < 1: 0 keeps the images with the smallest ids; s > 0 a random subset of the same size "
        "drawn with seed s (the same images on every machine)."))
    image_size: int = setting(64, "Side of the square model input.", lower=16)
    captions_per_step: Literal["sample", "all"] = setting("sample", help=(
        "sample: one random caption per image per epoch; all: every caption is a sample."))
    relevance: Relevance = setting("none", help=(
        "Relevance source of the batch relevance matrix: truth (the synthetic world's exact relevance), cider (CIDEr-D "
        "with the training idf, SAM's source) or sbert (sentence-embedding cosine, the ladder loss's source); cider "
        "and sbert need the dataset built with those relevance rows."))
    flip: bool = setting(True, "Random horizontal flips in training (off for the synthetic world: left/right).")
    crop_area_min: float = setting(0.8, "Smallest area share of the training random crop.", lower=0.05, upper=1.0)
    eval_crop_fraction: float = setting(0.875, "Centre crop side / shorter side at evaluation.", lower=0.1, upper=1.0)
    max_caption_length: int = setting(32, "Tokens kept per caption.", lower=1)
    vocab_min_count: int = setting(1, "Words seen fewer times in training captions become [UNK].", lower=1)


@dataclasses.dataclass(frozen=True)
class ModelConfig(_Section):
    """The dual encoder's towers (kitm.experiment.encoders) and the joint space."""

    image_encoder: str = setting("small_cnn", help=(
        "Image tower, by its name in kitm.experiment.encoders.IMAGE_ENCODERS: small_cnn, resnet50, resnet152, "
        "features_mlp, hub (--image_preset), or one registered with kitm.experiment.register_image_encoder."))
    weights: str = setting("imagenet", help=(
        "ResNet weights: imagenet, none, or a weights file; small_cnn: none or a weights file of a trained small_cnn "
        "image tower (kitm.layers.save_image_backbone), such as the things world's pretrained tower."))
    small_cnn_pooled: bool = setting(False, help=(
        "small_cnn: its head also reads each channel's maximum over the grid (what is in the picture wherever it is; "
        "the things world's categories anywhere), beside the flattened grid (where)."))
    finetune_backbone: bool = setting(False, "Train the ResNet backbone too (VSE++ 'FT').")
    embedding_dim: int = setting(1024, "Joint embedding size D.", lower=1)
    word_dim: int = setting(300, "Word embedding size.", lower=1)
    text_units: int = setting(512, "GRU units per direction.", lower=1)
    # keras-hub towers (kitm.layers.hub_towers): image_encoder="hub" / text_encoder="hub" with a preset handle or a
    # local preset directory each, or joint_preset (one CLIP or SigLIP preset: both towers, projections, logit scale).
    # text_encoder is a name, not a Literal: register_text_encoder adds choices.
    text_encoder: str = setting("gru", help=(
        "Text tower: gru (word embeddings + BiGRU on the training vocabulary), hub (--text_preset), or one registered "
        "with kitm.experiment.register_text_encoder."))
    image_preset: str | None = setting(None, help=(
        "--image_encoder=hub: keras-hub preset handle (CLIP/SigLIP vision, ViT, DINOv2, ResNet; downloads on first "
        "use) or a local preset directory."))
    text_preset: str | None = setting(None, help=(
        "--text_encoder=hub: keras-hub preset handle (CLIP/SigLIP text, BERT, MiniLM-style BERT) or a local preset "
        "directory; its tokenizer runs in the input pipeline and the SavedModel."))
    joint_preset: str | None = setting(None, help=(
        "One CLIP or SigLIP preset (handle or local directory) for both towers, their projections and the logit scale: "
        "training starts from its joint space (sets --embedding_dim)."))
    freeze_image_tower: bool = setting(False, help=(
        "Keep the image tower's weights as loaded (LiT); its projection still trains."))
    freeze_text_tower: bool = setting(False, "Keep the text tower's weights as loaded.")
    image_tower_lr_multiplier: float = setting(1.0, lower=0.0, help=(
        "The image tower's learning rate is --learning_rate x this (e.g. 0.1 for a pretrained tower)."))
    text_tower_lr_multiplier: float = setting(1.0, lower=0.0, help=(
        "The text tower's learning rate is --learning_rate x this."))
    lora_rank: int = setting(0, lower=0, help=(
        "keras-hub towers: train rank-N low-rank adapters (LoRA) on each tower's attention query and value "
        "projections, keras-hub's enable_lora, with the rest of the tower frozen; the projections into the joint "
        "space still train. Checkpoints hold the adapters, the SavedModel and .keras files the merged weights. "
        "0: off (the towers train, or not, as --freeze_*_tower say). docs/fine-tuning-clip.md."))
    text_bidirectional: bool = setting(True, help=(
        "Bidirectional GRU text tower (the papers'); false: one forward GRU, as the VSE++ reference code."))
    # auto is packed unless XLA compiles the step: the fastest correct path by default (issue 33); runs trained
    # before it (masked) repeat with --text_recurrence=masked.
    text_recurrence: Literal["auto", "masked", "packed"] = setting("auto", help=(
        "GRU text tower: masked (Keras' GRU over every caption to the batch's longest) or packed (each caption only to "
        "its own end, as PyTorch's packed sequences; equal to float rounding, faster on a CPU; not with "
        "--jit_compile=true); auto: packed on TensorFlow, masked with --jit_compile=true and on the other backends. "
        "docs/performance.md."))


@dataclasses.dataclass(frozen=True)
class ObjectiveConfig(_Section):
    """The losses (kitm.experiment.objectives) and every method's own settings."""

    loss: tuple[str, ...] = setting(("triplet",), help=(
        "Training objective, one or several losses summed: triplet (VSE++); sam (triplet + sam_weight x the semantic "
        "adaptive margin); ladder (fixed thresholds) or ladder_adaptive (k-means levels), the ladder loss; angular "
        "(N-pair, symmetric) or neighborhood (angular + semantic-neighbour terms, with neighbour-aware batching), "
        "semantic neighbourhoods; centers (adaptive-margin triplet + semantic centres + image-index cross-entropy, "
        "trained in the three --center_phase_epochs phases): semantic centres, alone; infonce (CLIP), siglip (SigLIP) "
        "or graded_infonce (InfoNCE with soft targets from the relevance), contrastive with a learnable temperature. "
        "sam, the ladders and graded_infonce need --relevance. Example: --loss=triplet,ladder --loss_weights=1,0.5."))
    loss_weights: tuple[float, ...] = setting((), "One weight per --loss entry (default 1 each).")
    objective_module: tuple[str, ...] = setting((), help=(
        "Python modules to import before --loss is read (comma-separated, e.g. my_package.losses): each registers "
        "its own losses with kitm.experiment.register_objective when imported, so --loss can name them."))
    margin: float = setting(0.2, "Triplet margin (also SAM's triplet part and the first ladder).", lower=0.0, why=(
        "a hinge margin: [m + s(negative) - s(positive)]+ with m < 0 rewards ranking the negative above the positive"))
    max_violation: bool = setting(True, help=(
        "Hardest negative (VSE++) instead of the sum over negatives, in the triplet, SAM's triplet part and the "
        "ladder's first rung."))
    hardest_warmup_epochs: float = setting(0.0, lower=0.0, help=(
        "Hardest-negative warm-up for every loss that has such terms (--max_violation, the ladder's first rung, "
        "--sam_sampling=hardest): for this many epochs they use the sum over negatives (random negatives for the "
        "samplers) before switching to the hardest negative (VSE-infinity practice for encoders that start from random "
        "weights; kitm.losses.base)."))
    false_negatives: Literal["keep", "mask", "positive"] = setting("keep", help=(
        "In-batch candidates the relevance flags as false negatives (--false_negative_rule): keep them as negatives, "
        "mask them out of the negatives, or count them as positives; for infonce, siglip, graded_infonce, triplet "
        "and sam (the triplet and sam treat positive as mask). Needs --relevance. docs/methods.md#false-negatives."))
    false_negative_rule: Literal["threshold", "above_positive"] = setting("threshold", help=(
        "Which candidates --false_negatives flags: relevance >= --false_negative_threshold, or above the anchor's "
        "own positive's relevance less --false_negative_margin (GISTEmbed's guide-model rule; the guide is the "
        "relevance source, a sentence model with --relevance=sbert)."))
    false_negative_threshold: float = setting(0.8, help=(
        "--false_negative_rule=threshold: the relevance from which a candidate is flagged, on the source's own scale "
        "(truth and sbert about [0, 1], cider about [0, 10]); tune it on validation."))
    false_negative_margin: float = setting(0.0, lower=0.0, help=(
        "--false_negative_rule=above_positive: flagged when the relevance exceeds the positive's less this margin "
        "(sentence-transformers' GISTEmbedLoss, margin_strategy=absolute)."))
    sam_tau: float = setting(5.0, "SAM: margin = min((R[p,p] - R[p,n]) / tau, 1).", lower=1e-06)
    sam_weight: float = setting(1.0, "SAM: weight of the adaptive-margin term beside the triplet.", lower=0.0)
    sam_sampling: Literal["hardest", "easiest", "random"] = setting("hardest", "SAM: negative sampling.")
    sam_pairing: Literal["matched", "reference"] = setting("matched", help=(
        "SAM: each margin with its own negative (matched) or the reference code's (docs/methods.md#sam)."))
    ladder_thresholds: tuple[float, ...] = setting((0.40,), "Fixed ladder: relevance thresholds, decreasing.")
    ladder_margins: tuple[float, ...] = setting((0.2, 0.01), "Fixed ladder: one margin per level (thresholds + 1).")
    ladder_betas: tuple[float, ...] = setting((1.0, 0.25), "Fixed ladder: one weight per level (thresholds + 1).")
    ladder_level_bounds: tuple[int, ...] = setting((2, 4), "Adaptive ladder: (L_min, L_max) for the k-means levels.")
    ladder_lloyd_runs: int = setting(1, lower=0, help=(
        "Adaptive ladder and ladder re-clustering: Lloyd runs from k-means++ seeds scored beside the exact 1-D k-means "
        "optimum, per query and k; the higher silhouette is kept (kitm.ops.auto_kmeans_1d; 0: the exact optimum "
        "only)."))
    ladder_recluster_every: int = setting(0, lower=0, help=(
        "Fixed ladder: every this many batches re-derive the thresholds from the relevance values seen since (1-D "
        "k-means + silhouette; 0: keep them fixed)."))
    angle_degrees: float = setting(45.0, "Angular loss angle.", lower=1.0, upper=89.0)
    angular_form: Literal["npair", "hinge"] = setting("npair", help=(
        "Angular and neighbourhood losses: npair (Wang et al.'s log-sum-exp N-pair form, what the "
        "semantic-neighbourhood code trains) or hinge (the semantic-neighbourhood paper's Eq. 2 as printed; collapse "
        "is its global minimum)."))
    neighborhood_base: Literal["angular", "triplet"] = setting("angular", help=(
        "Neighbourhood loss: angular (Ang+NP+Sym) or the paper's triplet-based variant."))
    neighborhood_alpha: float | None = setting(None, lower=0.0, help=(
        "Weight of the text-neighbour term (default 0.2 angular / 0.3 triplet)."))
    neighborhood_beta: float | None = setting(None, lower=0.0, help=(
        "Weight of the image-neighbour term (default 0.3 angular / 0.1 triplet)."))
    neighbor_draw: Literal["mutual", "uniform"] = setting("mutual", help=(
        "Neighbour-aware batching: draw a seed's partner among its mutual neighbours when it has any (mutual) or among "
        "all its k neighbours (uniform)."))
    neighbor_space: Literal["text", "image"] = setting("text", help=(
        "Neighbourhood loss: where each pair's neighbours were found: text (the records' neighbors rows, "
        "sentence-embedding space; the semantic-neighbourhood paper's main method) or image (the records' "
        "image_neighbors rows, an image feature space; its 'Img NNs' variant, built with python -m kitm.data.build "
        "--image_neighbors=backbone|pixels|features)."))
    center_phase_epochs: tuple[int, ...] = setting((30, 15, 10), help=(
        "--loss=centers (semantic centres): epochs of its three phases, 1 unquantized centres, 2 the quantizer alone "
        "(model frozen), 3 end to end with adaptive margins; 0 skips a phase. Replaces --epochs."))
    center_phase2_learning_rate: float = setting(2e-5, lower=0.0, upper=1.0, why=ADAM_RATE, help=(
        "--loss=centers: Adam rate of phase 2 (phase 1 uses --learning_rate)."))
    center_phase3_learning_rate: float = setting(2e-5, "--loss=centers: Adam rate of phase 3.", lower=0.0, upper=1.0,
                                                 why=ADAM_RATE)
    center_learning_rate: float = setting(0.5, lower=0.0, help=(
        "--loss=centers: SGD rate of the semantic centres (per-image and quantized), on the batch-mean centre loss."))
    center_delta: float = setting(0.1, lower=0.0, help=(
        "--loss=centers: hinge radius delta of the centre losses (squared L2)."))
    num_quantized_centers: int = setting(1000, lower=1, help=(
        "--loss=centers: N_q, the quantized centres of phases 2-3, started by k-means over the per-image centres."))
    margin_update_every: int = setting(500, lower=1, help=(
        "--loss=centers, phase 3: adapt the margins every q batches (Eq. 13; r = 0.8, c = 1.03)."))
    center_triplet_sampling: Literal["random", "hardest", "easiest", "all"] = setting("random", help=(
        "--loss=centers: the triplet's negatives: one random in-batch negative per anchor (the paper), the hardest, "
        "the easiest, or all (the sum over the batch's negatives)."))
    center_term_weights: tuple[float, ...] = setting((1.0, 1.0, 1.0), help=(
        "--loss=centers: weights of its three terms, the triplet, the centre loss (per-image in phase 1, quantized in "
        "phases 2-3) and the image-index cross-entropy (the paper: 1,1,1)."))
    margin_max: float = setting(1.0, "--loss=centers, phase 3: cap of the adaptive margins.", lower=0.0)
    logit_scale_init: float = setting(1.0 / 0.07, lower=1e-06, help=(
        "--loss=infonce, graded_infonce: exp(t) at the start, the learnable logit scale (CLIP: 1/0.07)."))
    max_logit_scale: float = setting(100.0, lower=0.0, help=(
        "--loss=infonce, graded_infonce: clip of exp(t) (CLIP: 100; 0: no clip)."))
    siglip_logit_scale_init: float = setting(10.0, lower=1e-06, help=(
        "--loss=siglip: exp(t') at the start, the learnable logit scale (SigLIP: 10)."))
    siglip_bias_init: float = setting(-10.0, "--loss=siglip: the learnable logit bias b at the start (SigLIP: -10).")
    graded_tau: float = setting(0.1, lower=1e-06, help=(
        "--loss=graded_infonce: tau_R, temperature of the soft targets softmax(R'/tau_R), on the relevance's scale "
        "(small: InfoNCE)."))


@dataclasses.dataclass(frozen=True)
class TrainingConfig(_Section):
    """Optimisation, precision, distribution, fault tolerance and the collapse monitor."""

    epochs: int = setting(30, "Training epochs.", lower=1)
    batch_size: int = setting(128, "Global batch size (split over replicas).", lower=2)
    learning_rate: float = setting(2e-4, "Adam learning rate.", lower=0.0, upper=1.0, why=ADAM_RATE)
    lr_decay_epochs: int = setting(15, lower=0, help=(
        "Multiply the learning rate by lr_decay_factor every this many epochs (0: never)."))
    lr_decay_factor: float = setting(0.1, "Step decay factor.", lower=0.0, upper=1.0)
    grad_clip_norm: float = setting(2.0, "Clip the global gradient norm (VSE++: 2.0; 0 disables).", lower=0.0)
    lr_schedule: Literal["step", "cosine"] = setting("step", help=(
        "step: x lr_decay_factor every lr_decay_epochs; cosine: linear warm-up, then a cosine to 0."))
    warmup_epochs: float = setting(0.0, "Cosine schedule: linear warm-up over this many epochs.", lower=0.0)
    warmup_steps: int = setting(0, lower=0, help=(
        "Cosine schedule: linear warm-up over this many steps (instead of --warmup_epochs)."))
    mixed_precision: bool = setting(False, help=(
        "Compute in float16 (GPU) or bfloat16 (CPU) with float32 weights; losses stay float32."))
    jit_compile: Switch = setting("auto", help=(
        "XLA-compile the training step (auto: Keras' choice, on with a GPU, off on CPU)."))
    # auto: on wherever the fused kernel exists (the TensorFlow backend): the fastest correct path by default
    # (issue 33); runs trained before it (Keras' update for the papers' towers) repeat with --fused_update=false.
    fused_update: Switch = setting("auto", help=(
        "Adam's update of each variable with TensorFlow's fused Adam kernel (equal to float rounding, faster on a "
        "CPU; auto: on on the TensorFlow backend, Keras' Adam on JAX and PyTorch, where the kernel does not exist). "
        "docs/performance.md."))
    finetune_after_epochs: int = setting(0, lower=0, help=(
        "ResNet encoders: train with the backbone frozen for this many epochs, then fine-tune it too (VSE++ 'FT'; 0: "
        "never)."))
    finetune_learning_rate: float | None = setting(None, lower=0.0, upper=1.0, why=ADAM_RATE, help=(
        "Learning rate of the fine-tuning phase (default learning_rate / 10, as VSE++)."))
    seed: int = setting(0, "Seed for the synthetic world, data order, augmentation and initialisation.")
    deterministic_ops: bool = setting(False, help=(
        "tf.config.experimental.enable_op_determinism(): deterministic kernels and a serial input pipeline (slower; "
        "see kitm/training/reproducibility.py)."))
    strategy: Literal["default", "mirrored", "multi_worker"] = setting("default", help=(
        "default: one device; mirrored: all local GPUs (or --cpu_devices logical CPUs); multi_worker: "
        "MultiWorkerMirroredStrategy over the cluster in the TF_CONFIG environment variable. On JAX, mirrored is "
        "keras.distribution.DataParallel over every JAX device, multi_worker over every device of several JAX "
        "processes (--coordinator_address, --num_processes, --process_id, or Keras' KERAS_DISTRIBUTION_* "
        "variables, or TF_CONFIG). docs/scale.md."))
    coordinator_address: str = setting("", help=(
        "JAX, --strategy=multi_worker: host:port where process 0 coordinates the processes (with --num_processes "
        "and --process_id; empty: Keras' KERAS_DISTRIBUTION_* variables or TF_CONFIG say)."))
    num_processes: int = setting(0, lower=0, help=(
        "JAX, --strategy=multi_worker: how many processes train together (0: from the environment)."))
    process_id: int = setting(-1, lower=-1, help=(
        "JAX, --strategy=multi_worker: this process's index, 0 .. --num_processes - 1; 0 coordinates and writes "
        "the run directory (-1: from the environment)."))
    coordinator_timeout: int = setting(300, lower=1, help=(
        "JAX, --strategy=multi_worker: seconds a process waits for the coordinator and the other processes before "
        "it stops, naming the address."))
    negatives: Negatives = setting("auto", help=(
        "Negatives of the contrastive, triplet and SAM losses under several replicas: global (every row of the global "
        "batch, gathered from the other replicas with their gradients: the step of one device with the whole batch), "
        "local (a replica's own rows only), auto (global with several replicas when every --loss can gather, else "
        "local; on JAX with several devices always global: one loss spans them). docs/scale.md."))
    grad_cache_chunk: int = setting(0, lower=0, help=(
        "Gradient caching: embed each replica's batch in chunks of this many rows without keeping activations, take "
        "the loss over the whole batch, then back-propagate chunk by chunk (memory of one chunk, the gradients of the "
        "whole batch; about one more forward pass). Must divide the per-replica batch; 0: off. docs/scale.md."))
    backup_every_steps: int = setting(0, lower=0, help=(
        "Back up the training state every this many steps, so a killed run resumes close to where it stopped (0: at "
        "the end of each epoch)."))
    cpu_devices: int = setting(0, lower=0, help=(
        "Split the CPU into this many logical devices (on JAX: host devices through XLA_FLAGS, used where JAX runs "
        "on the CPU); 0: leave as is."))
    collapse_threshold: float = setting(0.9, lower=0.0, upper=1.0, help=(
        "Collapse monitor: warn when the mean pairwise cosine of a batch's image or caption embeddings (logged as "
        "collapse/image_cosine, collapse/text_cosine) exceeds this at the end of an epoch (0: no monitor)."))
    stop_on_collapse: bool = setting(False, "Collapse monitor: end the run at the first collapsed epoch.")
    progress: bool = setting(True, "Progress bars.")


@dataclasses.dataclass(frozen=True)
class EvaluationConfig(_Section):
    """Validation during training and the test at the end."""

    eval_every_epochs: int = setting(5, "Validation retrieval every this many epochs (0: never).", lower=0)
    eval_images: int = setting(1000, "Validation images used by the periodic evaluation.", lower=1)
    test_crops: int = setting(1, lower=1, help=(
        "Embed each evaluation/test image as the mean over this many random crops (the semantic-centres paper: 20; 1: "
        "the centre crop)."))
    projector_samples: int = setting(500, lower=0, help=(
        "Validation images (with their captions) in TensorBoard's embedding projector, written at each evaluation and "
        "at the end (0: none)."))
    eval_relevance: Literal["auto", Relevance] = setting("auto", help=(
        "Relevance behind the validation NCS, SR and CS figures (auto: truth when the dataset has it, else none)."))
    fold_images: int = setting(0, lower=0, help=(
        "The test at the end also reports R@K on folds of this many images, each ranking only its own images and "
        "captions, averaged over the folds (fold<F>_i2t_R@1, ..., fold<F>_rsum; 0: none)."))


@dataclasses.dataclass(frozen=True)
class ExportConfig(_Section):
    """The SavedModel written at the end."""

    export: bool = setting(True, "Export a SavedModel at the end.")
    export_onnx: bool = setting(False, "Also write the image and the text tower as ONNX files, <run_dir>/onnx/<n>/ "
                                       "beside the SavedModel export/<n>/ (docs/serving.md).")
    export_presets: bool = setting(False, "Also write the keras-hub towers as keras-hub presets, "
                                          "<run_dir>/presets/<n>/ beside export/<n>/ (docs/fine-tuning-clip.md).")


SECTIONS = {"data": DataConfig, "model": ModelConfig, "objective": ObjectiveConfig, "training": TrainingConfig,
            "evaluation": EvaluationConfig, "export": ExportConfig}
# setting name -> its section
SECTION_OF = {field.name: section for section, cls in SECTIONS.items() for field in dataclasses.fields(cls)}
SETTING_NAMES = tuple(sorted([*SECTION_OF, "run_dir"]))
RUN_DIR_HELP = ("Run directory (default runs/<dataset>); a finished run directory (with a summary.json) is refused: "
                "give a new one.")


def _settings() -> dict[str, Setting]:
    described = {}
    for section, cls in SECTIONS.items():
        hints = typing.get_type_hints(cls)
        for field in dataclasses.fields(cls):
            described[field.name] = describe(field.name, section, field, hints[field.name])
    described["run_dir"] = Setting("run_dir", None, None, RUN_DIR_HELP, str, optional=True)
    return dict(sorted(described.items()))


# Every setting's declaration by name (the launcher's flags are made from these).
SETTINGS: dict[str, Setting] = _settings()


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
    run_dir: str | None = None  # RUN_DIR_HELP
    explicit: frozenset[str] = frozenset()
    preset: frozenset[str] = frozenset()  # the settings filled on the user's behalf (the dataset's presets, ...)

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

    def fill(self, **settings) -> "ExperimentConfig":
        """A copy with `settings` (flat names) filled in on the user's behalf (a dataset's presets, what a joint
        preset implies): they are not counted as given, so a later check does not tell the user to drop them."""
        return self._with(settings, explicit=False)

    def _with(self, settings: Mapping[str, object], *, explicit: bool) -> "ExperimentConfig":
        grouped: dict[str, dict] = {}
        top = {}
        for name, value in settings.items():
            if name == "run_dir":
                top["run_dir"] = None if value is None else str(value)
                continue
            grouped.setdefault(_section(name), {})[name] = value
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

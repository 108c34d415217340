"""`python -m kitm.launch --flagfile=launch/demo.flags`: flags -> an experiment configuration -> `kitm.experiment.run`.

The only module of kitm that knows about absl flags, and all it does is translate them: every flag is a setting of
`kitm.experiment.ExperimentConfig` with the same name and default, the flags given on the command line or in a
flagfile are the settings given explicitly (the dataset's presets fill the others), and the library's errors are
shown with their settings written as flags. What a run does and writes is described in `kitm.experiment.runner`.
"""

from __future__ import annotations

import os

from kitm.tensorflow_logs import quiet_tensorflow_logs

quiet_tensorflow_logs()  # before TensorFlow is imported (by kitm.experiment below)
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import contextlib  # noqa: E402
import dataclasses  # noqa: E402
import sys  # noqa: E402

from absl import app, flags  # noqa: E402

from kitm.errors import KitmConfigError, KitmError  # noqa: E402
from kitm.experiment import config as experiment  # noqa: E402
from kitm.experiment import presets  # noqa: E402

FLAGS = flags.FLAGS
_FLAGS_BEFORE_KITM = set(FLAGS)


def _default(name: str):
    """The flag's default: the setting's default in kitm.experiment.config (lists of strings for list flags)."""
    section = experiment.SECTIONS[experiment.SECTION_OF[name]]
    value = next(field.default for field in dataclasses.fields(section) if field.name == name)
    return [str(item) for item in value] if isinstance(value, tuple) else value


# Data.
flags.DEFINE_string("dataset", _default("dataset"), "Dataset name: synthetic, or a built one (coco, f30k, f8k, ...).")
flags.DEFINE_string("data_dir", _default("data_dir"), "Folder of the built TFRecords (default tfrecords/<dataset>).")
flags.DEFINE_integer("synthetic_num_scenes", _default("synthetic_num_scenes"),
                     "Scenes in the synthetic world (built when absent).", lower_bound=10)
flags.DEFINE_float("train_fraction", _default("train_fraction"),
                   "Train on this fraction of the training images: a fixed subset, the images with the smallest ids "
                   "(evaluation splits unchanged; e.g. 0.1 for SAM's limited-data setting).",
                   lower_bound=1e-6, upper_bound=1.0)
flags.DEFINE_integer("train_subset_seed", _default("train_subset_seed"),
                     "With --train_fraction < 1: 0 keeps the images with the smallest ids; s > 0 a random subset of "
                     "the same size drawn with seed s (the same images on every machine).", lower_bound=0)
flags.DEFINE_integer("image_size", _default("image_size"), "Side of the square model input.", lower_bound=16)
flags.DEFINE_enum("captions_per_step", _default("captions_per_step"), ["sample", "all"],
                  "sample: one random caption per image per epoch; all: every caption is a sample.")
flags.DEFINE_enum("relevance", _default("relevance"), ["none", "truth", "cider", "sbert"],
                  "Relevance source of the batch relevance matrix: truth (the synthetic world's exact relevance), "
                  "cider (CIDEr-D with the training idf, SAM's source) or sbert (sentence-embedding cosine, the "
                  "ladder loss's source); cider and sbert need the dataset built with those relevance rows.")
flags.DEFINE_bool("flip", _default("flip"),
                  "Random horizontal flips in training (off for the synthetic world: left/right).")
flags.DEFINE_float("crop_area_min", _default("crop_area_min"),
                   "Smallest area share of the training random crop.", lower_bound=0.05, upper_bound=1.0)
flags.DEFINE_float("eval_crop_fraction", _default("eval_crop_fraction"),
                   "Centre crop side / shorter side at evaluation.", lower_bound=0.1, upper_bound=1.0)
flags.DEFINE_integer("max_caption_length", _default("max_caption_length"), "Tokens kept per caption.", lower_bound=1)
flags.DEFINE_integer("vocab_min_count", _default("vocab_min_count"),
                     "Words seen fewer times in training captions become [UNK].", lower_bound=1)
# Model.
flags.DEFINE_string("image_encoder", _default("image_encoder"), "Image tower, by its name in "
                    "kitm.experiment.encoders.IMAGE_ENCODERS: small_cnn, resnet50, resnet152, features_mlp, hub "
                    "(--image_preset), or one "
                    "registered with kitm.experiment.register_image_encoder.")
flags.DEFINE_string("weights", _default("weights"), "ResNet weights: imagenet, none, or a weights file.")
flags.DEFINE_bool("finetune_backbone", _default("finetune_backbone"), "Train the ResNet backbone too (VSE++ 'FT').")
flags.DEFINE_integer("embedding_dim", _default("embedding_dim"), "Joint embedding size D.", lower_bound=1)
flags.DEFINE_integer("word_dim", _default("word_dim"), "Word embedding size.", lower_bound=1)
flags.DEFINE_integer("text_units", _default("text_units"), "GRU units per direction.", lower_bound=1)
flags.DEFINE_enum("text_encoder", _default("text_encoder"), ["gru", "hub"],
                  "Text tower: gru (word embeddings + BiGRU on the training vocabulary) or hub (--text_preset).")
flags.DEFINE_string("image_preset", _default("image_preset"),
                    "--image_encoder=hub: keras-hub preset handle (CLIP/SigLIP vision, ViT, DINOv2, ResNet; downloads "
                    "on first use) or a local preset directory.")
flags.DEFINE_string("text_preset", _default("text_preset"),
                    "--text_encoder=hub: keras-hub preset handle (CLIP/SigLIP text, BERT, MiniLM-style BERT) or a "
                    "local preset directory; its tokenizer runs in the input pipeline and the SavedModel.")
flags.DEFINE_string("joint_preset", _default("joint_preset"),
                    "One CLIP or SigLIP preset (handle or local directory) for both towers, their projections and "
                    "the logit scale: training starts from its joint space (sets --embedding_dim).")
flags.DEFINE_bool("freeze_image_tower", _default("freeze_image_tower"),
                  "Keep the image tower's weights as loaded (LiT); its projection still trains.")
flags.DEFINE_bool("freeze_text_tower", _default("freeze_text_tower"), "Keep the text tower's weights as loaded.")
flags.DEFINE_float("image_tower_lr_multiplier", _default("image_tower_lr_multiplier"),
                   "The image tower's learning rate is --learning_rate x this (e.g. 0.1 for a pretrained tower).",
                   lower_bound=0.0)
flags.DEFINE_float("text_tower_lr_multiplier", _default("text_tower_lr_multiplier"),
                   "The text tower's learning rate is --learning_rate x this.", lower_bound=0.0)
flags.DEFINE_bool("text_bidirectional", _default("text_bidirectional"),
                  "Bidirectional GRU text tower (the papers'); false: one forward GRU, as the VSE++ reference code.")
flags.DEFINE_enum("text_recurrence", _default("text_recurrence"), ["masked", "packed"],
                  "GRU text tower: masked (Keras' GRU over every caption to the batch's longest) or packed (each "
                  "caption only to its own end, as PyTorch's packed sequences; equal to float rounding, faster on a CPU; "
                  "not with --jit_compile=true). docs/performance.md.")
# Objective.
flags.DEFINE_list("loss", _default("loss"),
                  "Training objective, one or several losses summed: triplet (VSE++); sam (triplet + sam_weight x the "
                  "semantic adaptive margin); ladder (fixed thresholds) or ladder_adaptive (k-means levels), the "
                  "ladder loss; angular (N-pair, symmetric) or neighborhood (angular + semantic-neighbour terms, with "
                  "neighbour-aware batching), semantic neighbourhoods; centers (adaptive-margin triplet + semantic "
                  "centres + image-index cross-entropy, trained in the three --center_phase_epochs phases): semantic "
                  "centres, alone; infonce (CLIP), siglip (SigLIP) or graded_infonce (InfoNCE with soft targets from "
                  "the relevance), contrastive with a learnable temperature. sam, the ladders and graded_infonce need "
                  "--relevance. Example: --loss=triplet,ladder --loss_weights=1,0.5.")
flags.DEFINE_list("loss_weights", _default("loss_weights"), "One weight per --loss entry (default 1 each).")
flags.DEFINE_float("margin", _default("margin"), "Triplet margin (also SAM's triplet part and the first ladder).")
flags.DEFINE_bool("max_violation", _default("max_violation"),
                  "Hardest negative (VSE++) instead of the sum over negatives, in the triplet, SAM's triplet part and "
                  "the ladder's first rung.")
flags.DEFINE_float("hardest_warmup_epochs", _default("hardest_warmup_epochs"),
                   "Hardest-negative warm-up for every loss that has such terms (--max_violation, the ladder's first "
                   "rung, --sam_sampling=hardest): for this many epochs they use the sum over negatives (random "
                   "negatives for the samplers) before switching to the hardest negative (VSE-infinity practice for "
                   "encoders that start from random weights; kitm.losses.base).", lower_bound=0.0)
flags.DEFINE_float("sam_tau", _default("sam_tau"), "SAM: margin = min((R[p,p] - R[p,n]) / tau, 1).", lower_bound=1e-6)
flags.DEFINE_float("sam_weight", _default("sam_weight"),
                   "SAM: weight of the adaptive-margin term beside the triplet.", lower_bound=0.0)
flags.DEFINE_enum("sam_sampling", _default("sam_sampling"), ["hardest", "easiest", "random"], "SAM: negative sampling.")
flags.DEFINE_enum("sam_pairing", _default("sam_pairing"), ["matched", "reference"],
                  "SAM: each margin with its own negative (matched) or the reference code's (docs/methods.md#sam).")
flags.DEFINE_list("ladder_thresholds", _default("ladder_thresholds"), "Fixed ladder: relevance thresholds, decreasing.")
flags.DEFINE_list("ladder_margins", _default("ladder_margins"), "Fixed ladder: one margin per level (thresholds + 1).")
flags.DEFINE_list("ladder_betas", _default("ladder_betas"), "Fixed ladder: one weight per level (thresholds + 1).")
flags.DEFINE_list("ladder_level_bounds", _default("ladder_level_bounds"),
                  "Adaptive ladder: (L_min, L_max) for the k-means levels.")
flags.DEFINE_integer("ladder_lloyd_runs", _default("ladder_lloyd_runs"),
                     "Adaptive ladder and ladder re-clustering: Lloyd runs from k-means++ seeds scored beside the "
                     "exact 1-D k-means optimum, per query and k; the higher silhouette is kept "
                     "(kitm.ops.auto_kmeans_1d; 0: the exact optimum only).", lower_bound=0)
flags.DEFINE_integer("ladder_recluster_every", _default("ladder_recluster_every"),
                     "Fixed ladder: every this many batches re-derive the thresholds from the relevance values seen "
                     "since (1-D k-means + silhouette; 0: keep them fixed).", lower_bound=0)
flags.DEFINE_float("angle_degrees", _default("angle_degrees"), "Angular loss angle.", lower_bound=1.0, upper_bound=89.0)
flags.DEFINE_enum("angular_form", _default("angular_form"), ["npair", "hinge"],
                  "Angular and neighbourhood losses: npair (Wang et al.'s log-sum-exp N-pair form, what the "
                  "semantic-neighbourhood code trains) or hinge (the semantic-neighbourhood paper's Eq. 2 as printed; "
                  "collapse is its global minimum).")
flags.DEFINE_enum("neighborhood_base", _default("neighborhood_base"), ["angular", "triplet"],
                  "Neighbourhood loss: angular (Ang+NP+Sym) or the paper's triplet-based variant.")
flags.DEFINE_float("neighborhood_alpha", _default("neighborhood_alpha"),
                   "Weight of the text-neighbour term (default 0.2 angular / 0.3 triplet).", lower_bound=0.0)
flags.DEFINE_float("neighborhood_beta", _default("neighborhood_beta"),
                   "Weight of the image-neighbour term (default 0.3 angular / 0.1 triplet).", lower_bound=0.0)
flags.DEFINE_enum("neighbor_draw", _default("neighbor_draw"), ["mutual", "uniform"],
                  "Neighbour-aware batching: draw a seed's partner among its mutual neighbours when it has any "
                  "(mutual) or among all its k neighbours (uniform).")
flags.DEFINE_enum("neighbor_space", _default("neighbor_space"), ["text", "image"],
                  "Neighbourhood loss: where each pair's neighbours were found: text (the records' neighbors rows, "
                  "sentence-embedding space; the semantic-neighbourhood paper's main method) or image (the records' "
                  "image_neighbors rows, an image feature space; its 'Img NNs' variant, built with python -m "
                  "kitm.data.build --image_neighbors=backbone|pixels|features).")
flags.DEFINE_list("center_phase_epochs", _default("center_phase_epochs"),
                  "--loss=centers (semantic centres): epochs of its three phases, 1 unquantized centres, 2 the "
                  "quantizer alone (model frozen), 3 end to end with adaptive margins; 0 skips a phase. Replaces "
                  "--epochs.")
flags.DEFINE_float("center_phase2_learning_rate", _default("center_phase2_learning_rate"),
                   "--loss=centers: Adam rate of phase 2 (phase 1 uses --learning_rate).", lower_bound=0.0)
flags.DEFINE_float("center_phase3_learning_rate", _default("center_phase3_learning_rate"),
                   "--loss=centers: Adam rate of phase 3.", lower_bound=0.0)
flags.DEFINE_float("center_learning_rate", _default("center_learning_rate"),
                   "--loss=centers: SGD rate of the semantic centres (per-image and quantized), on the batch-mean "
                   "centre loss.", lower_bound=0.0)
flags.DEFINE_float("center_delta", _default("center_delta"),
                   "--loss=centers: hinge radius delta of the centre losses (squared L2).", lower_bound=0.0)
flags.DEFINE_integer("num_quantized_centers", _default("num_quantized_centers"),
                     "--loss=centers: N_q, the quantized centres of phases 2-3, started by k-means over the per-image "
                     "centres.", lower_bound=1)
flags.DEFINE_integer("margin_update_every", _default("margin_update_every"),
                     "--loss=centers, phase 3: adapt the margins every q batches (Eq. 13; r = 0.8, c = 1.03).",
                     lower_bound=1)
flags.DEFINE_enum("center_triplet_sampling", _default("center_triplet_sampling"),
                  ["random", "hardest", "easiest", "all"],
                  "--loss=centers: the triplet's negatives: one random in-batch negative per anchor (the paper), the "
                  "hardest, the easiest, or all (the sum over the batch's negatives).")
flags.DEFINE_list("center_term_weights", _default("center_term_weights"),
                  "--loss=centers: weights of its three terms, the triplet, the centre loss (per-image in phase 1, "
                  "quantized in phases 2-3) and the image-index cross-entropy (the paper: 1,1,1).")
flags.DEFINE_float("margin_max", _default("margin_max"),
                   "--loss=centers, phase 3: cap of the adaptive margins.", lower_bound=0.0)
flags.DEFINE_float("logit_scale_init", _default("logit_scale_init"),
                   "--loss=infonce, graded_infonce: exp(t) at the start, the learnable logit scale (CLIP: 1/0.07).",
                   lower_bound=1e-6)
flags.DEFINE_float("max_logit_scale", _default("max_logit_scale"),
                   "--loss=infonce, graded_infonce: clip of exp(t) (CLIP: 100; 0: no clip).", lower_bound=0.0)
flags.DEFINE_float("siglip_logit_scale_init", _default("siglip_logit_scale_init"),
                   "--loss=siglip: exp(t') at the start, the learnable logit scale (SigLIP: 10).", lower_bound=1e-6)
flags.DEFINE_float("siglip_bias_init", _default("siglip_bias_init"),
                   "--loss=siglip: the learnable logit bias b at the start (SigLIP: -10).")
flags.DEFINE_float("graded_tau", _default("graded_tau"),
                   "--loss=graded_infonce: tau_R, temperature of the soft targets softmax(R'/tau_R), on the "
                   "relevance's scale (small: InfoNCE).", lower_bound=1e-6)
# Optimisation.
flags.DEFINE_integer("epochs", _default("epochs"), "Training epochs.", lower_bound=1)
flags.DEFINE_integer("batch_size", _default("batch_size"), "Global batch size (split over replicas).", lower_bound=2)
flags.DEFINE_float("learning_rate", _default("learning_rate"), "Adam learning rate.", lower_bound=0.0)
flags.DEFINE_integer("lr_decay_epochs", _default("lr_decay_epochs"),
                     "Multiply the learning rate by lr_decay_factor every this many epochs (0: never).", lower_bound=0)
flags.DEFINE_float("lr_decay_factor", _default("lr_decay_factor"),
                   "Step decay factor.", lower_bound=0.0, upper_bound=1.0)
flags.DEFINE_float("grad_clip_norm", _default("grad_clip_norm"),
                   "Clip the global gradient norm (VSE++: 2.0; 0 disables).", lower_bound=0.0)
flags.DEFINE_enum("lr_schedule", _default("lr_schedule"), ["step", "cosine"],
                  "step: x lr_decay_factor every lr_decay_epochs; cosine: linear warm-up, then a cosine to 0.")
flags.DEFINE_float("warmup_epochs", _default("warmup_epochs"),
                   "Cosine schedule: linear warm-up over this many epochs.", lower_bound=0.0)
flags.DEFINE_integer("warmup_steps", _default("warmup_steps"),
                     "Cosine schedule: linear warm-up over this many steps (instead of --warmup_epochs).",
                     lower_bound=0)
flags.DEFINE_bool("mixed_precision", _default("mixed_precision"),
                  "Compute in float16 (GPU) or bfloat16 (CPU) with float32 weights; losses stay float32.")
flags.DEFINE_enum("jit_compile", _default("jit_compile"), ["auto", "true", "false"],
                  "XLA-compile the training step (auto: Keras' choice, on with a GPU, off on CPU).")
flags.DEFINE_enum("fused_update", _default("fused_update"), ["auto", "true", "false"],
                  "Adam's update of each variable with TensorFlow's fused Adam kernel (equal to float rounding, "
                  "faster for big towers on a CPU; auto: on for keras-hub towers, off for the papers' towers). "
                  "docs/performance.md.")
flags.DEFINE_integer("finetune_after_epochs", _default("finetune_after_epochs"),
                     "ResNet encoders: train with the backbone frozen for this many epochs, then fine-tune it too "
                     "(VSE++ 'FT'; 0: never).", lower_bound=0)
flags.DEFINE_float("finetune_learning_rate", _default("finetune_learning_rate"),
                   "Learning rate of the fine-tuning phase (default learning_rate / 10, as VSE++).", lower_bound=0.0)
flags.DEFINE_integer("seed", _default("seed"),
                     "Seed for the synthetic world, data order, augmentation and initialisation.")
flags.DEFINE_bool("deterministic_ops", _default("deterministic_ops"),
                  "tf.config.experimental.enable_op_determinism(): deterministic kernels and a serial input pipeline "
                  "(slower; see kitm/training/reproducibility.py).")
# Distribution and fault tolerance.
flags.DEFINE_enum("strategy", _default("strategy"), ["default", "mirrored", "multi_worker"],
                  "default: one device; mirrored: all local GPUs (or --cpu_devices logical CPUs); multi_worker: "
                  "MultiWorkerMirroredStrategy over the cluster in the TF_CONFIG environment variable.")
flags.DEFINE_enum("negatives", _default("negatives"), ["auto", "global", "local"],
                  "Negatives of the contrastive, triplet and SAM losses under several replicas: global (every row of "
                  "the global batch, gathered from the other replicas with their gradients: the step of one device "
                  "with the whole batch), local (a replica's own rows only), auto (global with several replicas when "
                  "every --loss can gather, else local). docs/scale.md.")
flags.DEFINE_integer("grad_cache_chunk", _default("grad_cache_chunk"),
                     "Gradient caching: embed each replica's batch in chunks of this many rows without keeping "
                     "activations, take the loss over the whole batch, then back-propagate chunk by chunk (memory of "
                     "one chunk, the gradients of the whole batch; about one more forward pass). Must divide the "
                     "per-replica batch; 0: off. docs/scale.md.", lower_bound=0)
flags.DEFINE_integer("backup_every_steps", _default("backup_every_steps"),
                     "Back up the training state every this many steps, so a killed run resumes close to where it "
                     "stopped (0: at the end of each epoch).", lower_bound=0)
flags.DEFINE_integer("cpu_devices", _default("cpu_devices"),
                     "Split the CPU into this many logical devices (0: leave as is).", lower_bound=0)
# Output.
flags.DEFINE_integer("eval_every_epochs", _default("eval_every_epochs"),
                     "Validation retrieval every this many epochs (0: never).", lower_bound=0)
flags.DEFINE_integer("eval_images", _default("eval_images"),
                     "Validation images used by the periodic evaluation.", lower_bound=1)
flags.DEFINE_integer("test_crops", _default("test_crops"),
                     "Embed each evaluation/test image as the mean over this many random crops (the semantic-centres "
                     "paper: 20; 1: the centre crop).", lower_bound=1)
flags.DEFINE_integer("projector_samples", _default("projector_samples"),
                     "Validation images (with their captions) in TensorBoard's embedding projector, written at each "
                     "evaluation and at the end (0: none).", lower_bound=0)
flags.DEFINE_enum("eval_relevance", _default("eval_relevance"), ["auto", "none", "truth", "cider", "sbert"],
                  "Relevance behind the validation NCS, SR and CS figures (auto: truth when the dataset has it, "
                  "else none).")
flags.DEFINE_integer("fold_images", _default("fold_images"),
                     "The test at the end also reports R@K on folds of this many images, each ranking only its own "
                     "images and captions, averaged over the folds (fold<F>_i2t_R@1, ..., fold<F>_rsum; 0: none).",
                     lower_bound=0)
flags.DEFINE_bool("export", _default("export"), "Export a SavedModel at the end.")
flags.DEFINE_bool("progress", _default("progress"), "Progress bars.")
flags.DEFINE_float("collapse_threshold", _default("collapse_threshold"),
                   "Collapse monitor: warn when the mean pairwise cosine of a batch's image or caption embeddings "
                   "(logged as collapse/image_cosine, collapse/text_cosine) exceeds this at the end of an epoch (0: "
                   "no monitor).", lower_bound=0.0, upper_bound=1.0)
flags.DEFINE_bool("stop_on_collapse", _default("stop_on_collapse"),
                  "Collapse monitor: end the run at the first collapsed epoch.")
flags.DEFINE_string("run_dir", None, "Run directory (default runs/<dataset>); a finished run directory (with a "
                    "summary.json) is refused: give a new one.")


KITM_FLAG_NAMES = sorted(set(FLAGS) - _FLAGS_BEFORE_KITM)


class LaunchError(KitmConfigError):
    """A problem with the flags or the data that stops the run before it starts (its message names the flags)."""


# List flags and the type of their items.
_LIST_ITEM_TYPES = {"loss": str, "loss_weights": float, "ladder_thresholds": float, "ladder_margins": float,
                    "ladder_betas": float, "ladder_level_bounds": lambda text: int(float(text)),
                    "center_phase_epochs": int, "center_term_weights": float}


def _setting(name: str):
    value = FLAGS[name].value
    if name in _LIST_ITEM_TYPES:
        try:
            return tuple(_LIST_ITEM_TYPES[name](item) for item in value)
        except ValueError as error:
            raise LaunchError(f"--{name}={','.join(value)}: {error}") from error
    return value


def experiment_config() -> experiment.ExperimentConfig:
    """The parsed flags as an experiment configuration: the flags given (command line or flagfile) are its explicit
    settings, the dataset's presets fill the rest."""
    given = {name: _setting(name) for name in KITM_FLAG_NAMES if FLAGS[name].present}
    dataset = given.pop("dataset", FLAGS.dataset)
    with flag_errors():
        return presets.experiment_config(dataset, **given)


@contextlib.contextmanager
def flag_errors():
    """Library errors raised inside, re-raised as LaunchError with their settings written as flags."""
    try:
        yield
    except LaunchError:
        raise
    except KitmError as error:
        raise LaunchError(error.for_flags()) from error


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    from absl import logging

    from kitm.experiment import run

    # absl's INFO lines (SavedModel writing, signature renaming) drown the run's own output.
    logging.set_verbosity(logging.WARNING)
    try:
        with flag_errors():
            run(experiment_config())
    except KitmError as error:
        print(f"kitm.launch: error: {error.for_flags()}", file=sys.stderr)
        sys.exit(2)


def run():
    """Console entry point (`kitm-launch`)."""
    app.run(main)


if __name__ == "__main__":
    run()

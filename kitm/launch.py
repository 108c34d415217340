"""`python -m kitm.launch --flagfile=launch/demo.flags`: flags -> data -> model -> strategy -> train -> evaluate -> export.

The only module of kitm that knows about absl flags. Everything it builds is importable and usable without it.
A run directory holds:
    vocabulary.txt          the caption vocabulary (also inside the SavedModel)
    logs/                   TensorBoard: every loss term, learning rate, relevance statistics, validation
                            retrieval figures, hparams (flags + test figures), projector/ (embeddings)
    checkpoints/            weights after every epoch (last.weights.h5)
    backup/                 BackupAndRestore state: a killed run started again resumes here (at its last
                            backed-up step; removed when the run completes)
    evaluations.jsonl       one line per validation evaluation
    summary.json            flags, data, timings and the final test figures
    export/<n>/             the SavedModels (encode_text, encode_image, score); each export adds a version
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import json  # noqa: E402
import pathlib  # noqa: E402
import platform  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

from absl import app, flags  # noqa: E402

FLAGS = flags.FLAGS
_FLAGS_BEFORE_KITM = set(FLAGS)

# Data.
flags.DEFINE_string("dataset", "synthetic", "Dataset name: synthetic, or a built one (coco, f30k, f8k, ...).")
flags.DEFINE_string("data_dir", None, "Folder of the built TFRecords (default tfrecords/<dataset>).")
flags.DEFINE_integer("synthetic_num_scenes", 3000, "Scenes in the synthetic world (built when absent).",
                     lower_bound=10)
flags.DEFINE_float("train_fraction", 1.0, "Train on this fraction of the training images: a fixed subset, the "
                   "images with the smallest ids (evaluation splits unchanged; e.g. 0.1 for SAM's limited-data "
                   "setting).", lower_bound=1e-6, upper_bound=1.0)
flags.DEFINE_integer("image_size", 64, "Side of the square model input.", lower_bound=16)
flags.DEFINE_enum("captions_per_step", "sample", ["sample", "all"],
                  "sample: one random caption per image per epoch; all: every caption is a sample.")
flags.DEFINE_enum("relevance", "none", ["none", "truth", "cider", "sbert"],
                  "Relevance source of the batch relevance matrix: truth (the synthetic world's exact relevance), "
                  "cider (CIDEr-D with the training idf, SAM's source) or sbert (sentence-embedding cosine, the "
                  "ladder loss's source); cider and sbert need the dataset built with those relevance rows.")
flags.DEFINE_bool("flip", True, "Random horizontal flips in training (off for the synthetic world: left/right).")
flags.DEFINE_float("crop_area_min", 0.8, "Smallest area share of the training random crop.", lower_bound=0.05,
                   upper_bound=1.0)
flags.DEFINE_float("eval_crop_fraction", 0.875, "Centre crop side / shorter side at evaluation.", lower_bound=0.1,
                   upper_bound=1.0)
flags.DEFINE_integer("max_caption_length", 32, "Tokens kept per caption.", lower_bound=1)
flags.DEFINE_integer("vocab_min_count", 1, "Words seen fewer times in training captions become [UNK].",
                     lower_bound=1)
# Model.
flags.DEFINE_enum("image_encoder", "small_cnn", ["small_cnn", "resnet50", "resnet152", "features_mlp"],
                  "Image tower.")
flags.DEFINE_string("weights", "imagenet", "ResNet weights: imagenet, none, or a weights file.")
flags.DEFINE_bool("finetune_backbone", False, "Train the ResNet backbone too (VSE++ 'FT').")
flags.DEFINE_integer("embedding_dim", 1024, "Joint embedding size D.", lower_bound=1)
flags.DEFINE_integer("word_dim", 300, "Word embedding size.", lower_bound=1)
flags.DEFINE_integer("text_units", 512, "GRU units per direction.", lower_bound=1)
# Objective.
flags.DEFINE_list("loss", ["triplet"],
                  "Training objective, one or several losses summed: triplet (VSE++); sam (triplet + sam_weight x "
                  "SAM, seeds 000/002); ladder (fixed thresholds) or ladder_adaptive (k-means levels), seed 001; "
                  "angular (N-pair, symmetric) or neighborhood (angular + semantic-neighbour terms, with "
                  "neighbour-aware batching), seed 004; centers (adaptive-margin triplet + semantic centres + "
                  "image-index cross-entropy, trained in the three --center_phase_epochs phases), seed 003, alone. "
                  "sam and the ladders need --relevance. Example: "
                  "--loss=triplet,ladder --loss_weights=1,0.5.")
flags.DEFINE_list("loss_weights", [], "One weight per --loss entry (default 1 each).")
flags.DEFINE_float("margin", 0.2, "Triplet margin (also SAM's triplet part and the first ladder).")
flags.DEFINE_bool("max_violation", True, "Hardest negative (VSE++) instead of the sum over negatives, in the "
                  "triplet, SAM's triplet part and the ladder's first rung.")
flags.DEFINE_float("hardest_warmup_epochs", 0.0, "Hardest-negative warm-up for every loss that has such terms "
                   "(--max_violation, the ladder's first rung, --sam_sampling=hardest): for this many epochs they "
                   "use the sum over negatives (random negatives for the samplers) before switching to the "
                   "hardest negative (VSE-infinity practice for encoders that start from random weights; "
                   "kitm.losses.base).", lower_bound=0.0)
flags.DEFINE_float("sam_tau", 5.0, "SAM: margin = min((R[p,p] - R[p,n]) / tau, 1).", lower_bound=1e-6)
flags.DEFINE_float("sam_weight", 1.0, "SAM: weight of the adaptive-margin term beside the triplet.", lower_bound=0.0)
flags.DEFINE_enum("sam_sampling", "hardest", ["hardest", "easiest", "random"], "SAM: negative sampling.")
flags.DEFINE_enum("sam_pairing", "matched", ["matched", "reference"],
                  "SAM: each margin with its own negative (matched) or the reference code's pairing (METHODS.md).")
flags.DEFINE_list("ladder_thresholds", ["0.40"], "Fixed ladder: relevance thresholds, decreasing.")
flags.DEFINE_list("ladder_margins", ["0.2", "0.01"], "Fixed ladder: one margin per level (thresholds + 1).")
flags.DEFINE_list("ladder_betas", ["1.0", "0.25"], "Fixed ladder: one weight per level (thresholds + 1).")
flags.DEFINE_list("ladder_level_bounds", ["2", "4"], "Adaptive ladder: (L_min, L_max) for the k-means levels.")
flags.DEFINE_integer("ladder_lloyd_runs", 1, "Adaptive ladder and ladder re-clustering: Lloyd runs from k-means++ "
                     "seeds scored beside the exact 1-D k-means optimum, per query and k; the higher silhouette is "
                     "kept (kitm.ops.auto_kmeans_1d; 0: the exact optimum only).", lower_bound=0)
flags.DEFINE_integer("ladder_recluster_every", 0, "Fixed ladder: every this many batches re-derive the thresholds "
                     "from the relevance values seen since (1-D k-means + silhouette; 0: keep them fixed).",
                     lower_bound=0)
flags.DEFINE_float("angle_degrees", 45.0, "Angular loss angle.", lower_bound=1.0, upper_bound=89.0)
flags.DEFINE_enum("angular_form", "npair", ["npair", "hinge"],
                  "Angular and neighbourhood losses: npair (Wang et al.'s log-sum-exp N-pair form, what seed 004's "
                  "code trains) or hinge (seed 004 Eq. 2 as printed; collapse is its global minimum).")
flags.DEFINE_enum("neighborhood_base", "angular", ["angular", "triplet"],
                  "Neighbourhood loss: angular (Ang+NP+Sym) or the paper's triplet-based variant.")
flags.DEFINE_float("neighborhood_alpha", None, "Weight of the text-neighbour term (default 0.2 angular / 0.3 "
                   "triplet).", lower_bound=0.0)
flags.DEFINE_float("neighborhood_beta", None, "Weight of the image-neighbour term (default 0.3 angular / 0.1 "
                   "triplet).", lower_bound=0.0)
flags.DEFINE_enum("neighbor_draw", "mutual", ["mutual", "uniform"],
                  "Neighbour-aware batching: draw a seed's partner among its mutual neighbours when it has any "
                  "(mutual) or among all its k neighbours (uniform).")
flags.DEFINE_enum("neighbor_space", "text", ["text", "image"],
                  "Neighbourhood loss: where each pair's neighbours were found: text (the records' neighbors rows, "
                  "sentence-embedding space; seed 004's main method) or image (the records' image_neighbors rows, "
                  "an image feature space; seed 004's 'Img NNs' variant, built with python -m kitm.data.build "
                  "--image_neighbors=backbone|pixels|features).")
flags.DEFINE_list("center_phase_epochs", ["30", "15", "10"],
                  "--loss=centers (seed 003): epochs of its three phases, 1 unquantized centres, 2 the quantizer alone "
                  "(model frozen), 3 end to end with adaptive margins; 0 skips a phase. Replaces --epochs.")
flags.DEFINE_float("center_phase2_learning_rate", 2e-5, "--loss=centers: Adam rate of phase 2 (phase 1 uses "
                   "--learning_rate).", lower_bound=0.0)
flags.DEFINE_float("center_phase3_learning_rate", 2e-5, "--loss=centers: Adam rate of phase 3.", lower_bound=0.0)
flags.DEFINE_float("center_learning_rate", 0.5, "--loss=centers: SGD rate of the semantic centres (per-image and "
                   "quantized), on the batch-mean centre loss.", lower_bound=0.0)
flags.DEFINE_float("center_delta", 0.1, "--loss=centers: hinge radius delta of the centre losses (squared L2).",
                   lower_bound=0.0)
flags.DEFINE_integer("num_quantized_centers", 1000, "--loss=centers: N_q, the quantized centres of phases 2-3, "
                     "started by k-means over the per-image centres.", lower_bound=1)
flags.DEFINE_integer("margin_update_every", 500, "--loss=centers, phase 3: adapt the margins every q batches "
                     "(Eq. 13; r = 0.8, c = 1.03).", lower_bound=1)
flags.DEFINE_enum("center_triplet_sampling", "random", ["random", "hardest", "easiest", "all"],
                  "--loss=centers: the triplet's negatives: one random in-batch negative per anchor (the paper), the "
                  "hardest, the easiest, or all (the sum over the batch's negatives).")
flags.DEFINE_float("margin_max", 1.0, "--loss=centers, phase 3: cap of the adaptive margins.", lower_bound=0.0)
# Optimisation.
flags.DEFINE_integer("epochs", 30, "Training epochs.", lower_bound=1)
flags.DEFINE_integer("batch_size", 128, "Global batch size (split over replicas).", lower_bound=2)
flags.DEFINE_float("learning_rate", 2e-4, "Adam learning rate.", lower_bound=0.0)
flags.DEFINE_integer("lr_decay_epochs", 15, "Multiply the learning rate by lr_decay_factor every this many epochs "
                     "(0: never).", lower_bound=0)
flags.DEFINE_float("lr_decay_factor", 0.1, "Step decay factor.", lower_bound=0.0, upper_bound=1.0)
flags.DEFINE_float("grad_clip_norm", 2.0, "Clip the global gradient norm (VSE++: 2.0; 0 disables).", lower_bound=0.0)
flags.DEFINE_enum("lr_schedule", "step", ["step", "cosine"],
                  "step: x lr_decay_factor every lr_decay_epochs; cosine: linear warm-up, then a cosine to 0.")
flags.DEFINE_float("warmup_epochs", 0.0, "Cosine schedule: linear warm-up over this many epochs.", lower_bound=0.0)
flags.DEFINE_integer("warmup_steps", 0, "Cosine schedule: linear warm-up over this many steps (instead of "
                     "--warmup_epochs).", lower_bound=0)
flags.DEFINE_bool("mixed_precision", False, "Compute in float16 (GPU) or bfloat16 (CPU) with float32 weights; "
                  "losses stay float32.")
flags.DEFINE_enum("jit_compile", "auto", ["auto", "true", "false"],
                  "XLA-compile the training step (auto: Keras' choice, on with a GPU, off on CPU).")
flags.DEFINE_integer("finetune_after_epochs", 0, "ResNet encoders: train with the backbone frozen for this many "
                     "epochs, then fine-tune it too (VSE++ 'FT'; 0: never).", lower_bound=0)
flags.DEFINE_float("finetune_learning_rate", None, "Learning rate of the fine-tuning phase (default "
                   "learning_rate / 10, as VSE++).", lower_bound=0.0)
flags.DEFINE_integer("seed", 0, "Seed for the synthetic world, data order, augmentation and initialisation.")
flags.DEFINE_bool("deterministic_ops", False, "tf.config.experimental.enable_op_determinism(): deterministic "
                  "kernels and a serial input pipeline (slower; see kitm/training/reproducibility.py).")
# Distribution and fault tolerance.
flags.DEFINE_enum("strategy", "default", ["default", "mirrored", "multi_worker"],
                  "default: one device; mirrored: all local GPUs (or --cpu_devices logical CPUs); multi_worker: "
                  "MultiWorkerMirroredStrategy over the cluster in the TF_CONFIG environment variable.")
flags.DEFINE_integer("backup_every_steps", 0, "Back up the training state every this many steps, so a killed run "
                     "resumes close to where it stopped (0: at the end of each epoch).", lower_bound=0)
flags.DEFINE_integer("cpu_devices", 0, "Split the CPU into this many logical devices (0: leave as is).",
                     lower_bound=0)
# Output.
flags.DEFINE_string("run_dir", None, "Run directory (default runs/<dataset>).")
flags.DEFINE_integer("eval_every_epochs", 5, "Validation retrieval every this many epochs (0: never).",
                     lower_bound=0)
flags.DEFINE_integer("eval_images", 1000, "Validation images used by the periodic evaluation.", lower_bound=1)
flags.DEFINE_integer("test_crops", 1, "Embed each evaluation/test image as the mean over this many random crops "
                     "(seed 003: 20; 1: the centre crop).", lower_bound=1)
flags.DEFINE_integer("projector_samples", 500, "Validation images (with their captions) in TensorBoard's "
                     "embedding projector, written at each evaluation and at the end (0: none).", lower_bound=0)
flags.DEFINE_enum("eval_relevance", "auto", ["auto", "none", "truth", "cider", "sbert"],
                  "Relevance behind the validation NCS, SR and CS figures (auto: truth when the dataset has it, "
                  "else none).")
flags.DEFINE_bool("export", True, "Export a SavedModel at the end.")
flags.DEFINE_bool("progress", True, "Progress bars.")
flags.DEFINE_float("collapse_threshold", 0.9, "Collapse monitor: warn when the mean pairwise cosine of a batch's "
                   "image or caption embeddings (logged as collapse/image_cosine, collapse/text_cosine) exceeds "
                   "this at the end of an epoch (0: no monitor).", lower_bound=0.0, upper_bound=1.0)
flags.DEFINE_bool("stop_on_collapse", False, "Collapse monitor: end the run at the first collapsed epoch.")


KITM_FLAG_NAMES = sorted(set(FLAGS) - _FLAGS_BEFORE_KITM)


def _check_margin(value):
    return value >= 0


flags.register_validator("margin", _check_margin, message="--margin must be >= 0 (a hinge margin).")

# Named datasets and how to build them; the message a user sees when one is missing.
BUILD_COMMANDS = {
    "coco": "python -m kitm.data.build --dataset=karpathy --karpathy_json=<dir>/dataset_coco.json "
            "--images=<dir with train2014/ and val2014/> --out={data_dir}",
    "f30k": "python -m kitm.data.build --dataset=karpathy --karpathy_json=<dir>/dataset_flickr30k.json "
            "--images=<dir>/flickr30k-images --out={data_dir}",
    "f8k": "python -m kitm.data.build --dataset=karpathy --karpathy_json=<dir>/dataset_flickr8k.json "
           "--images=<dir>/Flicker8k_Dataset --out={data_dir}",
    "f8k_text": "python -m kitm.data.build --dataset=flickr8k --flickr8k_dir=<dir>/Flickr8k_text "
                "--images=<dir>/Flicker8k_Dataset --out={data_dir}",
    "coco_captions": "python -m kitm.data.build --dataset=coco_captions --coco_captions=<dir>/annotations/"
                     "captions_train2014.json,<dir>/annotations/captions_val2014.json --karpathy_json=<dir>/"
                     "dataset_coco.json --images=<dir with train2014/ and val2014/> --out={data_dir}",
    "f30k_precomp": "python -m kitm.data.build --dataset=precomputed --features_dir=<dir> --name=f30k_precomp "
                    "--out={data_dir}",
    "coco_precomp": "python -m kitm.data.build --dataset=precomputed --features_dir=<dir> --name=coco_precomp "
                    "--out={data_dir}",
}


# Per-dataset defaults for the data, model and schedule flags that neither the command line nor a flagfile sets,
# so that a paper's flagfile (objective flags only) runs on the photos it was written for and, with
# --dataset=synthetic, on the synthetic world in minutes. Explicitly given flags always win.
_PHOTO_DEFAULTS = {
    "image_encoder": "resnet152", "weights": "imagenet", "image_size": 224, "flip": True, "eval_crop_fraction": 0.875,
    "embedding_dim": 1024, "word_dim": 300, "text_units": 1024, "captions_per_step": "all", "max_violation": True,
    "epochs": 30, "learning_rate": 2e-4, "lr_decay_epochs": 15, "eval_every_epochs": 1,
    # --loss=centers (seed 003, Sec. 4.1): 30/15/10 epochs, Adam 2e-4 then 2e-5, 1000 quantized centres, q = 500.
    "center_phase_epochs": ["30", "15", "10"], "center_phase2_learning_rate": 2e-5,
    "center_phase3_learning_rate": 2e-5, "num_quantized_centers": 1000, "margin_update_every": 500,
}
DATASET_DEFAULTS = {
    "synthetic": {
        "image_encoder": "small_cnn", "weights": "none", "image_size": 48, "flip": False, "eval_crop_fraction": 1.0,
        "embedding_dim": 256, "word_dim": 64, "text_units": 128, "captions_per_step": "all",
        # The sum over negatives throughout (the triplet, SAM's triplet part, the ladders' first rung): with the CNN
        # starting from random weights the hardest negative collapsed the embeddings within one epoch of switching
        # to it, after a 2- or a 6-epoch --hardest_warmup_epochs too (README, "Hardest negatives and collapse").
        "max_violation": False, "hardest_warmup_epochs": 0.0, "epochs": 12, "learning_rate": 2e-3, "lr_decay_epochs": 9,
        "eval_every_epochs": 3,
        # --loss=centers: the same 12 epochs split 6/3/3, ten times the paper's later rates (as phase 1's), 50
        # quantized centres for the 2,100 training scenes, margins adapted every 50 of the ~80 batches an epoch.
        "center_phase_epochs": ["6", "3", "3"], "center_phase2_learning_rate": 2e-4,
        "center_phase3_learning_rate": 2e-4, "num_quantized_centers": 50, "margin_update_every": 50,
    },
    "coco": _PHOTO_DEFAULTS, "f30k": _PHOTO_DEFAULTS, "f8k": _PHOTO_DEFAULTS,
}


CENTER_PHASE_FLAGS = ("center_phase_epochs", "center_phase2_learning_rate", "center_phase3_learning_rate",
                      "num_quantized_centers", "margin_update_every")


def apply_dataset_defaults() -> list[str]:
    """Set the --dataset's defaults on flags nobody set; returns the `--flag=value` strings applied."""
    applied = []
    for name, value in DATASET_DEFAULTS.get(FLAGS.dataset, {}).items():
        if name in CENTER_PHASE_FLAGS and not uses_center_phases():
            continue  # only --loss=centers reads them: not worth a line of the run's output
        if not FLAGS[name].present and FLAGS[name].value != value:
            FLAGS[name].value = value
            applied.append(f"--{name}={','.join(value) if isinstance(value, list) else value}")
    return applied


class LaunchError(Exception):
    """A problem with the flags or the data that stops the run before it starts."""


def configure_devices() -> None:
    from kitm.training.distribution import split_cpu

    split_cpu(FLAGS.cpu_devices)


def make_strategy():
    from kitm.training.distribution import DistributionError, make_strategy as make

    try:
        return make(FLAGS.strategy)
    except DistributionError as error:
        raise LaunchError(str(error)) from error


def synthetic_relevance_rows() -> list[str]:
    """The caption relevance rows a synthetic world built for these flags carries (CIDEr-D always: it is cheap)."""
    rows = {"cider", *required_relevance_slots()} - {"truth", "image_neighbors"}
    if "neighbors" in rows:
        rows.add("sbert")  # the neighbours are found in that space; keep it for --relevance=sbert too
    return sorted(rows)


# The image space of the image_neighbors rows of a synthetic world built by the launcher: its scenes are flat
# shapes, near in pixel space exactly when alike (kitm.relevance.image_features), and it needs no weights.
SYNTHETIC_IMAGE_NEIGHBORS = "pixels"


def synthetic_image_neighbors() -> str:
    """The --image_neighbors space of a synthetic world built for these flags ("none" without the Img NNs)."""
    return SYNTHETIC_IMAGE_NEIGHBORS if "image_neighbors" in required_relevance_slots() else "none"


def default_data_dir() -> str:
    """tfrecords/<dataset>; a synthetic world with sentence-embedding or image-neighbour rows gets its own folder,
    so the quick default world (CIDEr-D rows only) is never rebuilt in place."""
    parts = [row for row in synthetic_relevance_rows() if row != "cider"]
    if synthetic_image_neighbors() != "none":
        parts.append("image_neighbors")
    if FLAGS.dataset == "synthetic" and parts:
        return "tfrecords/synthetic_" + "_".join(parts)
    return f"tfrecords/{FLAGS.dataset}"


def build_command(data_dir, image_mode: str | None = None) -> str:
    """The command that builds --dataset into `data_dir` with the rows these flags need; `image_mode` (of the
    records there, when known) picks the image space of --neighbor_space=image."""
    if FLAGS.dataset == "synthetic":
        command = (f"python -m kitm.data.build --dataset=synthetic --out={{data_dir}} "
                   f"--num_scenes={FLAGS.synthetic_num_scenes} --seed={FLAGS.seed} --image_size={FLAGS.image_size} "
                   f"--relevance={','.join(synthetic_relevance_rows())}")
    else:
        command = BUILD_COMMANDS.get(FLAGS.dataset, "python -m kitm.data.build --dataset=karpathy "
                                     "--karpathy_json=<split json> --images=<image folder> --out={data_dir}")
    if "image_neighbors" in required_relevance_slots():
        if image_mode in ("feature", "regions") or (image_mode is None and FLAGS.dataset.endswith("_precomp")):
            space = "features"  # the stored vectors
        elif FLAGS.dataset == "synthetic":
            space = SYNTHETIC_IMAGE_NEIGHBORS
        else:
            space = "backbone --image_neighbors_weights=imagenet"
        command += f" --image_neighbors={space}"
    return command.format(data_dir=data_dir)


def ensure_dataset(data_dir: pathlib.Path):
    """The dataset's info; the synthetic world is built when absent, other datasets stop with the command."""
    from kitm.data import schema
    from kitm.errors import KitmDataError

    if not (data_dir / schema.INFO_FILE).is_file():
        if FLAGS.dataset == "synthetic" and FLAGS.strategy == "multi_worker":
            raise LaunchError(f"--strategy=multi_worker reads a built dataset ({data_dir / schema.INFO_FILE} is "
                              "missing): build the synthetic world first, once, e.g. with the same flags and "
                              "--strategy=default --epochs=1, so that the workers do not all write it at once.")
        if FLAGS.dataset == "synthetic":
            from kitm.data.synthetic_records import build_synthetic
            from kitm.relevance.image_features import ImageNeighborOptions

            print(f"Building the synthetic world into {data_dir} ({FLAGS.synthetic_num_scenes} scenes).")
            rows = synthetic_relevance_rows()
            build_synthetic(data_dir, num_scenes=FLAGS.synthetic_num_scenes, seed=FLAGS.seed,
                            image_size=FLAGS.image_size, progress=FLAGS.progress, relevance=rows,
                            image_neighbors=ImageNeighborOptions(synthetic_image_neighbors()))
        else:
            raise LaunchError(
                f"Dataset '{FLAGS.dataset}' is not built: {data_dir / schema.INFO_FILE} and its shards are missing.\n"
                f"Build it with:\n  {build_command(data_dir)}")
    try:
        return schema.load_info(data_dir)
    except KitmDataError as error:
        raise LaunchError(str(error)) from error


def training_subset(data_dir: pathlib.Path, info) -> tuple[int, int] | None:
    """--train_fraction as PipelineConfig.train_subset: (largest kept image id, images kept); None for all."""
    if FLAGS.train_fraction >= 1.0:
        return None
    import numpy as np

    from kitm.training.center_phases import read_image_ids

    ids = np.sort(read_image_ids(data_dir, "train"))
    count = max(1, round(FLAGS.train_fraction * ids.size))
    return int(ids[count - 1]), count


def training_images(info) -> int:
    """The training images a run reads (all, or --train_fraction of them)."""
    return max(1, round(FLAGS.train_fraction * info.num_images("train"))) if FLAGS.train_fraction < 1.0 else \
        info.num_images("train")


def check_flags_against_data(info) -> None:
    if "train" not in info.splits:
        raise LaunchError(f"The dataset at {FLAGS.data_dir} has no train split.")
    samples = training_images(info) * (info.captions_per_image if FLAGS.captions_per_step == "all" else 1)
    if FLAGS.batch_size > samples:
        raise LaunchError(f"--batch_size={FLAGS.batch_size} is larger than the {samples} training samples of "
                          f"{FLAGS.data_dir}; lower --batch_size.")
    check_loss_flags()
    if FLAGS.train_fraction < 1.0 and (uses_neighbor_batching() or uses_center_phases()):
        raise LaunchError(f"--train_fraction={FLAGS.train_fraction} is not supported with --loss=neighborhood or "
                          "--loss=centers (their batches and centres cover the whole training split).")
    if uses_center_phases():
        center_phase_config(info.num_images("train"))
    if FLAGS.eval_relevance == "truth" and "truth" not in info.relevance:
        raise LaunchError(f"--eval_relevance=truth needs the synthetic world's facts; {FLAGS.data_dir} has relevance "
                          f"slots {sorted(info.relevance) or 'none'}.")
    for slot in required_relevance_slots():
        if slot not in info.relevance:
            needed_by = {"neighbors": "--loss=neighborhood (neighbour rows)",
                         "image_neighbors": "--loss=neighborhood --neighbor_space=image (seed 004's Img NNs)"}.get(
                             slot, f"--relevance={slot}")
            if slot == "truth":
                hint = "the synthetic world's facts exist only in synthetic datasets"
            elif slot == "image_neighbors":
                hint = (f"rebuild it with the image-space neighbour rows (after deleting {FLAGS.data_dir}, or into "
                        "a new folder given as --out and --data_dir):\n  "
                        f"{build_command(FLAGS.data_dir, info.image_mode)}\n"
                        "(--image_neighbors=backbone: a frozen ImageNet ResNet-50 on the images; pixels: "
                        "downsampled pixels, no weights; features: a precomputed-feature dataset's own vectors)")
            else:
                hint = (f"rebuild it with python -m kitm.data.build ... --relevance={slot} (or include {slot} in the "
                        "list)")
            if slot != "truth" and FLAGS.dataset == "synthetic":
                hint += "; a synthetic world built by the launcher is rebuilt if you delete its folder"
            raise LaunchError(f"{needed_by} needs the '{slot}' relevance rows; {FLAGS.data_dir} has relevance "
                              f"slots {sorted(info.relevance) or 'none'}: {hint}.")
    if info.image_mode == "none":
        raise LaunchError(f"{FLAGS.data_dir} holds captions only (built without images, e.g. from the Flickr8K token "
                          "files without --images); rebuild it with --images to train on it.")
    if FLAGS.image_encoder == "features_mlp" and info.image_mode == "encoded":
        raise LaunchError("--image_encoder=features_mlp needs a dataset of precomputed features; "
                          f"{FLAGS.data_dir} holds encoded images.")
    if FLAGS.image_encoder != "features_mlp" and info.image_mode != "encoded":
        raise LaunchError(f"--image_encoder={FLAGS.image_encoder} needs images; {FLAGS.data_dir} holds "
                          f"{info.image_mode} features: use --image_encoder=features_mlp.")


def evaluation_relevance(data_dir: pathlib.Path, split: str, info, limit: int | None) -> dict:
    """RetrievalEvaluation's relevance argument for --eval_relevance: a matrix (truth, for the first `limit`
    images of the split) or a function of the captions (cider, sbert); {} for none."""
    source = FLAGS.eval_relevance
    if source == "auto":
        source = "truth" if "truth" in info.relevance else "none"
    if source == "none":
        return {}
    if source == "truth":
        from kitm.eval.split_data import read_split, split_relevance

        subset = read_split(data_dir, split, limit=limit, with_images=False)
        return {"relevance": split_relevance(subset, "truth")}
    import functools

    from kitm.eval.relevance_sources import caption_relevance

    return {"relevance_fn": functools.partial(caption_relevance, source)}


def _floats(name: str) -> list[float]:
    try:
        return [float(value) for value in FLAGS[name].value]
    except ValueError as error:
        raise LaunchError(f"--{name}={','.join(FLAGS[name].value)}: {error}") from error


LOSS_NAMES = ("triplet", "sam", "ladder", "ladder_adaptive", "angular", "neighborhood", "centers")
RELEVANCE_LOSSES = ("sam", "ladder", "ladder_adaptive")
# The name each loss's terms are logged under (`<key>/<term>`); the two ladders share one.
LOSS_KEYS = {"ladder_adaptive": "ladder"}


def check_loss_flags() -> None:
    """--loss names known losses, at most once each, with matching --loss_weights and a relevance source."""
    names = list(FLAGS.loss)
    unknown = [name for name in names if name not in LOSS_NAMES]
    if unknown or not names:
        raise LaunchError(f"--loss={','.join(names)}: unknown loss {unknown or '(none given)'}; choose from "
                          f"{', '.join(LOSS_NAMES)}.")
    keys = [LOSS_KEYS.get(name, name) for name in names]
    if len(set(keys)) != len(keys):
        raise LaunchError(f"--loss={','.join(names)} names a loss twice (ladder and ladder_adaptive are one "
                          "objective with fixed or adaptive levels).")
    if FLAGS.loss_weights and len(FLAGS.loss_weights) != len(names):
        raise LaunchError(f"--loss_weights={','.join(FLAGS.loss_weights)} gives {len(FLAGS.loss_weights)} weights "
                          f"for the {len(names)} losses of --loss={','.join(names)}.")
    weights = _floats("loss_weights")
    if any(weight < 0 for weight in weights):
        raise LaunchError(f"--loss_weights={','.join(FLAGS.loss_weights)}: weights must be >= 0.")
    if "centers" in names and len(names) > 1:
        raise LaunchError(f"--loss={','.join(names)}: centers is a whole objective trained in phases (triplet, "
                          "centre and classification terms); use it alone.")
    needs_relevance = [name for name in names if name in RELEVANCE_LOSSES]
    if needs_relevance and FLAGS.relevance == "none":
        raise LaunchError(f"--loss={needs_relevance[0]} learns from graded relevance: set --relevance (e.g. truth "
                          "for the synthetic world, cider for SAM, sbert for the ladder loss).")


def uses_center_phases() -> bool:
    return "centers" in FLAGS.loss


def center_phase_config(num_train_images: int):
    """--loss=centers: the flags as a kitm.training.center_phases.CenterPhaseConfig (sets --epochs to the total)."""
    from kitm.training.center_phases import CenterPhaseConfig

    try:
        epochs = tuple(int(value) for value in FLAGS.center_phase_epochs)
    except ValueError as error:
        raise LaunchError(f"--center_phase_epochs={','.join(FLAGS.center_phase_epochs)}: {error}") from error
    if len(epochs) != 3 or min(epochs) < 0 or sum(epochs) == 0:
        raise LaunchError(f"--center_phase_epochs={','.join(FLAGS.center_phase_epochs)}: give three epoch counts "
                          ">= 0 (phases 1, 2, 3), not all 0.")
    if FLAGS["epochs"].present and FLAGS.epochs != sum(epochs):
        raise LaunchError(f"--epochs={FLAGS.epochs} with --loss=centers: the phases set the epochs "
                          f"(--center_phase_epochs={','.join(map(str, epochs))}); drop --epochs.")
    FLAGS.epochs = sum(epochs)
    if FLAGS.num_quantized_centers > num_train_images:
        raise LaunchError(f"--num_quantized_centers={FLAGS.num_quantized_centers} is more than the {num_train_images} "
                          f"training images of {FLAGS.data_dir}: k-means cannot make more quantized centres than "
                          "there are per-image centres; lower it.")
    try:
        return CenterPhaseConfig(
            phase_epochs=epochs, learning_rates=(FLAGS.learning_rate, FLAGS.center_phase2_learning_rate,
                                                 FLAGS.center_phase3_learning_rate),
            centers_learning_rate=FLAGS.center_learning_rate, lr_decay_epochs=FLAGS.lr_decay_epochs,
            lr_decay_factor=FLAGS.lr_decay_factor, grad_clip_norm=FLAGS.grad_clip_norm or None,
            delta=FLAGS.center_delta, num_quantized_centers=FLAGS.num_quantized_centers, margin=FLAGS.margin,
            margin_update_every=FLAGS.margin_update_every, margin_max=FLAGS.margin_max,
            loss_weight=(_floats("loss_weights") or [1.0])[0], seed=FLAGS.seed,
            triplet_sampling=FLAGS.center_triplet_sampling)
    except ValueError as error:
        raise LaunchError(f"--loss=centers: {error}") from error


def uses_neighbor_batching() -> bool:
    return "neighborhood" in FLAGS.loss


def required_relevance_slots() -> list[str]:
    """The relevance rows the flags need in the records (the neighbour slot of --neighbor_space)."""
    from kitm.data.schema import NEIGHBOR_SLOTS

    slots = [] if FLAGS.relevance == "none" else [FLAGS.relevance]
    return slots + ([NEIGHBOR_SLOTS[FLAGS.neighbor_space][0]] if uses_neighbor_batching() else [])


def hardest_warmup_steps(steps_per_epoch: int) -> int:
    """--hardest_warmup_epochs in training steps."""
    return round(FLAGS.hardest_warmup_epochs * steps_per_epoch)


def _build_loss(name: str, warmup: int):
    from kitm.losses import AdaptiveLadderLoss, AngularLoss, LadderLoss, NeighborhoodAngularLoss, SAMLoss, TripletLoss

    if name == "triplet":
        return TripletLoss(FLAGS.margin, FLAGS.max_violation, hardest_warmup_steps=warmup)
    if name == "sam":
        return SAMLoss(FLAGS.sam_tau, sampling=FLAGS.sam_sampling, pairing=FLAGS.sam_pairing,
                       sam_weight=FLAGS.sam_weight, margin=FLAGS.margin, max_violation=FLAGS.max_violation,
                       seed=FLAGS.seed, hardest_warmup_steps=warmup)
    if name == "ladder":
        if FLAGS.ladder_recluster_every:
            from kitm.losses import ReclusterableLadderLoss

            return ReclusterableLadderLoss(_floats("ladder_thresholds"), _floats("ladder_margins"),
                                           _floats("ladder_betas"), seed=FLAGS.seed, hardest_warmup_steps=warmup,
                                           max_violation=FLAGS.max_violation)
        return LadderLoss(_floats("ladder_thresholds"), _floats("ladder_margins"), _floats("ladder_betas"),
                          hardest_warmup_steps=warmup, max_violation=FLAGS.max_violation)
    if name == "ladder_adaptive":
        bounds = [int(value) for value in _floats("ladder_level_bounds")]
        return AdaptiveLadderLoss(bounds, first_margin=FLAGS.margin, lloyd_runs=FLAGS.ladder_lloyd_runs,
                                  hardest_warmup_steps=warmup, max_violation=FLAGS.max_violation)
    if name == "angular":
        return AngularLoss(FLAGS.angle_degrees, form=FLAGS.angular_form)
    if name == "centers":
        raise LaunchError("--loss=centers is built and trained phase by phase by kitm.training.center_phases.")
    return NeighborhoodAngularLoss(FLAGS.neighborhood_alpha, FLAGS.neighborhood_beta, base=FLAGS.neighborhood_base,
                                   angle_degrees=FLAGS.angle_degrees, margin=FLAGS.margin,
                                   neighbor_space=FLAGS.neighbor_space, form=FLAGS.angular_form)


def build_objective(steps_per_epoch: int = 1) -> tuple[dict, dict]:
    """(losses, weights) for `DualEncoder.compile(losses=..., loss_weights=...)` from --loss and --loss_weights.

    Create under the strategy's scope. Each loss is logged under its key (`sam/...`, `ladder/...`).
    `steps_per_epoch` turns --hardest_warmup_epochs into steps.
    """
    check_loss_flags()
    weights = _floats("loss_weights") or [1.0] * len(FLAGS.loss)
    warmup = hardest_warmup_steps(steps_per_epoch)
    losses, loss_weights = {}, {}
    for name, weight in zip(FLAGS.loss, weights):
        key = LOSS_KEYS.get(name, name)
        try:
            losses[key] = _build_loss(name, warmup)
        except ValueError as error:  # the loss names the argument; say which flag feeds it
            raise LaunchError(f"--loss={name}: {error}") from error
        loss_weights[key] = weight
    return losses, loss_weights


def finetune_learning_rate() -> float:
    return FLAGS.finetune_learning_rate if FLAGS.finetune_learning_rate is not None else FLAGS.learning_rate / 10


def learning_rate_schedule(steps_per_epoch: int):
    """Adam's learning rate from the flags (kitm.training.schedules.build_schedule)."""
    from kitm.training.schedules import build_schedule

    warmup = FLAGS.warmup_steps or round(FLAGS.warmup_epochs * steps_per_epoch)
    try:
        return build_schedule(FLAGS.lr_schedule, FLAGS.learning_rate, steps_per_epoch=steps_per_epoch,
                              epochs=FLAGS.epochs, decay_epochs=FLAGS.lr_decay_epochs,
                              decay_factor=FLAGS.lr_decay_factor, warmup_steps=warmup,
                              finetune_after_epochs=FLAGS.finetune_after_epochs,
                              finetune_learning_rate=finetune_learning_rate())
    except ValueError as error:
        raise LaunchError(f"--lr_schedule={FLAGS.lr_schedule} (warm-up {warmup} steps, "
                          f"--finetune_after_epochs={FLAGS.finetune_after_epochs}): {error}") from error


def check_training_controls(info) -> None:
    """Flags of kitm.training that contradict each other, the model or the data."""
    if FLAGS.warmup_steps and FLAGS.warmup_epochs:
        raise LaunchError("Give --warmup_epochs or --warmup_steps, not both.")
    if (FLAGS.warmup_steps or FLAGS.warmup_epochs) and FLAGS.lr_schedule != "cosine":
        raise LaunchError(f"--warmup_epochs/--warmup_steps: the warm-up is part of the cosine schedule; add "
                          f"--lr_schedule=cosine (got --lr_schedule={FLAGS.lr_schedule}).")
    if FLAGS.finetune_after_epochs:
        if FLAGS.image_encoder not in ("resnet50", "resnet152"):
            raise LaunchError(f"--finetune_after_epochs needs a pretrained backbone (--image_encoder=resnet50 or "
                              f"resnet152); got --image_encoder={FLAGS.image_encoder}.")
        if FLAGS.finetune_backbone:
            raise LaunchError("--finetune_after_epochs freezes the backbone first; it contradicts "
                              "--finetune_backbone (which trains it from the start).")
        if FLAGS.finetune_after_epochs >= FLAGS.epochs:
            raise LaunchError(f"--finetune_after_epochs={FLAGS.finetune_after_epochs} leaves no fine-tuning epoch "
                              f"within --epochs={FLAGS.epochs}.")
    if FLAGS.test_crops > 1 and info.image_mode != "encoded":
        raise LaunchError(f"--test_crops={FLAGS.test_crops} crops images; {FLAGS.data_dir} holds "
                          f"{info.image_mode} features.")


def diagnose_read_failure(data_dir: pathlib.Path, info, error: Exception) -> LaunchError | None:
    """After training or evaluation failed, look for a bad shard, record or image and name it (None if all read)."""
    from kitm.data import schema
    from kitm.data.records import diagnose_shards

    print(f"Reading {data_dir} failed ({type(error).__name__}); looking for the bad record.", file=sys.stderr)
    spec = schema.feature_spec(info)
    for split in info.splits:
        message = diagnose_shards(info.shard_paths(data_dir, split), spec)
        if message:
            return LaunchError(message)
    return None


def recall_cutoffs(num_images: int) -> tuple[int, ...]:
    """R@1, 5, 10, leaving out cut-offs beyond the images a caption query ranks (tiny splits)."""
    return tuple(k for k in (1, 5, 10) if k <= num_images) or (1,)


def write_json_atomically(path: pathlib.Path, payload: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2, sort_keys=True, default=str))
    os.replace(tmp, path)


def run_training() -> dict:
    """Set up devices, data and strategy, then train, evaluate and export; bad records are named on failure."""
    import tensorflow as tf

    from kitm.training import distribution, reproducibility

    started = time.time()
    applied = apply_dataset_defaults()
    if applied:
        print(f"Defaults for --dataset={FLAGS.dataset}: {' '.join(applied)}")
    configure_devices()
    # Before any other TensorFlow work: the multi-worker strategy starts this process's server.
    strategy = make_strategy()
    reproducibility.set_seeds(FLAGS.seed, deterministic_ops=FLAGS.deterministic_ops)
    data_dir = pathlib.Path(FLAGS.data_dir or default_data_dir())
    FLAGS.data_dir = str(data_dir)
    run_dir = pathlib.Path(FLAGS.run_dir or f"runs/{FLAGS.dataset}")
    run_dir.mkdir(parents=True, exist_ok=True)
    info = ensure_dataset(data_dir)
    check_flags_against_data(info)
    replicas = strategy.num_replicas_in_sync
    if uses_center_phases() and FLAGS.strategy == "multi_worker":
        raise LaunchError("--loss=centers is not supported with --strategy=multi_worker yet: its loss-owned state is "
                          "checkpointed by one process; use --strategy=mirrored on one machine.")
    if FLAGS.batch_size % replicas:
        raise LaunchError(f"--batch_size={FLAGS.batch_size} must be divisible by the {replicas} replicas.")
    try:
        # The chief writes run_dir; other workers write a temporary directory, removed at the end.
        with distribution.worker_directory(run_dir, strategy) as write_dir:
            return train_evaluate_export(data_dir, run_dir, info, strategy, started, write_dir)
    except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as error:
        # A corrupt shard or an undecodable image surfaces in tf.data without naming its file; find it.
        problem = diagnose_read_failure(data_dir, info, error)
        if problem is None:
            raise
        raise problem from error


def train_evaluate_export(data_dir: pathlib.Path, run_dir: pathlib.Path, info, strategy, started: float,
                          write_dir: pathlib.Path | None = None) -> dict:
    """Train, evaluate, export. Reads the vocabulary and the backup from `run_dir` (the chief's) and writes
    everything into `write_dir` (run_dir itself on the chief, a temporary directory on other workers)."""
    import dataclasses

    import keras
    import tensorflow as tf

    from kitm.callbacks.projector import ProjectorCallback
    from kitm.training.summaries import write_final_figures, write_hparams
    from kitm.callbacks.checkpoint import AtomicWeightsCheckpoint
    from kitm.callbacks.collapse_monitor import CollapseMonitor
    from kitm.callbacks.retrieval_evaluation import RetrievalEvaluation, flatten_report
    from kitm.data.pipeline import PipelineConfig, evaluation_dataset, training_captions, training_dataset
    from kitm.eval import build_report, format_report
    from kitm.eval.report import rsum
    from kitm.layers import CaptionTokenizer, GRUTextEncoder, build_image_encoder, build_vocabulary
    from kitm.metrics import EmbeddingCollapse, RelevanceStatistics
    from kitm.models import DualEncoder
    from kitm.models.inference import embed_dataset, similarity_matrix
    from kitm.serving import export_new_version
    from kitm.training import finetune, precision
    from kitm.training.distribution import distributed_training_input, is_chief, num_workers
    from kitm.training.fault_tolerance import ResumableBackupAndRestore, backup_save_freq

    replicas = strategy.num_replicas_in_sync
    chief_dir, run_dir = run_dir, pathlib.Path(write_dir or run_dir)  # below, run_dir is where this worker writes
    check_training_controls(info)
    print(f"Dtype policy: {precision.set_mixed_precision(FLAGS.mixed_precision)}.")

    vocabulary_path = chief_dir / "vocabulary.txt"
    if vocabulary_path.is_file():  # a resumed run keeps its vocabulary (the embedding rows depend on it)
        tokenizer = CaptionTokenizer(str(vocabulary_path), FLAGS.max_caption_length, name="tokenizer")
    else:
        print("Building the vocabulary from the training captions.")
        vocabulary = build_vocabulary(training_captions(data_dir, "train"), min_count=FLAGS.vocab_min_count,
                                      progress=FLAGS.progress)
        tokenizer = CaptionTokenizer(vocabulary, FLAGS.max_caption_length, name="tokenizer")
        tokenizer.save_vocabulary(str(run_dir / "vocabulary.txt"))
    print(f"Vocabulary: {tokenizer.vocabulary_size} ids; {replicas} replica(s); global batch {FLAGS.batch_size}.")

    config = PipelineConfig(
        batch_size=FLAGS.batch_size, image_size=FLAGS.image_size, captions=FLAGS.captions_per_step,
        relevance=FLAGS.relevance, crop_area=(FLAGS.crop_area_min, 1.0), flip=FLAGS.flip,
        eval_crop_fraction=FLAGS.eval_crop_fraction, num_replicas=replicas, seed=FLAGS.seed,
        cache=info.num_images("train") <= 20000, neighbor_batching=uses_neighbor_batching(),
        train_subset=training_subset(data_dir, info),
        neighbor_draw=FLAGS.neighbor_draw, neighbor_space=FLAGS.neighbor_space, test_crops=FLAGS.test_crops)
    centers = uses_center_phases()
    if centers:  # seed 003: the objective is trained in three phases, each its own fit
        from kitm.training.center_phases import CenterPhaseTrainer, training_image_index

        trainer = CenterPhaseTrainer(center_phase_config(info.num_images("train")), run_dir,
                                     training_image_index(data_dir, run_dir))

    def pipeline(batch, shard, seed):
        dataset = training_dataset(data_dir, "train", tokenizer,
                                   dataclasses.replace(config, batch_size=batch, num_replicas=1, seed=seed),
                                   shard=shard)
        # --loss=centers: image/id -> the image's centre 0..N_train-1
        return trainer.image_index.apply(dataset) if centers else dataset

    # Per-replica pipelines under several replicas (kitm.training.distribution explains the choice).
    train = distributed_training_input(
        strategy, pipeline, global_batch=FLAGS.batch_size, num_images=training_images(info),
        samples_per_image=info.captions_per_image if FLAGS.captions_per_step == "all" else 1, seed=FLAGS.seed)
    steps_per_epoch = train.steps_per_epoch

    with strategy.scope():
        weights = None if FLAGS.weights.lower() == "none" else FLAGS.weights
        image_encoder = build_image_encoder(FLAGS.image_encoder, image_size=FLAGS.image_size, weights=weights,
                                            trainable_backbone=FLAGS.finetune_backbone)
        text_encoder = GRUTextEncoder(tokenizer.vocabulary_size, FLAGS.word_dim, FLAGS.text_units, name="text_backbone")
        model = DualEncoder(image_encoder, text_encoder, FLAGS.embedding_dim, name="dual_encoder")
        model.build_from_inputs(train.element_spec[0])
        optimizer = keras.optimizers.Adam(learning_rate_schedule(steps_per_epoch),
                                          global_clipnorm=FLAGS.grad_clip_norm or None)
        jit_compile = {"auto": "auto", "true": True, "false": False}[FLAGS.jit_compile]
        # The collapse monitor's statistic (kitm.metrics.collapse), logged every epoch.
        monitors = [EmbeddingCollapse()] if FLAGS.collapse_threshold else []
        if centers:
            trainer.build(model, strategy, monitors=monitors)
        else:
            if FLAGS.relevance != "none":
                monitors.append(RelevanceStatistics())
            losses, loss_weights = build_objective(steps_per_epoch)
            model.compile(optimizer, losses=losses, loss_weights=loss_weights, monitors=monitors,
                          jit_compile=jit_compile)
        if FLAGS.finetune_after_epochs:
            finetune.prepare_backbone_finetuning(model)
        if not centers and not optimizer.built:
            optimizer.build(model.trainable_variables)  # nothing left for fit's symbolic build (DualEncoder)

    write_hparams(run_dir / "logs", {name: FLAGS[name].value for name in KITM_FLAG_NAMES},
                             trial_id=run_dir.name)

    # TerminateOnNaN first: the backup sees its stop and keeps the last good state.
    if centers:  # each phase starts its optimizers' step count afresh and backs up in its own folder
        backup = keras.callbacks.BackupAndRestore(str(chief_dir / "backup"),
                                                  save_freq=backup_save_freq(FLAGS.backup_every_steps),
                                                  delete_checkpoint=False)
    else:
        backup = ResumableBackupAndRestore(chief_dir / "backup", steps_per_epoch=steps_per_epoch,
                                           save_freq=backup_save_freq(FLAGS.backup_every_steps),
                                           write_dir=run_dir / "backup", delete_checkpoint=False)
    callbacks = [keras.callbacks.TerminateOnNaN(), backup]
    collapse = None
    if FLAGS.collapse_threshold:
        collapse = CollapseMonitor(FLAGS.collapse_threshold, stop=FLAGS.stop_on_collapse)
        callbacks.append(collapse)
    if FLAGS.finetune_after_epochs:
        callbacks.append(finetune.BackboneFineTuning(FLAGS.finetune_after_epochs, verbose=int(FLAGS.progress)))
    eval_split = "val" if "val" in info.splits else None
    if FLAGS.eval_every_epochs and eval_split:
        val = evaluation_dataset(data_dir, eval_split, tokenizer, config, limit=FLAGS.eval_images)
        callbacks.append(RetrievalEvaluation(val, captions_per_image=info.captions_per_image,
                                             ks=recall_cutoffs(min(info.num_images(eval_split), FLAGS.eval_images)),
                                             every_epochs=FLAGS.eval_every_epochs,
                                             jsonl_path=str(run_dir / "evaluations.jsonl"),
                                             log_dir=str(run_dir / "logs" / "validation"),
                                             **evaluation_relevance(data_dir, eval_split, info, FLAGS.eval_images)))
    if FLAGS.projector_samples and eval_split:
        subset = evaluation_dataset(data_dir, eval_split, tokenizer, config, limit=FLAGS.projector_samples)
        callbacks.append(ProjectorCallback(subset, run_dir / "logs", num_images=FLAGS.projector_samples,
                                                      captions_per_image=info.captions_per_image,
                                                      every_epochs=FLAGS.eval_every_epochs))
    if FLAGS.ladder_recluster_every and "ladder" in FLAGS.loss:
        from kitm.callbacks.ladder_recluster import LadderReclusterCallback

        # Before TensorBoard, which then writes the thresholds and level counts it puts into the epoch logs.
        callbacks.append(LadderReclusterCallback(every_batches=FLAGS.ladder_recluster_every,
                                                 lloyd_runs=FLAGS.ladder_lloyd_runs,
                                                 log_dir=str(run_dir / "logs" / "ladder")))
    callbacks += [
        keras.callbacks.TensorBoard(str(run_dir / "logs"), update_freq="epoch"),
        AtomicWeightsCheckpoint(run_dir / "checkpoints" / "last.weights.h5"),
    ]
    verbose = (1 if sys.stdout.isatty() else 2) if FLAGS.progress else 0
    train_started = time.time()
    test_split = "test" if "test" in info.splits else eval_split
    report = None
    # The input repeats (one pass per epoch): steps_per_epoch marks the epochs, the same on every worker.
    if centers:
        history = trainer.fit(model, train.dataset, callbacks, verbose=verbose, steps_per_epoch=steps_per_epoch)
    else:
        history = model.fit(train.dataset, epochs=FLAGS.epochs, steps_per_epoch=steps_per_epoch,
                            callbacks=callbacks, verbose=verbose, shuffle=False)
    if getattr(backup, "restored_step", 0):
        print(f"Resumed from the backup at step {backup.restored_step} of {FLAGS.epochs * steps_per_epoch}.")
    train_seconds = time.time() - train_started
    if test_split:
        print(f"Evaluating on the {test_split} split.")
        test = evaluation_dataset(data_dir, test_split, tokenizer, config)
        images, texts, _ = embed_dataset(model, test, progress=FLAGS.progress, total=info.num_images(test_split))
        relevance = evaluation_relevance(data_dir, test_split, info, limit=None).get("relevance")
        # The same report as `python -m kitm.eval` and the validation callback (CS and N-way included).
        full_report = build_report(similarity_matrix(images, texts), captions_per_image=info.captions_per_image,
                                   relevance=relevance, ks=recall_cutoffs(info.num_images(test_split)))
        report = full_report["all"]
        print(format_report(full_report, f"Retrieval on the {test_split} split (R@K: VSE++ definition)"))
        write_final_figures(run_dir / "logs", {**flatten_report(report, ""), "rsum": rsum(report)},
                                       step=len(history.history.get("loss", [])))

    export_path = None
    if FLAGS.export:
        feature_dim = info.feature_dim if info.image_mode != "encoded" else None
        export_path = export_new_version(model, tokenizer, run_dir / "export", image_mode=info.image_mode,
                                         image_size=FLAGS.image_size, eval_crop_fraction=FLAGS.eval_crop_fraction,
                                         feature_dim=feature_dim)
        print(f"SavedModel: {export_path}")

    summary = {
        "flags": {name: FLAGS[name].value for name in KITM_FLAG_NAMES},
        "dataset": {"dir": str(data_dir), "name": info.name, "splits": {s: e["num_images"] for s, e in info.splits.items()}},
        "replicas": replicas,
        "steps_per_epoch": steps_per_epoch,
        "epochs_run": len(history.history.get("loss", [])),
        "optimizer_steps": int(keras.ops.convert_to_numpy(model.optimizer.iterations)),
        "resumed_from_step": getattr(backup, "restored_step", 0),
        "workers": {"count": num_workers(strategy), "chief": is_chief(strategy)},
        "history": history.history,
        "final_train_metrics": {key: values[-1] for key, values in history.history.items() if values},
        "test_split": test_split,
        "test": flatten_report(report, "") if report else None,
        "seconds": {"total": time.time() - started, "training": train_seconds},
        "export": export_path,
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                    "tensorflow": tf.__version__, "keras": keras.__version__},
    }
    if centers:
        summary["center_phases"] = trainer.summary()
    if collapse is not None:
        summary["collapse"] = collapse.report()
    write_json_atomically(run_dir / "summary.json", summary)
    shutil.rmtree(run_dir / "backup", ignore_errors=True)  # the run is complete: a restart starts afresh
    if collapse is not None and collapse.collapsed_epoch is not None:  # again at the end, where it is seen
        print(f"kitm: WARNING: this run's embeddings collapsed in epoch {collapse.collapsed_epoch + 1} (see the "
              f"warning above and summary.json 'collapse'); its figures are not a trained model's.", file=sys.stderr)
    print(f"Run summary: {run_dir / 'summary.json'}; TensorBoard: tensorboard --logdir {run_dir / 'logs'}")
    return summary


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    from absl import logging

    from kitm.errors import KitmDataError

    # absl's INFO lines (SavedModel writing, signature renaming) drown the run's own output.
    logging.set_verbosity(logging.WARNING)
    try:
        run_training()
    except (LaunchError, KitmDataError) as error:
        print(f"kitm.launch: error: {error}", file=sys.stderr)
        sys.exit(2)


def run():
    """Console entry point (`kitm-launch`)."""
    app.run(main)


if __name__ == "__main__":
    run()

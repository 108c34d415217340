"""`python -m kitm.launch --flagfile=launch/demo.flags`: flags -> data -> model -> strategy -> train -> evaluate -> export.

The only module of kitm that knows about absl flags. Everything it builds is importable and usable without it.
A run directory holds:
    vocabulary.txt          the caption vocabulary (also inside the SavedModel)
    logs/                   TensorBoard: every loss term, learning rate, validation retrieval figures
    checkpoints/            weights after every epoch (last.weights.h5)
    backup/                 BackupAndRestore state: a killed run started again resumes here (at its last
                            backed-up step; removed when the run completes)
    evaluations.jsonl       one line per validation evaluation
    summary.json            flags, data, timings and the final test figures
    export/1/               the SavedModel (encode_text, encode_image, score)
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
flags.DEFINE_integer("image_size", 64, "Side of the square model input.", lower_bound=16)
flags.DEFINE_enum("captions_per_step", "sample", ["sample", "all"],
                  "sample: one random caption per image per epoch; all: every caption is a sample.")
flags.DEFINE_enum("relevance", "none", ["none", "truth"], "Relevance source for the batch relevance matrix.")
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
flags.DEFINE_enum("loss", "triplet", ["triplet", "sam", "ladder", "ladder_adaptive", "angular"],
                  "Training objective: triplet (VSE++); sam (triplet + sam_weight x SAM, seeds 000/002); ladder "
                  "(fixed thresholds) or ladder_adaptive (k-means levels), seed 001; angular (N-pair, symmetric, "
                  "seed 004). sam and the ladders need --relevance.")
flags.DEFINE_float("margin", 0.2, "Triplet margin (also SAM's triplet part and the first ladder).")
flags.DEFINE_bool("max_violation", True, "Hardest negative (VSE++) instead of the sum over negatives.")
flags.DEFINE_float("sam_tau", 5.0, "SAM: margin = min((R[p,p] - R[p,n]) / tau, 1).", lower_bound=1e-6)
flags.DEFINE_float("sam_weight", 1.0, "SAM: weight of the adaptive-margin term beside the triplet.", lower_bound=0.0)
flags.DEFINE_enum("sam_sampling", "hardest", ["hardest", "easiest", "random"], "SAM: negative sampling.")
flags.DEFINE_enum("sam_pairing", "matched", ["matched", "reference"],
                  "SAM: each margin with its own negative (matched) or the reference code's pairing (METHODS.md).")
flags.DEFINE_list("ladder_thresholds", ["0.40"], "Fixed ladder: relevance thresholds, decreasing.")
flags.DEFINE_list("ladder_margins", ["0.2", "0.01"], "Fixed ladder: one margin per level (thresholds + 1).")
flags.DEFINE_list("ladder_betas", ["1.0", "0.25"], "Fixed ladder: one weight per level (thresholds + 1).")
flags.DEFINE_list("ladder_level_bounds", ["2", "4"], "Adaptive ladder: (L_min, L_max) for the k-means levels.")
flags.DEFINE_float("angle_degrees", 45.0, "Angular loss angle.", lower_bound=1.0, upper_bound=89.0)
# Optimisation.
flags.DEFINE_integer("epochs", 30, "Training epochs.", lower_bound=1)
flags.DEFINE_integer("batch_size", 128, "Global batch size (split over replicas).", lower_bound=2)
flags.DEFINE_float("learning_rate", 2e-4, "Adam learning rate.", lower_bound=0.0)
flags.DEFINE_integer("lr_decay_epochs", 15, "Multiply the learning rate by lr_decay_factor every this many epochs "
                     "(0: never).", lower_bound=0)
flags.DEFINE_float("lr_decay_factor", 0.1, "Step decay factor.", lower_bound=0.0, upper_bound=1.0)
flags.DEFINE_float("grad_clip_norm", 2.0, "Clip the global gradient norm (VSE++: 2.0; 0 disables).", lower_bound=0.0)
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
flags.DEFINE_enum("eval_relevance", "auto", ["auto", "none", "truth", "cider", "sbert"],
                  "Relevance behind the validation NCS, SR and CS figures (auto: truth when the dataset has it, "
                  "else none).")
flags.DEFINE_bool("export", True, "Export a SavedModel at the end.")
flags.DEFINE_bool("progress", True, "Progress bars.")


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
}


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


def ensure_dataset(data_dir: pathlib.Path):
    """The dataset's info; the synthetic world is built when absent, other datasets stop with the command."""
    from kitm.data import schema
    from kitm.data.errors import KitmDataError

    if not (data_dir / schema.INFO_FILE).is_file():
        if FLAGS.dataset == "synthetic" and FLAGS.strategy == "multi_worker":
            raise LaunchError(f"--strategy=multi_worker reads a built dataset ({data_dir / schema.INFO_FILE} is "
                              "missing): build the synthetic world first, once, e.g. with the same flags and "
                              "--strategy=default --epochs=1, so that the workers do not all write it at once.")
        if FLAGS.dataset == "synthetic":
            from kitm.data.synthetic_records import build_synthetic

            print(f"Building the synthetic world into {data_dir} ({FLAGS.synthetic_num_scenes} scenes).")
            build_synthetic(data_dir, num_scenes=FLAGS.synthetic_num_scenes, seed=FLAGS.seed,
                            image_size=FLAGS.image_size, progress=FLAGS.progress)
        else:
            command = BUILD_COMMANDS.get(FLAGS.dataset, "python -m kitm.data.build --dataset=karpathy "
                                         "--karpathy_json=<split json> --images=<image folder> --out={data_dir}")
            raise LaunchError(
                f"Dataset '{FLAGS.dataset}' is not built: {data_dir / schema.INFO_FILE} and its shards are missing.\n"
                f"Build it with:\n  {command.format(data_dir=data_dir)}")
    try:
        return schema.load_info(data_dir)
    except KitmDataError as error:
        raise LaunchError(str(error)) from error


def check_flags_against_data(info) -> None:
    if "train" not in info.splits:
        raise LaunchError(f"The dataset at {FLAGS.data_dir} has no train split.")
    samples = info.num_images("train") * (info.captions_per_image if FLAGS.captions_per_step == "all" else 1)
    if FLAGS.batch_size > samples:
        raise LaunchError(f"--batch_size={FLAGS.batch_size} is larger than the {samples} training samples of "
                          f"{FLAGS.data_dir}; lower --batch_size.")
    if FLAGS.loss in ("sam", "ladder", "ladder_adaptive") and FLAGS.relevance == "none":
        raise LaunchError(f"--loss={FLAGS.loss} learns from graded relevance: set --relevance (e.g. truth for the "
                          "synthetic world).")
    if FLAGS.eval_relevance == "truth" and "truth" not in info.relevance:
        raise LaunchError(f"--eval_relevance=truth needs the synthetic world's facts; {FLAGS.data_dir} has relevance "
                          f"slots {sorted(info.relevance) or 'none'}.")
    if FLAGS.relevance == "truth" and "truth" not in info.relevance:
        raise LaunchError(f"--relevance=truth needs the synthetic world's facts; {FLAGS.data_dir} has relevance "
                          f"slots {sorted(info.relevance) or 'none'}.")
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


def build_objective() -> dict:
    """The losses for `DualEncoder.compile(losses=...)` from the flags (create under the strategy's scope)."""
    from kitm.losses import AdaptiveLadderLoss, AngularLoss, LadderLoss, SAMLoss, TripletLoss

    if FLAGS.loss in ("sam", "ladder", "ladder_adaptive") and FLAGS.relevance == "none":
        raise LaunchError(f"--loss={FLAGS.loss} learns from graded relevance: set --relevance (e.g. truth for the "
                          "synthetic world).")
    try:
        if FLAGS.loss == "triplet":
            return {"triplet": TripletLoss(FLAGS.margin, FLAGS.max_violation)}
        if FLAGS.loss == "sam":
            return {"sam": SAMLoss(FLAGS.sam_tau, sampling=FLAGS.sam_sampling, pairing=FLAGS.sam_pairing,
                                   sam_weight=FLAGS.sam_weight, margin=FLAGS.margin,
                                   max_violation=FLAGS.max_violation, seed=FLAGS.seed)}
        if FLAGS.loss == "ladder":
            return {"ladder": LadderLoss(_floats("ladder_thresholds"), _floats("ladder_margins"),
                                         _floats("ladder_betas"))}
        if FLAGS.loss == "ladder_adaptive":
            bounds = [int(value) for value in _floats("ladder_level_bounds")]
            return {"ladder": AdaptiveLadderLoss(bounds, first_margin=FLAGS.margin)}
        return {"angular": AngularLoss(FLAGS.angle_degrees)}
    except ValueError as error:  # the loss names the argument; say which flag feeds it
        raise LaunchError(f"--loss={FLAGS.loss}: {error}") from error


def learning_rate_schedule(steps_per_epoch: int):
    import keras

    if not FLAGS.lr_decay_epochs or FLAGS.lr_decay_epochs >= FLAGS.epochs:
        return FLAGS.learning_rate
    boundaries = list(range(FLAGS.lr_decay_epochs, FLAGS.epochs, FLAGS.lr_decay_epochs))
    values = [FLAGS.learning_rate * FLAGS.lr_decay_factor ** i for i in range(len(boundaries) + 1)]
    return keras.optimizers.schedules.PiecewiseConstantDecay([b * steps_per_epoch for b in boundaries], values)


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


def write_json_atomically(path: pathlib.Path, payload: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2, sort_keys=True, default=str))
    os.replace(tmp, path)


def run_training() -> dict:
    """Set up devices, data and strategy, then train, evaluate and export; bad records are named on failure."""
    import tensorflow as tf

    from kitm.training import distribution, reproducibility

    started = time.time()
    configure_devices()
    # Before any other TensorFlow work: the multi-worker strategy starts this process's server.
    strategy = make_strategy()
    reproducibility.set_seeds(FLAGS.seed, deterministic_ops=FLAGS.deterministic_ops)
    data_dir = pathlib.Path(FLAGS.data_dir or f"tfrecords/{FLAGS.dataset}")
    FLAGS.data_dir = str(data_dir)
    run_dir = pathlib.Path(FLAGS.run_dir or f"runs/{FLAGS.dataset}")
    run_dir.mkdir(parents=True, exist_ok=True)
    info = ensure_dataset(data_dir)
    check_flags_against_data(info)
    replicas = strategy.num_replicas_in_sync
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

    from kitm.callbacks.checkpoint import AtomicWeightsCheckpoint
    from kitm.callbacks.retrieval_evaluation import RetrievalEvaluation, flatten_report
    from kitm.data.pipeline import PipelineConfig, evaluation_dataset, training_captions, training_dataset
    from kitm.eval import build_report, format_report
    from kitm.layers import CaptionTokenizer, GRUTextEncoder, build_image_encoder, build_vocabulary
    from kitm.models import DualEncoder
    from kitm.models.inference import embed_dataset, similarity_matrix
    from kitm.serving import export_saved_model
    from kitm.training.distribution import distributed_training_input, is_chief, num_workers
    from kitm.training.fault_tolerance import ResumableBackupAndRestore, backup_save_freq

    replicas = strategy.num_replicas_in_sync
    chief_dir, run_dir = run_dir, pathlib.Path(write_dir or run_dir)  # below, run_dir is where this worker writes

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
        cache=info.num_images("train") <= 20000)
    # Per-replica pipelines under several replicas (kitm.training.distribution explains the choice).
    train = distributed_training_input(
        strategy, lambda batch, shard, seed: training_dataset(
            data_dir, "train", tokenizer, dataclasses.replace(config, batch_size=batch, num_replicas=1, seed=seed),
            shard=shard),
        global_batch=FLAGS.batch_size, num_images=info.num_images("train"),
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
        model.compile(optimizer, losses=build_objective())
        optimizer.build(model.trainable_variables)  # nothing left for fit's symbolic build (DualEncoder)

    # TerminateOnNaN first: the backup sees its stop and keeps the last good state.
    backup = ResumableBackupAndRestore(chief_dir / "backup", steps_per_epoch=steps_per_epoch,
                                       save_freq=backup_save_freq(FLAGS.backup_every_steps),
                                       write_dir=run_dir / "backup", delete_checkpoint=False)
    callbacks = [keras.callbacks.TerminateOnNaN(), backup]
    eval_split = "val" if "val" in info.splits else None
    if FLAGS.eval_every_epochs and eval_split:
        val = evaluation_dataset(data_dir, eval_split, tokenizer, config, limit=FLAGS.eval_images)
        callbacks.append(RetrievalEvaluation(val, captions_per_image=info.captions_per_image,
                                             every_epochs=FLAGS.eval_every_epochs,
                                             jsonl_path=str(run_dir / "evaluations.jsonl"),
                                             log_dir=str(run_dir / "logs" / "validation"),
                                             **evaluation_relevance(data_dir, eval_split, info, FLAGS.eval_images)))
    callbacks += [
        keras.callbacks.TensorBoard(str(run_dir / "logs"), update_freq="epoch"),
        AtomicWeightsCheckpoint(run_dir / "checkpoints" / "last.weights.h5"),
    ]
    verbose = (1 if sys.stdout.isatty() else 2) if FLAGS.progress else 0
    train_started = time.time()
    test_split = "test" if "test" in info.splits else eval_split
    report = None
    # The input repeats (one pass per epoch): steps_per_epoch marks the epochs, the same on every worker.
    history = model.fit(train.dataset, epochs=FLAGS.epochs, steps_per_epoch=steps_per_epoch, callbacks=callbacks,
                        verbose=verbose, shuffle=False)
    if backup.restored_step:
        print(f"Resumed from the backup at step {backup.restored_step} of {FLAGS.epochs * steps_per_epoch}.")
    train_seconds = time.time() - train_started
    if test_split:
        print(f"Evaluating on the {test_split} split.")
        test = evaluation_dataset(data_dir, test_split, tokenizer, config)
        images, texts, _ = embed_dataset(model, test, progress=FLAGS.progress, total=info.num_images(test_split))
        relevance = evaluation_relevance(data_dir, test_split, info, limit=None).get("relevance")
        # The same report as `python -m kitm.eval` and the validation callback (CS and N-way included).
        full_report = build_report(similarity_matrix(images, texts), captions_per_image=info.captions_per_image,
                                   relevance=relevance)
        report = full_report["all"]
        print(format_report(full_report, f"Retrieval on the {test_split} split (R@K: VSE++ definition)"))

    export_path = None
    if FLAGS.export:
        feature_dim = info.feature_dim if info.image_mode != "encoded" else None
        export_path = export_saved_model(model, tokenizer, run_dir / "export" / "1", image_mode=info.image_mode,
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
        "resumed_from_step": backup.restored_step,
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
    write_json_atomically(run_dir / "summary.json", summary)
    shutil.rmtree(run_dir / "backup", ignore_errors=True)  # the run is complete: a restart starts afresh
    print(f"Run summary: {run_dir / 'summary.json'}; TensorBoard: tensorboard --logdir {run_dir / 'logs'}")
    return summary


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    from absl import logging

    from kitm.data.errors import KitmDataError

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

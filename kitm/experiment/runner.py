"""`run(config) -> summary`: devices, data, strategy, then train, evaluate on the test split, export, summarise.

The one sequence behind `python -m kitm.launch` and the Python API. A run directory holds:
    vocabulary.txt          the caption vocabulary (also inside the SavedModel)
    logs/                   TensorBoard: every loss term, learning rate, relevance statistics, validation
                            retrieval figures, hparams (settings + test figures), projector/ (embeddings)
    checkpoints/            weights after every epoch (last.weights.h5)
    backup/                 BackupAndRestore state: a killed run started again resumes here (at its last
                            backed-up step; removed when the run completes)
    evaluations.jsonl       one line per validation evaluation
    summary.json            settings, data, timings and the final test figures; its presence marks the run finished
    export/<n>/             the SavedModels (encode_text, encode_image, score)
While a run lives, its process holds `run.lock` (kitm.run_lock): a second run started into the same
folder stops before writing anything, naming the first. A finished run directory (one with summary.json) is never
trained again: `run` refuses it and names the ways on
(another run_dir; `python -m kitm.eval --run_dir=...` to score it again). A run killed before it finished resumes
from its backup when started again with the same settings.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import platform
import shutil
import sys
import time

from kitm.errors import KitmConfigError, KitmError, option
from kitm.experiment import datasets
from kitm.experiment.config import ExperimentConfig
from kitm.experiment import encoders
from kitm.experiment.encoders import PRETRAINED_IMAGE_ENCODERS, build_image_encoder, build_text_encoder
from kitm.experiment.objectives import total_epochs, uses_center_phases, uses_neighbor_batching
from kitm.run_lock import hold_run_dir
from kitm.experiment.trainers import make_trainer
from kitm.files import no_room_error, write_json_atomically
from kitm.progress import keras_verbosity

SUMMARY_FILE = "summary.json"


def run_dir_of(config: ExperimentConfig) -> pathlib.Path:
    return pathlib.Path(config.run_dir or f"runs/{config.data.dataset}")


def check_run_dir_is_not_finished(run_dir: pathlib.Path) -> None:
    """A finished run is not silently trained again on top of its own outputs."""
    if (run_dir / SUMMARY_FILE).is_file():
        exports = sorted(path.name for path in (run_dir / "export").glob("*") if path.is_dir())
        raise KitmConfigError(
            f"{run_dir} holds a finished run ({run_dir / SUMMARY_FILE}"
            + (f", export/{exports[-1]}" if exports else "") + "). Training again there would mix two runs in "
            f"its logs and files: give a new {option('run_dir')} to train another run, or delete {run_dir} to "
            f"replace it; to score this one again: python -m kitm.eval --run_dir={run_dir}")


def resolve(config: ExperimentConfig) -> ExperimentConfig:
    """`config` with its defaults made concrete: the data and run directories, and the centers phases' epochs."""
    data = dataclasses.replace(config.data, data_dir=str(datasets.data_dir(config)))
    training = dataclasses.replace(config.training, epochs=total_epochs(config))
    return dataclasses.replace(config, data=data, training=training, run_dir=str(run_dir_of(config)))


def run(config: ExperimentConfig) -> dict:
    """Train, evaluate and export one experiment; returns its summary (also written to `<run_dir>/summary.json`).

    Set up the devices, build or read the data (the synthetic world is built on demand), make the distribution
    strategy, then train (`kitm.experiment.trainers`), score the test split, export a SavedModel. A bad shard,
    record or image met while reading is named in the error.
    """
    from kitm.serving.versions import remove_stale_exports
    from kitm.training import distribution

    started = time.time()
    config = resolve(config)
    config = encoders.resolve_hub_settings(config)
    run_dir = pathlib.Path(config.run_dir)
    check_run_dir_is_not_finished(run_dir)
    if config.preset:
        shown = " ".join(f"--{name}={_shown(config.get(name))}" for name in sorted(config.preset))
        print(f"Defaults for --dataset={config.data.dataset}: {shown}")
    distribution.split_cpu(config.training.cpu_devices)
    # Before any other TensorFlow work: the multi-worker strategy starts this process's server.
    strategy = distribution.make_strategy(config.training.strategy)
    with contextlib.ExitStack() as held:
        if distribution.is_chief(strategy):  # the one process that writes run_dir holds it (kitm.run_lock)
            held.enter_context(hold_run_dir(run_dir))
            check_run_dir_is_not_finished(run_dir)  # one that finished while this process started
            remove_stale_exports(run_dir / "export", every=True)  # a killed export's; only the holder exports here
        try:
            return _run_in(config, run_dir, strategy, started)
        except Exception as error:  # a full disk or a file-size limit, said as such (with the file) by kitm.files
            problem = None if isinstance(error, KitmError) else no_room_error(error)
            if problem is None:
                raise
            raise problem from error


def _run_in(config: ExperimentConfig, run_dir: pathlib.Path, strategy, started: float) -> dict:
    """`run` once the strategy is made and, on the chief, the run folder held."""
    import tensorflow as tf

    from kitm.training import distribution, reproducibility

    reproducibility.set_seeds(config.training.seed, deterministic_ops=config.training.deterministic_ops)
    data_dir = pathlib.Path(config.data.data_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    info = datasets.ensure_dataset(config)
    datasets.check_against_data(config, info)
    if uses_center_phases(config) and config.training.strategy == "multi_worker":
        raise KitmConfigError(f"{option('loss')}=centers is not supported with {option('strategy')}=multi_worker "
                              "yet: its loss-owned state is checkpointed by one process; use "
                              f"{option('strategy')}=mirrored on one machine.")
    try:
        # The chief writes run_dir; other workers write a temporary directory, removed at the end.
        with distribution.worker_directory(run_dir, strategy) as write_dir:
            return _train_evaluate_export(config, data_dir, run_dir, info, strategy, started, write_dir)
    except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as error:
        # A corrupt shard or an undecodable image surfaces in tf.data without naming its file; find it.
        problem = _diagnose_read_failure(data_dir, info, error)
        if problem is None:
            raise
        raise problem from error


def _shown(value) -> str:
    return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


def check_training_settings(config: ExperimentConfig, info) -> None:
    """Training settings that contradict each other, the model or the data."""
    t, model = config.training, config.model
    if t.warmup_steps and t.warmup_epochs:
        raise KitmConfigError(f"Give {option('warmup_epochs')} or {option('warmup_steps')}, not both.")
    if (t.warmup_steps or t.warmup_epochs) and t.lr_schedule != "cosine":
        raise KitmConfigError(f"{option('warmup_epochs')}/{option('warmup_steps')}: the warm-up is part of the cosine "
                              f"schedule; add {option('lr_schedule')}=cosine (got {option('lr_schedule')}="
                              f"{t.lr_schedule}).")
    if t.finetune_after_epochs:
        if model.image_encoder not in PRETRAINED_IMAGE_ENCODERS:
            raise KitmConfigError(f"{option('finetune_after_epochs')} needs a pretrained backbone "
                                  f"({option('image_encoder')}=resnet50 or resnet152); got "
                                  f"{option('image_encoder')}={model.image_encoder}.")
        if model.finetune_backbone:
            raise KitmConfigError(f"{option('finetune_after_epochs')} freezes the backbone first; it contradicts "
                                  f"{option('finetune_backbone')} (which trains it from the start).")
        if t.finetune_after_epochs >= t.epochs:
            raise KitmConfigError(f"{option('finetune_after_epochs')}={t.finetune_after_epochs} leaves no "
                                  f"fine-tuning epoch within {option('epochs')}={t.epochs}.")
    test_split = "test" if "test" in info.splits else ("val" if "val" in info.splits else None)
    if config.evaluation.fold_images and test_split and config.evaluation.fold_images > info.num_images(test_split):
        raise KitmConfigError(f"{option('fold_images')}={config.evaluation.fold_images} is larger than the "
                              f"{info.num_images(test_split)} images of the {test_split} split: no complete fold.")
    if config.evaluation.test_crops > 1 and info.image_mode != "encoded":
        raise KitmConfigError(f"{option('test_crops')}={config.evaluation.test_crops} crops images; "
                              f"{config.data.data_dir} holds {info.image_mode} features.")


def learning_rate_schedule(config: ExperimentConfig, steps_per_epoch: int):
    """Adam's learning rate (kitm.training.schedules.build_schedule)."""
    from kitm.training.schedules import build_schedule

    t = config.training
    warmup = t.warmup_steps or round(t.warmup_epochs * steps_per_epoch)
    finetune_rate = t.finetune_learning_rate if t.finetune_learning_rate is not None else t.learning_rate / 10
    try:
        return build_schedule(t.lr_schedule, t.learning_rate, steps_per_epoch=steps_per_epoch, epochs=t.epochs,
                              decay_epochs=t.lr_decay_epochs, decay_factor=t.lr_decay_factor, warmup_steps=warmup,
                              finetune_after_epochs=t.finetune_after_epochs, finetune_learning_rate=finetune_rate)
    except ValueError as error:
        raise KitmConfigError(f"{option('lr_schedule')}={t.lr_schedule} (warm-up {warmup} steps, "
                              f"{option('finetune_after_epochs')}={t.finetune_after_epochs}): {error}") from error


def evaluation_relevance(config: ExperimentConfig, data_dir: pathlib.Path, split: str, info,
                         limit: int | None) -> dict:
    """RetrievalEvaluation's relevance argument for eval_relevance: a matrix (truth, for the first `limit` images
    of the split) or a function of the captions (cider, sbert); {} for none."""
    source = config.evaluation.eval_relevance
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


def _diagnose_read_failure(data_dir: pathlib.Path, info, error: Exception) -> KitmError | None:
    """After training or evaluation failed, look for a bad shard, record or image and name it (None if all read)."""
    from kitm.data import schema
    from kitm.data.records import diagnose_shards
    from kitm.errors import KitmDataError

    print(f"Reading {data_dir} failed ({type(error).__name__}); looking for the bad record.", file=sys.stderr)
    spec = schema.feature_spec(info)
    for split in info.splits:
        message = diagnose_shards(info.shard_paths(data_dir, split), spec)
        if message:
            return KitmDataError(message)
    return None


def _train_evaluate_export(config: ExperimentConfig, data_dir: pathlib.Path, run_dir: pathlib.Path, info, strategy,
                           started: float, write_dir: pathlib.Path | None = None) -> dict:
    """Train, evaluate, export. Reads the vocabulary and the backup from `run_dir` (the chief's) and writes
    everything into `write_dir` (run_dir itself on the chief, a temporary directory on other workers)."""
    import keras
    import tensorflow as tf

    from kitm.callbacks.checkpoint import AtomicWeightsCheckpoint
    from kitm.callbacks.collapse_monitor import CollapseMonitor
    from kitm.callbacks.projector import ProjectorCallback
    from kitm.callbacks.retrieval_evaluation import RetrievalEvaluation
    from kitm.data.pipeline import PipelineConfig, evaluation_dataset, training_captions, training_dataset
    from kitm.eval import format_report
    from kitm.eval.report import (TRUTH_POSITIVE_THRESHOLD, build_report_per_query, flat_figures, per_query_path,
                                  recall_cutoffs, rsum, write_per_query)
    from kitm.layers import CaptionTokenizer, build_vocabulary
    from kitm.metrics import EmbeddingCollapse
    from kitm.models import DualEncoder
    from kitm.models.inference import embed_dataset, similarity_matrix
    from kitm.serving import export_new_version
    from kitm.training import finetune, precision
    from kitm.training.distribution import distributed_training_input, is_chief, num_workers
    from kitm.training.fault_tolerance import backup_save_freq
    from kitm.training.summaries import write_final_figures, write_hparams

    data, t, evaluation = config.data, config.training, config.evaluation
    replicas = strategy.num_replicas_in_sync
    chief_dir, run_dir = run_dir, pathlib.Path(write_dir or run_dir)  # below, run_dir is where this worker writes
    check_training_settings(config, info)
    print(f"Dtype policy: {precision.set_mixed_precision(t.mixed_precision)}.")

    vocabulary_path = chief_dir / "vocabulary.txt"
    if encoders.uses_hub_text(config):  # the text preset's own tokenizer, packing its backbone's inputs
        tokenizer = encoders.build_hub_tokenizer(config)
        print(f"Tokenizer of the text preset: {tokenizer.vocabulary_size} ids, {tokenizer.sequence_length} tokens.")
    elif vocabulary_path.is_file():  # a resumed run keeps its vocabulary (the embedding rows depend on it)
        tokenizer = CaptionTokenizer(str(vocabulary_path), data.max_caption_length, name="tokenizer")
    else:
        print("Building the vocabulary from the training captions.")
        vocabulary = build_vocabulary(training_captions(data_dir, "train"), min_count=data.vocab_min_count,
                                      progress=t.progress)
        tokenizer = CaptionTokenizer(vocabulary, data.max_caption_length, name="tokenizer")
        tokenizer.save_vocabulary(str(run_dir / "vocabulary.txt"))
    if not encoders.uses_hub_text(config):
        print(f"Vocabulary: {tokenizer.vocabulary_size} ids; {replicas} replica(s); global batch {t.batch_size}.")

    pipeline_config = PipelineConfig(
        batch_size=t.batch_size, image_size=data.image_size, captions=data.captions_per_step,
        relevance=data.relevance, crop_area=(data.crop_area_min, 1.0), flip=data.flip,
        eval_crop_fraction=data.eval_crop_fraction, num_replicas=replicas, seed=t.seed,
        cache=info.num_images("train") <= 20000, neighbor_batching=uses_neighbor_batching(config),
        train_subset=datasets.training_subset(config, info), neighbor_draw=config.objective.neighbor_draw,
        neighbor_space=config.objective.neighbor_space, test_crops=evaluation.test_crops)
    trainer = make_trainer(config, data_dir=data_dir, run_dir=run_dir, info=info)

    def pipeline(batch, shard, seed):
        dataset = training_dataset(data_dir, "train", tokenizer,
                                   dataclasses.replace(pipeline_config, batch_size=batch, num_replicas=1, seed=seed),
                                   shard=shard)
        return trainer.prepare_input(dataset)

    # Per-replica pipelines under several replicas (kitm.training.distribution explains the choice).
    train = distributed_training_input(
        strategy, pipeline, global_batch=t.batch_size, num_images=datasets.training_images(config, info),
        samples_per_image=info.captions_per_image if data.captions_per_step == "all" else 1, seed=t.seed)
    steps_per_epoch = train.steps_per_epoch

    with strategy.scope():
        image_encoder, text_encoder, joint = encoders.build_towers(config, tokenizer)
        if joint is not None:  # the preset's joint space and temperature (kitm.layers.hub_towers.JointPreset)
            config = encoders.hand_over_logit_scale(config._with({"embedding_dim": joint.embedding_dim},
                                                                 explicit=False), joint)
            trainer.config = config
        model = DualEncoder(image_encoder, text_encoder, config.model.embedding_dim, name="dual_encoder")
        model.build_from_inputs(train.element_spec[0])
        if joint is not None:
            joint.initialize_projections(model)
        encoders.apply_tower_training(config, model)
        optimizer = encoders.make_optimizer(config, model, learning_rate_schedule(config, steps_per_epoch),
                                            global_clipnorm=t.grad_clip_norm or None)
        jit_compile = {"auto": "auto", "true": True, "false": False}[str(t.jit_compile).lower()]
        # The collapse monitor's statistic (kitm.metrics.collapse), logged every epoch.
        monitors = [EmbeddingCollapse()] if t.collapse_threshold else []
        trainer.compile(model, optimizer=optimizer, strategy=strategy, monitors=monitors, jit_compile=jit_compile,
                        steps_per_epoch=steps_per_epoch)
        if t.finetune_after_epochs:
            finetune.prepare_backbone_finetuning(model)
        trainer.build_optimizer(model, optimizer)

    settings = config.settings()
    write_hparams(run_dir / "logs", settings, trial_id=run_dir.name)

    # TerminateOnNaN first: the backup sees its stop and keeps the last good state.
    backup = trainer.backup(chief_dir, run_dir, steps_per_epoch=steps_per_epoch,
                            save_freq=backup_save_freq(t.backup_every_steps))
    callbacks = [keras.callbacks.TerminateOnNaN(), backup]
    collapse = None
    if t.collapse_threshold:
        collapse = CollapseMonitor(t.collapse_threshold, stop=t.stop_on_collapse)
        callbacks.append(collapse)
    if t.finetune_after_epochs:
        callbacks.append(finetune.BackboneFineTuning(t.finetune_after_epochs, verbose=int(t.progress)))
    eval_split = "val" if "val" in info.splits else None
    # A run shorter than the evaluation interval still validates once, at its end.
    eval_every = min(evaluation.eval_every_epochs, t.epochs)
    if eval_every != evaluation.eval_every_epochs:
        print(f"Validation every {eval_every} epoch(s): the run is shorter than --eval_every_epochs="
              f"{evaluation.eval_every_epochs}.")
    if eval_every and eval_split:
        val = evaluation_dataset(data_dir, eval_split, tokenizer, pipeline_config, limit=evaluation.eval_images)
        callbacks.append(RetrievalEvaluation(
            val, captions_per_image=info.captions_per_image,
            ks=recall_cutoffs(min(info.num_images(eval_split), evaluation.eval_images)), every_epochs=eval_every,
            jsonl_path=str(run_dir / "evaluations.jsonl"), log_dir=str(run_dir / "logs" / "validation"),
            **evaluation_relevance(config, data_dir, eval_split, info, evaluation.eval_images)))
    if evaluation.projector_samples and eval_split:
        subset = evaluation_dataset(data_dir, eval_split, tokenizer, pipeline_config,
                                    limit=evaluation.projector_samples)
        callbacks.append(ProjectorCallback(subset, run_dir / "logs", num_images=evaluation.projector_samples,
                                           captions_per_image=info.captions_per_image, every_epochs=eval_every))
    # Before TensorBoard, which then writes what they put into the epoch logs.
    callbacks += trainer.callbacks(run_dir)
    callbacks += [
        keras.callbacks.TensorBoard(str(run_dir / "logs"), update_freq="epoch"),
        AtomicWeightsCheckpoint(run_dir / "checkpoints" / "last.weights.h5"),
    ]
    verbose = keras_verbosity(t.progress)  # a line per epoch when stdout is a file (kitm.progress)
    train_started = time.time()
    test_split = "test" if "test" in info.splits else eval_split
    report = test_figures = None
    # The input repeats (one pass per epoch): steps_per_epoch marks the epochs, the same on every worker.
    history = trainer.fit(model, train.dataset, callbacks, steps_per_epoch=steps_per_epoch, verbose=verbose)
    train_seconds = time.time() - train_started
    if test_split:
        print(f"Evaluating on the {test_split} split.")
        test = evaluation_dataset(data_dir, test_split, tokenizer, pipeline_config)
        images, texts, _ = embed_dataset(model, test, progress=t.progress, total=info.num_images(test_split))
        relevance = evaluation_relevance(config, data_dir, test_split, info, limit=None).get("relevance")
        # The same report as `python -m kitm.eval` and the validation callback (CS and N-way included). A relevance
        # matrix here is the synthetic world's truth: mAP@R counts its fully relevant items as positives.
        fold_images = evaluation.fold_images or None
        full_report, per_query = build_report_per_query(
            similarity_matrix(images, texts), captions_per_image=info.captions_per_image, relevance=relevance,
            ks=recall_cutoffs(info.num_images(test_split)),
            fold_images=fold_images, positive_threshold=None if relevance is None else TRUTH_POSITIVE_THRESHOLD)
        report = full_report["all"]
        test_figures = flat_figures(full_report)
        print(format_report(full_report, f"Retrieval on the {test_split} split (R@K: VSE++ definition)"))
        write_final_figures(run_dir / "logs", {**test_figures, "rsum": rsum(report)},
                            step=len(history.history.get("loss", [])))
        # Beside summary.json, before it: the per-query values of the test figures (kitm.eval.report.write_per_query).
        write_per_query(run_dir / SUMMARY_FILE, per_query)

    export_path = None
    if config.export.export:
        feature_dim = info.feature_dim if info.image_mode != "encoded" else None
        export_path = export_new_version(model, tokenizer, run_dir / "export", image_mode=info.image_mode,
                                         image_size=data.image_size, eval_crop_fraction=data.eval_crop_fraction,
                                         feature_dim=feature_dim)
        print(f"SavedModel: {export_path}")

    summary = {
        "flags": settings,
        "dataset": {"dir": str(data_dir), "name": info.name,
                    "splits": {s: e["num_images"] for s, e in info.splits.items()}},
        "replicas": replicas,
        "steps_per_epoch": steps_per_epoch,
        "epochs_run": len(history.history.get("loss", [])),
        "optimizer_steps": int(keras.ops.convert_to_numpy(model.optimizer.iterations)),
        "resumed_from_step": getattr(backup, "restored_step", 0),
        "workers": {"count": num_workers(strategy), "chief": is_chief(strategy)},
        "history": history.history,
        "final_train_metrics": {key: values[-1] for key, values in history.history.items() if values},
        "test_split": test_split,
        "test": test_figures if report else None,
        "test_per_query": per_query_path(SUMMARY_FILE).name if report else None,
        "seconds": {"total": time.time() - started, "training": train_seconds},
        "export": export_path,
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                    "tensorflow": tf.__version__, "keras": keras.__version__},
        **trainer.summary(),
    }
    if collapse is not None:
        summary["collapse"] = collapse.report()
    write_json_atomically(run_dir / SUMMARY_FILE, summary, sort_keys=True, strict=False)
    shutil.rmtree(run_dir / "backup", ignore_errors=True)  # the run is complete
    if collapse is not None and collapse.collapsed_epoch is not None:  # again at the end, where it is seen
        print(f"kitm: WARNING: this run's embeddings collapsed in epoch {collapse.collapsed_epoch + 1} (see the "
              f"warning above and summary.json 'collapse'); its figures are not a trained model's.", file=sys.stderr)
    print(f"Run summary: {run_dir / SUMMARY_FILE}; TensorBoard: tensorboard --logdir {run_dir / 'logs'}")
    return summary

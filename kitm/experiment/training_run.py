"""One training run's steps, after the run directory, data and strategy are settled (`kitm.experiment.runner`):
tokenizer, input, model, callbacks, fit; then what the run leaves: test, export, summary (`kitm.experiment.run_outputs`).

`train_evaluate_export` runs them in that order (the order matters: each draws from the seeded generators as the run
always has); the steps share a `_RunParts` instead of passing its values along.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
import sys
import time
import typing

import keras

from kitm.errors import KitmConfigError, option
from kitm.experiment import datasets, encoders, run_outputs
from kitm.experiment.config import ExperimentConfig
from kitm.experiment.encoders import PRETRAINED_IMAGE_ENCODERS
from kitm.experiment.objectives import check_grad_cache, resolve_negatives, uses_neighbor_batching
from kitm.experiment.trainers import make_trainer
from kitm.progress import keras_verbosity
from kitm.distribute.backend import on_tensorflow
from kitm.distribute.data_parallel import check_batch
from kitm.distribute.processes import process_count, process_index
from kitm.distribute.replicas import batch_replicas

from kitm.experiment.run_parts import _RunParts

if typing.TYPE_CHECKING:
    from kitm.layers.hub_towers import JointPreset



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


def train_evaluate_export(config: ExperimentConfig, data_dir: pathlib.Path, run_dir: pathlib.Path, info, strategy,
                           started: float, write_dir: pathlib.Path | None = None) -> dict:
    """Train, evaluate, export. Reads the vocabulary and the backup from `run_dir` (the chief's) and writes
    everything into `write_dir` (run_dir itself on the chief, a temporary directory on other workers)."""
    from kitm.training import precision
    from kitm.training.summaries import write_hparams

    # Global or local negatives for this replica count (docs/scale.md); the summary records the resolved value.
    # On JAX the replicas are keras.distribution's devices (kitm.distribute.data_parallel).
    replicas = batch_replicas(strategy)
    config = resolve_negatives(config, replicas, whole_batch=not on_tensorflow())
    check_grad_cache(config, replicas)
    if not on_tensorflow():  # tf.distribute's input checks its own split (kitm.training.distribution)
        check_batch(config.training.batch_size, replicas)
    check_training_settings(config, info)
    print(f"Dtype policy: {precision.set_mixed_precision(config.training.mixed_precision)}.")
    config, joint = _settle_joint_preset(config, strategy)
    run = _RunParts(config=config, info=info, data_dir=data_dir, chief_dir=run_dir,
                    run_dir=pathlib.Path(write_dir or run_dir), strategy=strategy, joint=joint)
    run = dataclasses.replace(run, tokenizer=_tokenizer(run))
    run = dataclasses.replace(run, pipeline_config=_pipeline_config(run),
                              trainer=make_trainer(config, data_dir=data_dir, run_dir=run.run_dir, info=info))
    train = _training_input(run)
    model = _build_model(run, train)
    local_copy = _local_copy(run, train)
    settings = config.settings()
    write_hparams(run.run_dir / "logs", settings, trial_id=run.run_dir.name)
    callbacks, backup, epoch_history, collapse, non_finite = _callbacks(run, train.steps_per_epoch, local_copy)
    train_started = time.time()
    # The input repeats (one pass per epoch): steps_per_epoch marks the epochs, the same on every worker.
    history = run.trainer.fit(model, train.dataset, callbacks, steps_per_epoch=train.steps_per_epoch,
                              verbose=keras_verbosity(config.training.progress))  # a line per epoch off a tty
    train_seconds = time.time() - train_started
    if non_finite.stopped_at is not None:  # no test, export or summary of a model whose weights hold NaN
        raise non_finite.error(config, run.chief_dir)
    if collapse is not None:  # a resumed run's epochs before the restore (kitm.training.epoch_history)
        collapse.include_earlier_epochs(epoch_history.earlier)
    training = run_outputs.summary_of_training(run, model, train, backup, history, epoch_history.earlier)
    if local_copy is not None:  # JAX across processes: the chief tests and exports the copy, the others are done
        model = _leave_processes(model, local_copy)
    test_split, test_figures = run_outputs.test_split(run, model, history) if model is not None else (None, None)
    export_path = run_outputs.export(run, model) if model is not None else None
    summary = {
        "flags": settings,
        **training,
        "test_split": test_split,
        "test": test_figures,
        "test_per_query": run_outputs.per_query_file_name() if test_figures is not None else None,
        "seconds": {"total": time.time() - started, "training": train_seconds},
        "export": export_path,
        **run_outputs.machine(),
        **run.trainer.summary(),
    }
    if collapse is not None:
        summary["collapse"] = collapse.report()
    run_outputs.finish(run, summary, collapse)
    return summary


def _settle_joint_preset(config: ExperimentConfig, strategy) -> tuple[ExperimentConfig, JointPreset | None]:
    """(config, joint): with `joint_preset`, the preset loaded (under the strategy's scope, as the model's other
    variables) and what it implies filled into the settings, its joint space's size and its temperature
    (kitm.layers.hub_towers.JointPreset), before anything is built from them; else (config, None)."""
    if not config.model.joint_preset:
        return config, None
    with strategy.scope():
        joint = encoders.load_joint_preset(config)
    return encoders.hand_over_logit_scale(config.fill(embedding_dim=joint.embedding_dim), joint), joint


class NonFiniteLossStop(keras.callbacks.TerminateOnNaN):
    """Ends training at the first batch whose loss is NaN or infinite (as TerminateOnNaN, whose stop the backup
    and the checkpoint see: they keep the last good state) and remembers where, so the run then stops with an
    error naming the step instead of testing and exporting a broken model."""

    def __init__(self):
        super().__init__()
        self.stopped_at: tuple[int, int, float] | None = None  # (epoch, batch, loss), both counted from 1
        self._epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(float(loss)) and self.stopped_at is None:
            self.stopped_at = (self._epoch + 1, batch + 1, float(loss))
            print(f"kitm: the training loss is {float(loss)} at batch {batch + 1} of epoch {self._epoch + 1}: "
                  "training stops here.", file=sys.stderr, flush=True)
        if self.stopped_at is not None:
            self.model.stop_training = True

    def error(self, config: ExperimentConfig, run_dir: pathlib.Path) -> KitmConfigError:
        epoch, batch, loss = self.stopped_at
        return KitmConfigError(
            f"The training loss became {loss} at batch {batch} of epoch {epoch}: training stopped there, without a "
            f"test, an export or a summary. The usual cause is a learning rate too large for the model "
            f"({option('learning_rate')}={config.training.learning_rate:g}): lower it and give a new "
            f"{option('run_dir')} (the weights of the last good epoch, if one finished, are in "
            f"{run_dir / 'checkpoints' / 'last.weights.h5'}).")


def _tokenizer(run: _RunParts):
    """The text preset's own tokenizer, a resumed run's vocabulary, or one built from the training captions."""
    from kitm.data.pipeline import training_captions
    from kitm.layers import CaptionTokenizer, build_vocabulary

    config, data = run.config, run.config.data
    vocabulary_path = run.chief_dir / "vocabulary.txt"
    if encoders.uses_hub_text(config):  # the text preset's own tokenizer, packing its backbone's inputs
        tokenizer = encoders.build_hub_tokenizer(config)
        print(f"Tokenizer of the text preset: {tokenizer.vocabulary_size} ids, {tokenizer.sequence_length} tokens.")
        return tokenizer
    if vocabulary_path.is_file():  # a resumed run keeps its vocabulary (the embedding rows depend on it)
        tokenizer = CaptionTokenizer(str(vocabulary_path), data.max_caption_length, name="tokenizer")
    else:
        print("Building the vocabulary from the training captions.")
        vocabulary = build_vocabulary(training_captions(run.data_dir, "train"), min_count=data.vocab_min_count,
                                      progress=config.training.progress)
        tokenizer = CaptionTokenizer(vocabulary, data.max_caption_length, name="tokenizer")
        tokenizer.save_vocabulary(str(run.run_dir / "vocabulary.txt"))
    print(f"Vocabulary: {tokenizer.vocabulary_size} ids; {batch_replicas(run.strategy)} replica(s); global "
          f"batch {config.training.batch_size}.")
    return tokenizer


def _pipeline_config(run: _RunParts):
    """The input pipeline's settings, from the data, training and evaluation settings."""
    from kitm.data.pipeline import PipelineConfig

    config, info = run.config, run.info
    data, t = config.data, config.training
    return PipelineConfig(
        batch_size=t.batch_size, image_size=data.image_size, captions=data.captions_per_step,
        relevance=data.relevance, crop_area=(data.crop_area_min, 1.0), flip=data.flip,
        eval_crop_fraction=data.eval_crop_fraction, num_replicas=run.strategy.num_replicas_in_sync, seed=t.seed,
        cache=info.num_images("train") <= 20000, neighbor_batching=uses_neighbor_batching(config),
        train_subset=datasets.training_subset(config, info), neighbor_draw=config.objective.neighbor_draw,
        neighbor_space=config.objective.neighbor_space, test_crops=config.evaluation.test_crops)


def _training_input(run: _RunParts):
    """The training input: per-replica pipelines under several replicas (kitm.training.distribution explains why)."""
    from kitm.data.own_rows import InputCounters, own_rows_dataset, replica_rows
    from kitm.data.pipeline import training_dataset
    from kitm.training.distribution import distributed_training_input, num_workers

    config, t = run.config, run.config.training
    replicas = run.strategy.num_replicas_in_sync
    # Global negatives with a relevance source: every replica needs its rows of the global batch's relevance, [b, B].
    global_rows = t.negatives == "global" and replicas > 1 and config.data.relevance != "none"
    processes = process_count()
    # A worker keeps its own rows of each global batch (kitm.data.own_rows) across processes, or across workers with
    # global rows; what they decode goes into summary.json (B / W images a batch).
    own_rows = processes > 1 or (global_rows and num_workers(run.strategy) > 1)
    counters = InputCounters() if own_rows else None

    def pipeline(batch, shard, seed):
        if processes > 1:
            # JAX across processes: process i feeds part i of each global batch's rows, with their rows of the batch's
            # relevance ([B/P, B]), decoding only its own images (kitm.data.own_rows); Keras makes the P parts one
            # global array, so the step is the one-process step with the whole batch (docs/scale.md).
            return run.trainer.prepare_input(own_rows_dataset(
                run.data_dir, "train", run.tokenizer,
                dataclasses.replace(run.pipeline_config, batch_size=batch, num_replicas=1, seed=seed),
                rows=(processes, process_index()), counters=counters))
        if global_rows:
            # Every replica needs its rows of the global batch's [B, B] relevance. Several workers: worker w keeps
            # part w of each global batch's rows (its L replicas' b rows each), decoding only their images
            # (kitm.data.own_rows); one worker: the whole batch. Then its replicas' pieces (replica_rows).
            workers, worker = shard if shard is not None else (1, 0)
            local = replicas // workers
            settings = dataclasses.replace(run.pipeline_config, batch_size=batch * replicas, num_replicas=1, seed=seed)
            if workers > 1:
                dataset = own_rows_dataset(run.data_dir, "train", run.tokenizer, settings, rows=(workers, worker),
                                           counters=counters)
            else:
                dataset = training_dataset(run.data_dir, "train", run.tokenizer, settings)
            return run.trainer.prepare_input(replica_rows(dataset, local))
        dataset = training_dataset(run.data_dir, "train", run.tokenizer,
                                   dataclasses.replace(run.pipeline_config, batch_size=batch, num_replicas=1,
                                                       seed=seed),
                                   shard=shard)
        return run.trainer.prepare_input(dataset)

    train = distributed_training_input(
        run.strategy, pipeline, global_batch=t.batch_size, num_images=datasets.training_images(config, run.info),
        samples_per_image=run.info.captions_per_image if config.data.captions_per_step == "all" else 1, seed=t.seed)
    return dataclasses.replace(train, input_counters=counters)


def _build_model(run: _RunParts, train):
    """The dual encoder, its optimizer and objective, under the strategy's scope (a joint preset's towers from
    `run.joint`, whose joint space and temperature the settings already hold)."""
    from kitm.metrics import EmbeddingCollapse
    from kitm.training import finetune

    config, t = run.config, run.config.training
    with run.strategy.scope():
        model = _dual_encoder(run, train, run.joint)
        encoders.apply_tower_training(config, model)
        optimizer = encoders.make_optimizer(config, model, learning_rate_schedule(config, train.steps_per_epoch),
                                            global_clipnorm=t.grad_clip_norm or None)
        jit_compile = {"auto": "auto", "true": True, "false": False}[str(t.jit_compile).lower()]
        # The collapse monitor's statistic (kitm.metrics.collapse), logged every epoch.
        monitors = [EmbeddingCollapse()] if t.collapse_threshold else []
        run.trainer.compile(model, optimizer=optimizer, strategy=run.strategy, monitors=monitors,
                            jit_compile=jit_compile, steps_per_epoch=train.steps_per_epoch)
        if t.finetune_after_epochs:
            finetune.prepare_backbone_finetuning(model)
        run.trainer.build_optimizer(model, optimizer)
    return model


def _dual_encoder(run: _RunParts, train, joint):
    """The dual encoder built for the training input (its towers from `joint`, a joint preset, when given; a new
    load of the preset when the settings name one and `joint` is None)."""
    from kitm.models import DualEncoder

    image_encoder, text_encoder, joint = encoders.build_towers(run.config, run.tokenizer, joint)
    model = DualEncoder(image_encoder, text_encoder, run.config.model.embedding_dim, name="dual_encoder")
    model.build_from_inputs(train.element_spec[0])
    if joint is not None:
        joint.initialize_projections(model)
    return model


def _local_copy(run: _RunParts, train):
    """Across JAX processes, a copy of the model on this process's devices alone, for embedding (validation, the
    projector, the test split, the export: kitm.callbacks.local_copy says why); None on one process. Every process
    builds it, so the random draws stay the same in all of them."""
    if process_count() == 1:
        return None
    distribution = keras.distribution.distribution()
    keras.distribution.set_distribution(None)  # its variables on this process's devices
    try:
        return _dual_encoder(run, train, None)
    finally:
        keras.distribution.set_distribution(distribution)


def _callbacks(run: _RunParts, steps_per_epoch: int, local_copy=None):
    """(callbacks, the backup, the epochs' history beside it, the collapse monitor or None, the non-finite loss stop):
    that stop, backup, collapse, fine-tuning, validation, projector, the trainer's own, TensorBoard, the weights
    checkpoint and the history beside the backup, in that order. With a `local_copy` (JAX across processes)
    validation and the projector run on the chief only, with the copy."""
    from kitm.callbacks.checkpoint import AtomicWeightsCheckpoint
    from kitm.callbacks.collapse_monitor import CollapseMonitor
    from kitm.callbacks.local_copy import OnLocalCopy
    from kitm.training.distribution import is_chief
    from kitm.training import finetune
    from kitm.training.epoch_history import EpochHistoryBackup
    from kitm.training.fault_tolerance import backup_save_freq

    t = run.config.training
    # The non-finite loss stop first: the backup sees its stop and keeps the last good state.
    backup = run.trainer.backup(run.chief_dir, run.run_dir, steps_per_epoch=steps_per_epoch,
                                save_freq=backup_save_freq(t.backup_every_steps))
    non_finite = NonFiniteLossStop()
    callbacks = [non_finite, backup]
    collapse = None
    if t.collapse_threshold:
        collapse = CollapseMonitor(t.collapse_threshold, stop=t.stop_on_collapse)
        callbacks.append(collapse)
    if t.finetune_after_epochs:
        callbacks.append(finetune.BackboneFineTuning(t.finetune_after_epochs, verbose=int(t.progress)))
    embedding = _validation_callbacks(run) if is_chief(run.strategy) or local_copy is None else []
    callbacks += embedding if local_copy is None else [OnLocalCopy(callback, local_copy) for callback in embedding]
    # Before TensorBoard, which then writes what they put into the epoch logs.
    callbacks += run.trainer.callbacks(run.run_dir)
    callbacks += [
        keras.callbacks.TensorBoard(str(run.run_dir / "logs"), update_freq="epoch"),
        AtomicWeightsCheckpoint(run.run_dir / "checkpoints" / "last.weights.h5"),
    ]
    # Last: the epoch's logs are complete (validation included) when it writes them.
    epoch_history = EpochHistoryBackup(backup)
    callbacks.append(epoch_history)
    return callbacks, backup, epoch_history, collapse, non_finite


def _validation_callbacks(run: _RunParts) -> list:
    """Retrieval figures on the validation split every few epochs, and the embedding projector."""
    from kitm.callbacks.projector import ProjectorCallback
    from kitm.callbacks.retrieval_evaluation import RetrievalEvaluation
    from kitm.data.pipeline import evaluation_dataset
    from kitm.eval.report import recall_cutoffs

    config, info, evaluation = run.config, run.info, run.config.evaluation
    eval_split = "val" if "val" in info.splits else None
    # A run shorter than the evaluation interval still validates once, at its end.
    eval_every = min(evaluation.eval_every_epochs, config.training.epochs)
    if eval_every != evaluation.eval_every_epochs:
        print(f"Validation every {eval_every} epoch(s): the run is shorter than --eval_every_epochs="
              f"{evaluation.eval_every_epochs}.")
    callbacks = []
    if eval_every and eval_split:
        val = evaluation_dataset(run.data_dir, eval_split, run.tokenizer, run.pipeline_config,
                                 limit=evaluation.eval_images)
        callbacks.append(RetrievalEvaluation(
            val, captions_per_image=info.captions_per_image,
            ks=recall_cutoffs(min(info.num_images(eval_split), evaluation.eval_images)), every_epochs=eval_every,
            jsonl_path=str(run.run_dir / "evaluations.jsonl"), log_dir=str(run.run_dir / "logs" / "validation"),
            **run_outputs.evaluation_relevance(config, run.data_dir, eval_split, info, evaluation.eval_images)))
    if evaluation.projector_samples and eval_split:
        subset = evaluation_dataset(run.data_dir, eval_split, run.tokenizer, run.pipeline_config,
                                    limit=evaluation.projector_samples)
        callbacks.append(ProjectorCallback(subset, run.run_dir / "logs", num_images=evaluation.projector_samples,
                                           captions_per_image=info.captions_per_image, every_epochs=eval_every))
    return callbacks


def _leave_processes(model, local_copy):
    """After training across JAX processes: the trained weights into the local copy, then every process leaves the
    cluster together; the copy on the chief (which tests and exports it), None on the others."""
    from kitm.distribute import processes

    chief = processes.process_index() == 0
    local_copy.set_weights(model.get_weights())
    processes.stop()
    keras.distribution.set_distribution(None)
    return local_copy if chief else None



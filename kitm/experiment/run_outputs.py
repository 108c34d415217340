"""What a trained run leaves: the test split's figures (and the relevance they are scored with), the SavedModel
export, and summary.json, which marks the run finished (`kitm.experiment.training_run` calls them in that order)."""

from __future__ import annotations

import os
import pathlib
import platform
import shutil
import sys

import keras
import numpy as np

from kitm.experiment.config import ExperimentConfig
from kitm.files import write_json_atomically
from kitm.distribute.replicas import batch_replicas

from kitm.experiment.run_parts import _RunParts

SUMMARY_FILE = "summary.json"


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
        from kitm.data.split_reading import read_split
        from kitm.eval.split_relevance import split_relevance

        subset = read_split(data_dir, split, limit=limit, with_images=False)
        return {"relevance": split_relevance(subset, "truth")}
    import functools

    from kitm.eval.relevance_sources import caption_relevance

    return {"relevance_fn": functools.partial(caption_relevance, source)}


def test_split(run: _RunParts, model, history) -> tuple[str | None, dict | None]:
    """(split, figures): the test split (else val) scored as `python -m kitm.eval` scores it, its per-query values
    written beside summary.json; (None, None) without either split."""
    from kitm.data.pipeline import evaluation_dataset
    from kitm.eval import format_report
    from kitm.eval.small_sets import small_set_warnings
    from kitm.eval.report import (TRUTH_POSITIVE_THRESHOLD, build_report_per_query, flat_figures, recall_cutoffs,
                                  rsum, write_per_query)
    from kitm.models.inference import embed_dataset, similarity_matrix
    from kitm.training.summaries import write_final_figures

    config, info = run.config, run.info
    test_split = "test" if "test" in info.splits else ("val" if "val" in info.splits else None)
    if not test_split:
        return None, None
    print(f"Evaluating on the {test_split} split.")
    test = evaluation_dataset(run.data_dir, test_split, run.tokenizer, run.pipeline_config)
    images, texts, _ = embed_dataset(model, test, progress=config.training.progress,
                                     total=info.num_images(test_split))
    relevance = evaluation_relevance(config, run.data_dir, test_split, info, limit=None).get("relevance")
    # The same report as `python -m kitm.eval` and the validation callback (CS and N-way included). A relevance
    # matrix here is the synthetic world's truth: mAP@R counts its fully relevant items as positives.
    full_report, per_query = build_report_per_query(
        similarity_matrix(images, texts), captions_per_image=info.captions_per_image, relevance=relevance,
        ks=recall_cutoffs(info.num_images(test_split)), fold_images=config.evaluation.fold_images or None,
        positive_threshold=None if relevance is None else TRUTH_POSITIVE_THRESHOLD)
    test_figures = flat_figures(full_report)
    print(format_report(full_report, f"Retrieval on the {test_split} split (R@K: VSE++ definition)"))
    # What a split this small cannot measure, as `python -m kitm.eval` says it (a 2-image split printed NCS 0.00).
    for warning in small_set_warnings(len(images), len(texts), info.captions_per_image,
                                      recall_cutoffs(info.num_images(test_split)), with_relevance=relevance is not None):
        print(f"kitm: warning: {warning}", file=sys.stderr, flush=True)
    write_final_figures(run.run_dir / "logs", {**test_figures, "rsum": rsum(full_report["all"])},
                        step=len(history.history.get("loss", [])))
    # Beside summary.json, before it: the per-query values of the test figures (kitm.eval.report.write_per_query).
    write_per_query(run.run_dir / SUMMARY_FILE, per_query)
    return test_split, test_figures


def per_query_file_name() -> str:
    """The name of the per-query file beside summary.json."""
    from kitm.eval.report import per_query_path

    return per_query_path(SUMMARY_FILE).name


def export(run: _RunParts, model) -> str | None:
    """A new SavedModel version under export/ (None with export off)."""
    from kitm.serving import export_new_version

    config, info = run.config, run.info
    if not config.export.export:
        return None
    feature_dim = info.feature_dim if info.image_mode != "encoded" else None
    export_path = export_new_version(model, run.tokenizer, run.run_dir / "export", image_mode=info.image_mode,
                                     image_size=config.data.image_size,
                                     eval_crop_fraction=config.data.eval_crop_fraction, feature_dim=feature_dim)
    print(f"SavedModel: {export_path}")
    version = int(pathlib.Path(export_path).name)  # the ONNX towers and presets pair with the SavedModel's version
    if config.export.export_onnx:
        from kitm.serving.onnx import export_onnx_version

        onnx_path = export_onnx_version(model, run.tokenizer, run.run_dir / "onnx", version,
                                        image_mode=info.image_mode, image_size=config.data.image_size,
                                        eval_crop_fraction=config.data.eval_crop_fraction, feature_dim=feature_dim)
        print(f"ONNX towers: {onnx_path}")
    if config.export.export_presets:
        from kitm.serving.hub_presets import save_tower_presets

        presets_path = save_tower_presets(model, run.tokenizer, run.run_dir / "presets" / str(version))
        print(f"keras-hub presets: {presets_path}")
    return export_path


def summary_of_training(run: _RunParts, model, train, backup, history, earlier_epochs=()) -> dict:
    """summary.json's account of the training: data, replicas, steps, epochs, resumption, workers, history. A resumed
    run's history starts with the `earlier_epochs` kept beside its backup (kitm.training.epoch_history); "epochs_run"
    counts the epochs this process trained."""
    from kitm.training.distribution import is_chief, num_workers
    from kitm.training.epoch_history import merged_history

    info = run.info
    whole_history = merged_history(list(earlier_epochs), history.history)
    return {
        "dataset": {"dir": str(run.data_dir), "name": info.name,
                    "splits": {s: e["num_images"] for s, e in info.splits.items()}},
        "replicas": batch_replicas(run.strategy),
        "steps_per_epoch": train.steps_per_epoch,
        "epochs_run": len(history.history.get("loss", [])),
        "optimizer_steps": int(keras.ops.convert_to_numpy(model.optimizer.iterations)),
        "resumed_from_step": getattr(backup, "restored_step", 0),
        "history_restored_epochs": len(earlier_epochs),
        "workers": {"count": num_workers(run.strategy), "chief": is_chief(run.strategy)},
        **_input_work(train),
        "parameters": _parameters(model),
        "peak_memory": _peak_memory(),
        "history": whole_history,
        "final_train_metrics": {key: values[-1] for key, values in whole_history.items() if values},
    }


def _parameters(model) -> dict:
    """The model's parameter counts: what the optimizer trains (with --lora_rank the adapters and projections) and
    the rest."""
    def count(variables):
        return int(sum(np.prod(v.shape, dtype=np.int64) for v in variables))

    return {"trainable": count(model.trainable_weights), "non_trainable": count(model.non_trainable_weights)}


def _peak_memory() -> dict:
    """This process's peak resident memory (the host's: batches, a CPU run's activations and weights), in bytes."""
    import resource

    # Linux gives ru_maxrss in KiB (macOS in bytes).
    scale = 1 if sys.platform == "darwin" else 1024
    return {"host_peak_rss_bytes": int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * scale}


def _input_work(train) -> dict:
    """With a worker's own rows of the global batch (kitm.data.own_rows): the images its pipeline decoded, the
    batches it made, and their ratio (B / W)."""
    counters = train.input_counters
    if counters is None:
        return {}
    return {"input": {"images_decoded": int(counters.images.numpy()), "batches": int(counters.batches.numpy()),
                      "images_decoded_per_batch": counters.images_per_batch()}}


def machine() -> dict:
    import tensorflow as tf

    return {"machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                        "tensorflow": tf.__version__, "keras": keras.__version__}}


def finish(run: _RunParts, summary: dict, collapse) -> None:
    """Write summary.json (which marks the run finished), drop the backup, and say where things are."""
    run_dir = run.run_dir
    write_json_atomically(run_dir / SUMMARY_FILE, summary, sort_keys=True, strict=False)
    shutil.rmtree(run_dir / "backup", ignore_errors=True)  # the run is complete
    if collapse is not None and collapse.collapsed_epoch is not None:  # again at the end, where it is seen
        print(f"kitm: WARNING: this run's embeddings collapsed in epoch {collapse.collapsed_epoch + 1} (see the "
              f"warning above and summary.json 'collapse'); its figures are not a trained model's.", file=sys.stderr)
    if run_dir != run.chief_dir:  # another worker: its files were temporary
        print(f"This worker's files went to {run_dir}, removed at its end; the chief writes {run.chief_dir}.")
        return
    print(f"Run summary: {run_dir / SUMMARY_FILE}; TensorBoard: tensorboard --logdir {run_dir / 'logs'}")

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
    onnx/<n>/               with --export_onnx, the towers as ONNX files (kitm.serving.onnx)
    presets/<n>/            with --export_presets, keras-hub towers as keras-hub presets (kitm.serving.hub_presets)
While a run lives, its process holds `run.lock` (kitm.run_lock): a second run started into the same
folder stops before writing anything, naming the first. A finished run directory (one with summary.json) is never
trained again: `run` refuses it and names the ways on
(another run_dir; `python -m kitm.eval --run_dir=...` to score it again). A run killed before it finished resumes
from its backup when started again with the same settings.
"""

from __future__ import annotations

import contextlib
import dataclasses
import pathlib
import sys
import time

import keras

from kitm.distribute.backend import backend_name
from kitm.errors import KitmConfigError, KitmError, option
from kitm.experiment import datasets
from kitm.experiment.config import ExperimentConfig
from kitm.experiment import encoders
from kitm.experiment.objectives import total_epochs, uses_center_phases
from kitm.experiment.run_outputs import SUMMARY_FILE
from kitm.experiment.training_run import train_evaluate_export
from kitm.files import no_room_error
from kitm.run_lock import hold_run_dir
from kitm.training.fault_tolerance import claim_backup

# The settings a killed run may be started again with other values of: where it is and its data are (moved
# folders), how it reports, evaluates, exports and spreads its work; none changes the weights it trains.
RESUMABLE_CHANGES = frozenset({
    "run_dir", "data_dir", "progress", "backup_every_steps", "eval_every_epochs", "eval_images", "eval_relevance",
    "export", "export_onnx", "export_presets", "projector_samples", "test_crops", "eval_crop_fraction",
    "collapse_threshold", "stop_on_collapse",
    "cpu_devices", "strategy", "jit_compile", "deterministic_ops", "coordinator_address", "num_processes",
    "process_id", "coordinator_timeout"})


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
    from kitm.distribute import data_parallel, processes
    from kitm.training import distribution

    started = time.time()
    config = resolve(config)
    config = encoders.resolve_hub_settings(config)
    run_dir = pathlib.Path(config.run_dir)
    check_run_dir_is_not_finished(run_dir)
    if config.preset:
        shown = " ".join(f"--{name}={_shown(config.get(name))}" for name in sorted(config.preset))
        print(f"Defaults for --dataset={config.data.dataset}: {shown}")
    _check_export_backend(config)
    with contextlib.ExitStack() as held:
        if backend_name() == "tensorflow":
            distribution.split_cpu(config.training.cpu_devices)
            # Before any other TensorFlow work: the multi-worker strategy starts this process's server.
            strategy = distribution.make_strategy(config.training.strategy)
        else:  # JAX (and PyTorch): keras.distribution places the model; TensorFlow's input and export, one device
            t = config.training
            data_parallel.split_host_devices(t.cpu_devices)
            if t.strategy == "multi_worker" and backend_name() == "jax":  # before JAX starts
                processes.start(processes.cluster_of(t.coordinator_address, t.num_processes, t.process_id),
                                t.coordinator_timeout)
            # A run in a Python process leaves the process's distribution as it found it.
            held.callback(keras.distribution.set_distribution, keras.distribution.distribution())
            data_parallel.set_data_parallel(t.strategy)
            strategy = distribution.make_strategy("default")
        if distribution.is_chief(strategy):  # the one process that writes run_dir holds it (kitm.run_lock)
            held.enter_context(hold_run_dir(run_dir))
            check_run_dir_is_not_finished(run_dir)  # one that finished while this process started
            claim_backup(run_dir / "backup", config.settings(), RESUMABLE_CHANGES,
                         defaults=ExperimentConfig().settings())  # the same run, or none
            for exports in ("export", "onnx", "presets"):  # a killed export's; only the holder exports here
                remove_stale_exports(run_dir / exports, every=True)
        try:
            return _run_in(config, run_dir, strategy, started)
        except Exception as error:  # a full disk or a file-size limit, said as such (with the file) by kitm.files
            problem = None if isinstance(error, KitmError) else no_room_error(error)
            if problem is None:
                raise
            raise problem from error


def _check_export_backend(config: ExperimentConfig) -> None:
    """The SavedModel export (kitm.serving.export) crosses to TensorFlow from TensorFlow and JAX (jax2tf) only:
    on another backend a run that would end in it is refused before it starts, not after its training; so is one
    whose ONNX towers could not be written."""
    from kitm.serving.export import EXPORT_BACKENDS

    backend = backend_name()
    if config.export.export and backend not in EXPORT_BACKENDS:
        raise KitmConfigError(
            f"{option('export')}: the SavedModel export runs on the TensorFlow and JAX backends, not on {backend} "
            f"(Keras cannot trace a {backend} model into TensorFlow). Train here with {option('export')}=false: "
            "the weights are saved in <run_dir>/checkpoints/last.weights.h5, a file every backend reads; or train "
            "with KERAS_BACKEND=tensorflow / jax.")
    if config.export.export_onnx:
        _check_onnx_export(config, backend)
    if config.export.export_presets:
        _check_preset_export(config)


def _check_preset_export(config: ExperimentConfig) -> None:
    """keras-hub presets hold keras-hub towers, beside the SavedModel's version: refused before the training."""
    if not config.export.export:
        raise KitmConfigError(f"{option('export_presets')} writes the towers beside the SavedModel (presets/<n> for "
                              f"export/<n>); it needs {option('export')}=true.")
    if not (encoders.uses_hub_image(config) and encoders.uses_hub_text(config)):
        raise KitmConfigError(f"{option('export_presets')} saves keras-hub towers as keras-hub presets; this run's "
                              f"towers are {option('image_encoder')}={config.model.image_encoder} and "
                              f"{option('text_encoder')}={config.model.text_encoder} (give {option('joint_preset')}, "
                              "or keras-hub presets for both).")


def _check_onnx_export(config: ExperimentConfig, backend: str) -> None:
    """The ONNX towers pair with the SavedModel's version and need their backend's converter: refused before the
    training, not after it."""
    import importlib.util

    from kitm.serving.onnx import CONVERTERS

    if not config.export.export:
        raise KitmConfigError(f"{option('export_onnx')} writes the towers beside the SavedModel (onnx/<n> for "
                              f"export/<n>); it needs {option('export')}=true.")
    converter = CONVERTERS.get(backend)
    if converter is None:
        raise KitmConfigError(f"{option('export_onnx')}: the ONNX towers are converted on the TensorFlow and JAX "
                              f"backends, not on {backend}.")
    missing = [module for module in (converter, "onnx") if importlib.util.find_spec(module) is None]
    if missing:
        raise KitmConfigError(f"{option('export_onnx')} on {backend} needs {' and '.join(missing)} "
                              f"(pip install {' '.join(missing)}).")


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
            return train_evaluate_export(config, data_dir, run_dir, info, strategy, started, write_dir)
    except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as error:
        # A corrupt shard or an undecodable image surfaces in tf.data without naming its file; find it.
        problem = _diagnose_read_failure(data_dir, info, error)
        if problem is None:
            raise
        raise problem from error


def _shown(value) -> str:
    return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


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

"""Distribution strategies and their input: one device, all local GPUs, several machines.

Strategies (`make_strategy`):
    default        one device (`tf.distribute.get_strategy()`)
    mirrored       `tf.distribute.MirroredStrategy` over all local GPUs, or over the logical CPUs when there is
                   no GPU (split the CPU first, `split_cpu`)
    multi_worker   `tf.distribute.MultiWorkerMirroredStrategy`; the cluster and this process's task come from
                   the TF_CONFIG environment variable, e.g. for the second of two workers
                   {"cluster": {"worker": ["host0:port", "host1:port"]}, "task": {"type": "worker", "index": 1}}

Batches. The global batch B is split over R = strategy.num_replicas_in_sync replicas (W workers x L devices
each): every replica trains on b = B / R rows per step, and gradients are summed across replicas (each
loss is divided by R, `kitm.losses.base.scale_for_replicas`). With local negatives a replica's losses see only its
own b rows: b - 1 negatives per positive pair, whatever R. With global negatives (`kitm.losses.global_batch`, the
launcher's default with several replicas where every loss can gather) each replica gathers the others'
embeddings and its anchors meet all B - 1; its relevance is then its rows of the global batch's, [b, B]: each
worker's pipeline reads every record, batches B rows, computes their relevance and keeps its replicas' rows,
decoding only their images (`kitm.data.own_rows`, `kitm.data.own_rows.replica_rows`; the launcher's `pipeline` in
`kitm.experiment.training_run`).

Input (`distributed_training_input`). With R > 1 the training data goes through
`strategy.distribute_datasets_from_function`: one input pipeline per worker (W pipelines), pipeline w keeps
every W-th record from the w-th (`tf.data.Dataset.shard(W, w)`, before decoding) and batches b rows; the
strategy hands a worker's consecutive elements to its L local replicas. Every element is thus exactly one
replica's batch, and the relevance matrix the pipeline computes for it ([b, b], `num_replicas=1`) is the
relevance among the very captions that replica trains on. We chose this over letting Keras distribute a
global-batch dataset (`experimental_distribute_dataset`: auto-sharding by file or by element, then a rebatch
that cuts each global batch into per-replica pieces): that road also gives each replica its block when the
pipeline stacks the R diagonal blocks ([B, b], `kitm.data.pipeline.block_diagonal_relevance`), but it rests
on how the rebatch cuts, and under element sharding every worker decodes the whole batch (all images, all
R blocks) to keep 1/W of it. Each pipeline yields exactly L x steps_per_epoch batches per pass (`take`) and
repeats; `fit` gets `steps_per_epoch`, so every worker runs the same number of steps (a worker short of data
would stall the others' all-reduce) and an epoch is the same number of steps under every strategy.
All pipelines get the run's seed: they read the records in the same order, so `shard` splits every pass into
complementary parts (a new split each pass, unless the records are cached: then the first pass's split).

Chief and other workers (`is_chief`, `worker_directory`). All workers run the same program, including
checkpoints, backups, evaluation and export (saving may run collective ops that need every worker), but
only the chief writes into the run directory; each other worker writes into a temporary directory that is
removed at the end (the convention of Keras' multi-worker callbacks). Restoring a backup reads the chief's
files, so in a real cluster the run directory must be on storage that every worker sees.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pathlib
import shutil
import tempfile
from typing import Callable, Iterator

import tensorflow as tf

from kitm.distribute.processes import process_count, process_index
from kitm.distribute.replicas import per_replica_batch_size
from kitm.errors import DistributionError, option

STRATEGIES = ("default", "mirrored", "multi_worker")


def split_cpu(num_devices: int) -> None:
    """Split the first physical CPU into `num_devices` logical devices (before TensorFlow initialises)."""
    if num_devices < 1:
        return
    cpus = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(
        cpus[0], [tf.config.LogicalDeviceConfiguration() for _ in range(num_devices)])


def _check_tf_config() -> dict:
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        raise DistributionError(
            f"{option('strategy')}=multi_worker reads the cluster from the TF_CONFIG environment variable, which is "
            "not set; "
            'e.g. TF_CONFIG=\'{"cluster": {"worker": ["host0:12345", "host1:12345"]}, '
            '"task": {"type": "worker", "index": 0}}\'.')
    try:
        config = json.loads(raw)
    except json.JSONDecodeError as error:
        raise DistributionError(f"TF_CONFIG is not valid JSON ({error}): {raw!r}.") from error
    cluster, task = config.get("cluster"), config.get("task")
    if not isinstance(cluster, dict) or not isinstance(task, dict) or "type" not in task or "index" not in task:
        raise DistributionError(f'TF_CONFIG needs "cluster" {{job: [addresses]}} and "task" {{"type", "index"}}; '
                                f"got {raw!r}.")
    addresses = cluster.get(task["type"])
    if not isinstance(addresses, list) or not 0 <= int(task["index"]) < len(addresses):
        raise DistributionError(f"TF_CONFIG's task {task} is not in its cluster {cluster}.")
    return config


def make_strategy(name: str) -> tf.distribute.Strategy:
    """The strategy called `name` (module docstring). Create it before any other TensorFlow work: the
    multi-worker strategy starts this process's server and configures its collectives."""
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        if tf.config.list_logical_devices("GPU"):
            return tf.distribute.MirroredStrategy()
        return tf.distribute.MirroredStrategy(devices=[d.name for d in tf.config.list_logical_devices("CPU")])
    if name == "multi_worker":
        _check_tf_config()
        return tf.distribute.MultiWorkerMirroredStrategy()
    raise DistributionError(f"{option('strategy')}={name}: expected one of {', '.join(STRATEGIES)}.")


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """True on the worker that writes the run directory: always, unless a multi-worker non-chief (across JAX
    processes: process 0)."""
    if process_count() > 1:
        return process_index() == 0
    return bool(strategy.extended.should_checkpoint)


def num_workers(strategy: tf.distribute.Strategy) -> int:
    """Workers in the strategy's cluster (chief included), or JAX's processes; 1 without a cluster."""
    if process_count() > 1:
        return process_count()
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.cluster_spec().as_dict():
        return 1
    spec = resolver.cluster_spec().as_dict()
    return sum(len(spec.get(job, [])) for job in ("chief", "worker"))


def task_name(strategy: tf.distribute.Strategy) -> str:
    if process_count() > 1:
        return f"process{process_index()}"
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or resolver.task_type is None:
        return "local"
    return f"{resolver.task_type}{resolver.task_id}"


@contextlib.contextmanager
def worker_directory(run_dir: str | os.PathLike, strategy: tf.distribute.Strategy) -> Iterator[pathlib.Path]:
    """Where this worker writes: `run_dir` on the chief; elsewhere a temporary directory, removed on exit."""
    run_dir = pathlib.Path(run_dir)
    if is_chief(strategy):
        yield run_dir
        return
    scratch = pathlib.Path(tempfile.mkdtemp(prefix=f"kitm-{task_name(strategy)}-"))
    try:
        yield scratch
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def steps_per_epoch(num_images: int, samples_per_image: int, global_batch: int, replicas: int,
                    pipelines: int = 1) -> int:
    """Steps in one pass over the data, the same for every pipeline: the smallest shard (num_images // W
    images) cut into per-replica batches, divided among the L = R / W replicas of a worker. One pipeline:
    num_images x samples_per_image // B, as on one device."""
    b = per_replica_batch_size(global_batch, replicas)
    local_replicas = replicas // pipelines
    steps = (num_images // pipelines) * samples_per_image // b // local_replicas
    if steps < 1:
        raise DistributionError(
            f"{option('batch_size')}={global_batch} over {replicas} replicas ({pipelines} worker(s)) leaves no full "
            f"step: each worker holds {num_images // pipelines} of the {num_images} images ({samples_per_image} "
            f"sample(s) each); lower {option('batch_size')}.")
    return steps


@dataclasses.dataclass
class TrainingInput:
    """What `fit` needs: `dataset` (repeating), `steps_per_epoch`, and the per-replica `element_spec`; with a
    worker's own rows of the global batch (`kitm.data.own_rows`), its pipeline's `InputCounters`."""

    dataset: object
    steps_per_epoch: int
    per_replica_batch: int
    element_spec: object
    input_counters: object = None


# build(per_replica_batch, shard or None, seed) -> a finite dataset of one pass over the shard's records.
BuildFn = Callable[[int, "tuple[int, int] | None", "int | None"], tf.data.Dataset]


def per_replica_dataset_fn(build: BuildFn, *, global_batch: int, steps: int, seed: int | None):
    """The `dataset_fn(input_context)` for `strategy.distribute_datasets_from_function`: pipeline w of W keeps
    shard w of the records, batches the per-replica b rows, yields L x `steps` batches per pass and repeats."""

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        pipelines = context.num_input_pipelines
        shard = (pipelines, context.input_pipeline_id) if pipelines > 1 else None
        # The same seed everywhere: the pipelines must read the records in the same order to shard them.
        dataset = build(context.get_per_replica_batch_size(global_batch), shard, seed)
        local_replicas = context.num_replicas_in_sync // pipelines
        return dataset.take(steps * local_replicas).repeat()

    return dataset_fn


def distributed_training_input(strategy: tf.distribute.Strategy, build: BuildFn, *, global_batch: int,
                               num_images: int, samples_per_image: int, seed: int | None) -> TrainingInput:
    """The training input for `strategy` (module docstring): the plain dataset on one replica, else
    per-replica pipelines through `strategy.distribute_datasets_from_function`."""
    replicas = strategy.num_replicas_in_sync
    b = per_replica_batch_size(global_batch, replicas)
    if replicas == 1:
        steps = steps_per_epoch(num_images, samples_per_image, global_batch, 1)
        dataset = build(global_batch, None, seed)
        return TrainingInput(dataset.take(steps).repeat(), steps, global_batch, dataset.element_spec)
    pipelines = num_workers(strategy)  # distribute_datasets_from_function makes one input pipeline per worker
    steps = steps_per_epoch(num_images, samples_per_image, global_batch, replicas, pipelines)
    dataset_fn = per_replica_dataset_fn(build, global_batch=global_batch, steps=steps, seed=seed)
    spec = build(b, (pipelines, 0) if pipelines > 1 else None, seed).element_spec
    return TrainingInput(strategy.distribute_datasets_from_function(dataset_fn), steps, b, spec)

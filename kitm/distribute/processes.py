"""Several JAX processes: the cluster a run joins, starting JAX's distributed runtime, and this process's place.

On JAX, `--strategy=multi_worker` runs one process per machine (or per group of devices), each with its own local
devices; `keras.distribution.DataParallel` then spans every device of every process (docs/scale.md). The cluster
comes from, in this order:

1. the launcher's settings: `--coordinator_address` (host:port of process 0), `--num_processes`, `--process_id`;
2. Keras' variables, those `keras.distribution.initialize` reads: `KERAS_DISTRIBUTION_JOB_ADDRESSES` (the
   coordinator's address, or every process's comma-separated with the coordinator first),
   `KERAS_DISTRIBUTION_NUM_PROCESSES`, `KERAS_DISTRIBUTION_PROCESS_ID`;
3. `TF_CONFIG`, the cluster TensorFlow's multi-worker strategy reads: the tasks in the order chief, then workers;
   the first coordinates (at its address), a task's place in that order is its process id.

`start` calls `jax.distributed.initialize` itself rather than through `keras.distribution.initialize`, which does
the same call without a timeout (JAX then waits 300 s) and otherwise only agrees on a random seed across processes,
which a kitm run sets in every process anyway (`--seed`). JAX aborts the process when its coordinator cannot be
reached (a C++ check failure, no Python error), so a process other than the coordinator first waits for the
coordinator's port itself, for at most the stated timeout, and stops with a `DistributionError` naming the address.
On a CPU the processes' collectives go through gloo (JAX's CPU collectives are off by default, and a step spanning
processes then fails).
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import time

from kitm.distribute.backend import on_jax
from kitm.errors import DistributionError, option

__all__ = ["Cluster", "cluster_of", "start", "stop", "process_count", "process_index"]

KERAS_ADDRESSES = "KERAS_DISTRIBUTION_JOB_ADDRESSES"
KERAS_COUNT = "KERAS_DISTRIBUTION_NUM_PROCESSES"
KERAS_INDEX = "KERAS_DISTRIBUTION_PROCESS_ID"


@dataclasses.dataclass(frozen=True)
class Cluster:
    """The processes of a run: `coordinator` (host:port of process 0), their count, this one's index, and where
    the description came from (for messages)."""

    coordinator: str
    processes: int
    index: int
    source: str

    def __post_init__(self):
        if self.processes < 1 or not 0 <= self.index < self.processes:
            raise DistributionError(f"{self.source}: process {self.index} is not among the {self.processes} "
                                    f"process(es) 0..{self.processes - 1}.")
        host, _, port = self.coordinator.rpartition(":")
        if not host or not port.isdigit():
            raise DistributionError(f"{self.source}: the coordinator's address {self.coordinator!r} is not host:port.")

    @property
    def host_and_port(self) -> tuple[str, int]:
        host, _, port = self.coordinator.rpartition(":")
        return host.strip("[]"), int(port)


def cluster_of(coordinator_address: str = "", num_processes: int = 0, process_id: int = -1,
               environ=os.environ) -> Cluster:
    """The cluster from the settings, else Keras' variables, else TF_CONFIG (module docstring); refused, naming what
    is missing, when none describes one."""
    if coordinator_address or num_processes or process_id >= 0:
        if not (coordinator_address and num_processes and process_id >= 0):
            raise DistributionError(
                f"{option('coordinator_address')}, {option('num_processes')} and {option('process_id')} describe the "
                f"processes together; give all three (got {coordinator_address!r}, {num_processes}, {process_id}).")
        return Cluster(coordinator_address, num_processes, process_id, "the launcher's settings")
    if environ.get(KERAS_ADDRESSES):
        addresses = [a.strip() for a in environ[KERAS_ADDRESSES].split(",") if a.strip()]
        try:
            count = int(environ.get(KERAS_COUNT, len(addresses)))
            index = int(environ[KERAS_INDEX])
        except (KeyError, ValueError) as error:
            raise DistributionError(f"{KERAS_ADDRESSES} is set, so {KERAS_COUNT} and {KERAS_INDEX} must be whole "
                                    f"numbers ({KERAS_INDEX} at least): {error}.") from error
        if len(addresses) > 1 and len(addresses) != count:
            raise DistributionError(f"{KERAS_ADDRESSES} names {len(addresses)} processes, {KERAS_COUNT} {count}.")
        return Cluster(addresses[0], count, index, "Keras' KERAS_DISTRIBUTION_* variables")
    if environ.get("TF_CONFIG"):
        return _from_tf_config(environ["TF_CONFIG"])
    raise DistributionError(
        f"{option('strategy')}=multi_worker on JAX needs the processes: {option('coordinator_address')}=host:port "
        f"(process 0's), {option('num_processes')} and {option('process_id')}; or Keras' {KERAS_ADDRESSES}, "
        f"{KERAS_COUNT}, {KERAS_INDEX}; or TF_CONFIG.")


def _from_tf_config(raw: str) -> Cluster:
    try:
        config = json.loads(raw)
        cluster, task = config["cluster"], config["task"]
        tasks = [(job, i, address) for job in ("chief", "worker") for i, address in enumerate(cluster.get(job, []))]
        index = next(n for n, (job, i, _) in enumerate(tasks) if job == task["type"] and i == int(task["index"]))
    except (json.JSONDecodeError, KeyError, TypeError, ValueError, StopIteration) as error:
        raise DistributionError(f"TF_CONFIG does not describe a cluster with this task among its chief and workers "
                                f"({type(error).__name__}: {error}): {raw!r}.") from error
    return Cluster(tasks[0][2], len(tasks), index, "TF_CONFIG")


def start(cluster: Cluster, timeout_s: int) -> None:
    """Join the cluster: JAX's distributed runtime with every process, before JAX starts (module docstring)."""
    from jax._src import xla_bridge  # the one place JAX says whether its backends have started

    if xla_bridge.backends_are_initialized():
        raise DistributionError(f"{option('strategy')}=multi_worker: JAX has already started in this process; the "
                                "processes must join before it does (start a new process).")
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    if cluster.index != 0:
        _wait_for_coordinator(cluster, timeout_s)
    print(f"kitm: process {cluster.index} of {cluster.processes} joins the coordinator at {cluster.coordinator} "
          f"(from {cluster.source}; waiting up to {timeout_s} s for every process).", flush=True)
    jax.distributed.initialize(cluster.coordinator, cluster.processes, cluster.index,
                               initialization_timeout=timeout_s)


def _wait_for_coordinator(cluster: Cluster, timeout_s: int) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection(cluster.host_and_port, timeout=min(2.0, timeout_s)):
                return
        except OSError as error:
            if time.monotonic() >= deadline:
                raise DistributionError(
                    f"process {cluster.index} of {cluster.processes}: nothing answers at the coordinator's address "
                    f"{cluster.coordinator} (from {cluster.source}) after {timeout_s} s "
                    f"({option('coordinator_timeout')}): start process 0 there, or correct the address "
                    f"({error}).") from error
            time.sleep(0.25)


def stop() -> None:
    """Leave the cluster (every process together: JAX's shutdown waits for all); after it, this process computes on
    its own devices only."""
    import jax

    jax.distributed.shutdown()


def process_count() -> int:
    """The processes a JAX run spans (1 elsewhere: TensorFlow's workers are its strategy's, kitm.training.distribution)."""
    if not on_jax():
        return 1
    import jax

    return int(jax.process_count())


def process_index() -> int:
    """This process's index among `process_count()` (0 on one process: the chief)."""
    if not on_jax():
        return 0
    import jax

    return int(jax.process_index())

"""Where a JAX run's processes come from (kitm.distribute.processes.cluster_of): the launcher's settings, then
Keras' KERAS_DISTRIBUTION_* variables, then TF_CONFIG; and what is refused, naming what to give."""

import json

import pytest

from kitm.distribute.processes import Cluster, cluster_of
from kitm.errors import DistributionError, render_options


def test_the_launchers_settings_come_first():
    environ = {"KERAS_DISTRIBUTION_JOB_ADDRESSES": "10.0.0.9:1", "KERAS_DISTRIBUTION_PROCESS_ID": "0"}
    assert cluster_of("10.0.0.1:1234", 3, 2, environ) == Cluster("10.0.0.1:1234", 3, 2, "the launcher's settings")


def test_keras_variables_give_the_coordinator_alone_or_every_address_with_the_coordinator_first():
    alone = {"KERAS_DISTRIBUTION_JOB_ADDRESSES": "10.0.0.1:1234", "KERAS_DISTRIBUTION_NUM_PROCESSES": "4",
             "KERAS_DISTRIBUTION_PROCESS_ID": "3", "TF_CONFIG": "not read"}
    assert (cluster_of(environ=alone).coordinator, cluster_of(environ=alone).processes) == ("10.0.0.1:1234", 4)
    every = {"KERAS_DISTRIBUTION_JOB_ADDRESSES": "10.0.0.1:1234, 10.0.0.2:2345",
             "KERAS_DISTRIBUTION_PROCESS_ID": "1"}
    assert cluster_of(environ=every) == Cluster("10.0.0.1:1234", 2, 1, "Keras' KERAS_DISTRIBUTION_* variables")
    with pytest.raises(DistributionError, match="names 2 processes, KERAS_DISTRIBUTION_NUM_PROCESSES 3"):
        cluster_of(environ={**every, "KERAS_DISTRIBUTION_NUM_PROCESSES": "3"})
    with pytest.raises(DistributionError, match="KERAS_DISTRIBUTION_PROCESS_ID"):
        cluster_of(environ={"KERAS_DISTRIBUTION_JOB_ADDRESSES": "10.0.0.1:1234"})


def test_tf_config_orders_the_chief_before_the_workers_and_the_first_coordinates():
    cluster = {"chief": ["c:1"], "worker": ["w0:2", "w1:3"]}
    places = [cluster_of(environ={"TF_CONFIG": json.dumps({"cluster": cluster, "task": task})})
              for task in ({"type": "chief", "index": 0}, {"type": "worker", "index": 0},
                           {"type": "worker", "index": 1})]
    assert [(p.coordinator, p.processes, p.index) for p in places] == [("c:1", 3, 0), ("c:1", 3, 1), ("c:1", 3, 2)]
    workers_only = {"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 1}}
    assert cluster_of(environ={"TF_CONFIG": json.dumps(workers_only)}) == Cluster("a:1", 2, 1, "TF_CONFIG")
    stranger = {"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 4}}
    with pytest.raises(DistributionError, match="TF_CONFIG does not describe a cluster with this task"):
        cluster_of(environ={"TF_CONFIG": json.dumps(stranger)})


@pytest.mark.parametrize("arguments, message", [
    (("", 0, -1), "--strategy=multi_worker on JAX needs the processes: --coordinator_address=host:port"),
    (("10.0.0.1:1234", 0, 1), "describe the processes together; give all three"),
    (("10.0.0.1:1234", 2, 2), "process 2 is not among the 2 process(es) 0..1"),
    (("10.0.0.1", 2, 0), "the coordinator's address '10.0.0.1' is not host:port"),
])
def test_what_does_not_describe_processes_is_refused_naming_it(arguments, message):
    with pytest.raises(DistributionError) as refused:
        cluster_of(*arguments, environ={})
    assert message in render_options(refused.value.args[0], "--")

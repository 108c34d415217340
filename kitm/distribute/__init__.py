"""kitm.distribute: the one place that knows the Keras backend and the replicas (docs/layout.md, docs/backends.md).

Losses, layers, models and metrics ask here and import no TensorFlow (tests/test_package_layout.py checks it):

backend        which backend (`on_tensorflow`, `on_jax`, `backend_name`), TensorFlow's module only on its backend,
               the widest int and float the backend keeps, values known without tracing, compiling a helper
replicas       R (TensorFlow's replicas in sync), D (JAX's data-parallel devices), a replica's share of a loss, the
               batch's divisibility, which process keeps checkpoints
global_batch   a TensorFlow replica's view of the global batch (the gather behind negatives="global")
replica_local  variables a step updates per replica (sync-on-read on TensorFlow), read and set by callbacks
random_draws   the losses' uniform keys (TensorFlow's stateful / stateless ops, keras.random elsewhere)
checks         index range checks: graph asserts on TensorFlow, concrete checks elsewhere
steps          DualEncoder's training step on each backend (TensorFlow's tape and gradient caching; Keras' JAX and
               PyTorch trainers with the losses' own state)
data_parallel  the launcher's devices on JAX (`keras.distribution.DataParallel`, host devices)

It sits low in the house: it imports kitm.errors and nothing else of kitm, so everything may import it.
`KERAS_BACKEND` itself is read by Keras; kitm's package `__init__` only makes TensorFlow the default.
"""

from kitm.distribute.backend import (backend_name, compiled, known_values, on_jax, on_tensorflow, on_torch,
                                     tensorflow_module, widest_float, widest_integer)
from kitm.distribute.checks import check_index_range
from kitm.distribute.global_batch import GlobalBatch, global_batch
from kitm.distribute.random_draws import replica_stream_uniform, seed_stream, uniform_keys
from kitm.distribute.replica_local import (assign_replica_local, is_variable, per_replica_variable,
                                           replica_local_values, state_variable)
from kitm.distribute.replicas import (batch_replicas, data_parallel_devices, num_replicas_in_sync,
                                      per_replica_batch_size, replica_share, writes_checkpoints)

__all__ = ["backend_name", "compiled", "known_values", "on_jax", "on_tensorflow", "on_torch", "tensorflow_module",
           "widest_float", "widest_integer", "check_index_range", "GlobalBatch", "global_batch",
           "replica_stream_uniform", "seed_stream", "uniform_keys", "assign_replica_local", "is_variable",
           "per_replica_variable", "replica_local_values", "state_variable", "batch_replicas",
           "data_parallel_devices", "num_replicas_in_sync", "per_replica_batch_size", "replica_share",
           "writes_checkpoints"]

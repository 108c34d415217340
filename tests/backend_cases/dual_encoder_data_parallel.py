"""A backend case: global negatives on JAX under `keras.distribution.DataParallel` over 2 host devices, against the
oracle of one device with the whole batch (kitm.losses.global_batch, "Backends"; docs/scale.md).

Run by tests/backends/test_global_negatives_jax.py in a fresh interpreter with
XLA_FLAGS=--xla_force_host_platform_device_count=2 (JAX fixes its devices when it starts), through
tests/backend_cases/run.py (float64, jax_enable_x64). The model, the batch (8 images, 2 captions each, the samples of
an image straddling the two halves, a graded relevance matrix) and the one-step helper are those of
`benchmarks/bench_global_negatives.py --check`, whose JAX rows this case shares:

- `<loss>/one/*`, `<loss>/two/*`: the logs and the gradients of one training step (Keras' own step, SGD at learning
  rate 1: gradient = weights before - weights after) on one device with negatives="local" and on 2 devices with
  negatives="global"; equal within float64 rounding. InfoNCE and the triplet by "sum" (kitm's default), InfoNCE also
  by "sum_over_batch_size" (one replica on JAX: the mean over the global batch of 16).
- `fit/*`: `DualEncoder.fit`, three steps of Adam with InfoNCE negatives="global", on 2 devices and on one: the loss
  histories and final weights; `fit/rows_split` is 1 when the embeddings the loss received were sharded along their
  rows over the 2 devices (`jax.debug.inspect_array_sharding` in `compute_loss`).
- `refuses_local`: compile under DataParallel refuses InfoNCE with negatives="local", naming the backend and
  negatives='global'; `replicas`, `devices`, `devices_without`: `num_replicas_in_sync()` and `data_parallel_devices()`
  under the distribution, and the latter without one.

On PyTorch the case only records `refuses_global` (compile refuses negatives="global", naming the backend).
"""

import importlib.util
import pathlib

import keras
import numpy as np

from kitm import losses
from kitm.losses.global_batch import data_parallel_devices, num_replicas_in_sync
from kitm.models import DualEncoder

ROOT = pathlib.Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("bench_global_negatives",
                                               ROOT / "benchmarks" / "bench_global_negatives.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

FIT_STEPS = 3


def _losses():
    return {
        "infonce": lambda negatives: bench._loss("infonce", negatives),
        "infonce_mean": lambda negatives: losses.InfoNCELoss(5.0, max_logit_scale=None, negatives=negatives,
                                                             reduction="sum_over_batch_size"),
        "triplet": lambda negatives: bench._loss("triplet", negatives),
    }


class ShardingProbe(DualEncoder):
    """Records how the embeddings that reach the loss are laid out over the devices (at compile time)."""

    seen = []

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        import jax

        jax.debug.inspect_array_sharding(y_pred["image"], callback=ShardingProbe.seen.append)
        return super().compute_loss(x, y, y_pred, sample_weight, training)


def _fit(distribution, weights, data):
    """(loss history, final weights) of `fit` for FIT_STEPS steps of the whole batch under `distribution`."""
    keras.distribution.set_distribution(distribution)
    try:
        model = bench._check_model(ShardingProbe)
        model.set_weights(weights)
        model.compile(keras.optimizers.Adam(0.01), losses={"main": losses.InfoNCELoss(
            5.0, max_logit_scale=None, negatives="global")})
        x, y = data
        history = model.fit(x, y, batch_size=16, epochs=FIT_STEPS, shuffle=False, verbose=0).history
        return np.asarray(history["loss"]), [np.asarray(v.value) for v in model.optimizer_variables()]
    finally:
        keras.distribution.set_distribution(None)


def _torch_cases():
    model = bench._check_model()
    try:
        model.compile("sgd", losses={"main": bench._loss("infonce", "global")})
        return {"refuses_global": np.array(0.0)}
    except NotImplementedError as error:
        message = str(error)
        return {"refuses_global": np.array(float("torch" in message and "negatives='global'" in message))}


def cases():
    if keras.backend.backend() == "torch":
        return _torch_cases()
    import jax

    keras.config.set_dtype_policy("float64")  # the losses' temperature variables too (run.py sets floatx)
    keras.utils.set_random_seed(0)
    weights = bench._check_model().get_weights()
    data = bench._check_batch()
    two = keras.distribution.DataParallel(devices=jax.devices()[:2])
    results = {"device_count": np.array(float(len(jax.devices())))}
    for name, make in _losses().items():
        for label, distribution, negatives in (("one", None, "local"), ("two", two, "global")):
            logs, gradients = bench.jax_step(distribution, lambda: make(negatives), weights, data)
            results.update({f"{name}/{label}/log/{key}": np.array(value) for key, value in logs.items()})
            results.update({f"{name}/{label}/gradient/{index}": g for index, g in enumerate(gradients)})

    results["fit/one/loss"], final_one = _fit(None, weights, data)
    ShardingProbe.seen.clear()
    results["fit/two/loss"], final_two = _fit(two, weights, data)
    results.update({f"fit/one/weight/{index}": w for index, w in enumerate(final_one)})
    results.update({f"fit/two/weight/{index}": w for index, w in enumerate(final_two)})
    split = [getattr(sharding, "spec", (None,))[:1] == (two.batch_dim_name,)
             and dict(sharding.mesh.shape).get(two.batch_dim_name) == 2 for sharding in ShardingProbe.seen]
    results["fit/rows_split"] = np.array(float(bool(split) and all(split)))

    try:
        with two.scope():
            model = bench._check_model()
            results["replicas"] = np.array(float(num_replicas_in_sync()))
            results["devices"] = np.array(float(data_parallel_devices()))
            model.compile("sgd", losses={"main": bench._loss("infonce", "local")})
        results["refuses_local"] = np.array(0.0)
    except NotImplementedError as error:
        message = str(error)
        results["refuses_local"] = np.array(float("jax" in message and "negatives='global'" in message))
    results["devices_without"] = np.array(float(data_parallel_devices()))
    return results

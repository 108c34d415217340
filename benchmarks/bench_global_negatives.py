"""Global-batch negatives and gradient caching: equalities (`--check`) and step times / peak memory (docs/scale.md).

`--check` (2 logical CPU devices, MirroredStrategy): for InfoNCE, SigLIP and graded InfoNCE (and the triplet and SAM,
which gather the whole similarity matrix), the training step's loss and gradients

    global   2 replicas x 8 rows, negatives="global"            against one device with the whole batch of 16
    cached   one device, grad_cache_chunk=4                      against one device without gradient caching
    both     2 replicas, negatives="global", grad_cache_chunk=4  against one device with the whole batch

must agree to 1e-5 (the gradients summed over the replicas, as the optimizer sums them; the loss summed over the
replicas' shares). The check runs in float64 (`keras.config.set_dtype_policy`), so that the differences measure the
computation rather than float32 round-off. The batch repeats images across replicas (8 images, 2 captions each) and
carries a graded relevance matrix, so cross-replica positives, graded targets and SAM's margins are all exercised.
The rows "(local, 2 replicas: not counted)" show what the check sees without the gathers.

The JAX rows, "global, 2 devices (JAX DataParallel)": the same losses, batch and float64 on Keras' JAX backend, in a
subprocess (KERAS_BACKEND=jax, XLA_FLAGS=--xla_force_host_platform_device_count=2: JAX fixes its devices when it
starts). `keras.distribution.DataParallel` over the 2 host devices shards the global batch of 16 along its rows and
the jit-compiled step computes the loss once over the whole sharded array (no gather: kitm.losses.global_batch,
"Backends"); its loss and gradients are compared with one device and the whole batch. The gradients are those the
optimizer received: the step is Keras' own (`train_on_batch`) with SGD at learning rate 1, so a variable's gradient
is its value before the step minus its value after (exact to float64 rounding of the weights, ~1e-16). The row
"(local, 2 devices)" shows that `compile` refuses negatives="local" there. Where JAX (or TensorFlow) is not installed
its rows say "skipped" and do not count. The last line is the largest difference over every counted row; the exit
status is 1 above 1e-5.

Without `--check`: time one training step (the tf.function Keras compiles for `fit`) of a small conv /
mean-of-words dual encoder with InfoNCE on 2 logical CPU devices, local against global negatives, and the
gradient-cached step with global negatives, interleaved round by round (the order alternating). `--memory` instead
runs one process per setting on one device (`--batch`, the settings in `--chunks`) and reports the step time and
memory: TensorFlow's allocator statistics (tensors held between steps, and their peak during the timed steps) and
the resident set's peak during the steps (reset after tracing, Linux clear_refs) and over the whole process; then
the same steps interleaved in one process, whose times compare under the same load.

    python benchmarks/bench_global_negatives.py --check [--losses infonce,siglip,graded_infonce,triplet,sam]
        [--backends tensorflow,jax]
    python benchmarks/bench_global_negatives.py [--batch 256] [--repeats 5]
    python benchmarks/bench_global_negatives.py --memory [--batch 1024] [--chunks 0,128]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import resource
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

TOLERANCE = 1e-5
LOSSES = ("infonce", "siglip", "graded_infonce", "triplet", "sam")
BACKENDS = ("tensorflow", "jax")
JAX_DEVICES = 2
JAX_ROW = f"global, {JAX_DEVICES} devices (JAX DataParallel)"


def _devices(count: int) -> None:
    import tensorflow as tf

    if count > 1:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * count)


def _loss(name: str, negatives: str):
    from kitm import losses

    if name == "infonce":
        return losses.InfoNCELoss(5.0, max_logit_scale=None, negatives=negatives)
    if name == "siglip":
        return losses.SigLIPLoss(5.0, bias_init=-2.0, negatives=negatives)
    if name == "graded_infonce":
        return losses.GradedInfoNCELoss(0.2, logit_scale_init=5.0, max_logit_scale=None, negatives=negatives)
    if name == "triplet":
        return losses.TripletLoss(0.2, max_violation=True, negatives=negatives)
    return losses.SAMLoss(2.0, sampling="hardest", negatives=negatives)


def _check_model(model_class=None):
    """A tiny dual encoder on feature vectors [B, 12] and token ids [B, 5], no random layers and no batch norm; on any
    backend (`model_class`: a DualEncoder subclass, for the tests)."""
    import keras

    from kitm.models import DualEncoder

    image = keras.Sequential([keras.layers.Dense(10, activation="tanh")])
    text = keras.Sequential([keras.layers.Embedding(20, 10), keras.layers.GlobalAveragePooling1D()])
    model = (model_class or DualEncoder)(image, text, embedding_dim=6)
    model.build_from_inputs({"image": keras.KerasTensor([None, 12], keras.config.floatx()),
                             "tokens": keras.KerasTensor([None, 5], "int32")})
    return model


def _check_batch(rows: int = 16):
    import numpy as np

    rng = np.random.default_rng(0)
    image_index = rng.permutation(np.repeat(np.arange(rows // 2), 2)).astype(np.int32)  # samples straddle replicas
    features = rng.normal(size=(rows // 2, 12))[image_index]
    tokens = rng.integers(1, 20, size=(rows, 5)).astype(np.int32)
    relevance = rng.uniform(size=(rows, rows))
    relevance[image_index[:, None] == image_index[None, :]] = 1.0
    return ({"image": features, "tokens": tokens}, {"image_index": image_index, "relevance": relevance})


def _gradients(strategy, name: str, negatives: str, chunk: int, weights, data):
    """(summed loss, [summed gradient per variable]) of one training step under `strategy`."""
    import keras
    import numpy as np
    import tensorflow as tf

    x, y = data
    replicas = strategy.num_replicas_in_sync
    with strategy.scope():
        model = _check_model()
        model.set_weights(weights)
        model.compile(keras.optimizers.SGD(1.0), losses={name: _loss(name, negatives)}, grad_cache_chunk=chunk)

    def split(key, value):
        rows = value.shape[0] // replicas
        if key == "relevance" and negatives == "local":  # the replica's own block [b, b]
            return lambda r: value[r * rows:(r + 1) * rows, r * rows:(r + 1) * rows]
        return lambda r: value[r * rows:(r + 1) * rows]  # relevance under global negatives: its rows [b, B]

    def per_replica(structure):
        pieces = {key: split(key, np.asarray(value)) for key, value in structure.items()}
        return strategy.experimental_distribute_values_from_function(
            lambda context: {key: tf.constant(piece(context.replica_id_in_sync_group))
                             for key, piece in pieces.items()})

    def replica_step(x, y):
        _, (gradients,), total, _ = model.compute_gradients(x, y)
        return total, [tf.zeros_like(v) if g is None else tf.convert_to_tensor(g)
                       for g, v in zip(gradients, model.optimizer_variables())]

    @tf.function
    def step(x, y):
        total, gradients = strategy.run(replica_step, args=(x, y))
        reduce = lambda value: strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)  # noqa: E731
        return reduce(total), [reduce(g) for g in gradients]

    if replicas > 1:
        total, gradients = step(per_replica(x), per_replica(y))
    else:
        total, gradients = step({k: tf.constant(v) for k, v in x.items()}, {k: tf.constant(v) for k, v in y.items()})
    return float(total), [g.numpy() for g in gradients]


def _header() -> None:
    print(f"{'loss':<16}{'setting':<38}{'|loss diff|':>14}{'max |grad diff|':>18}")


def check(names=LOSSES) -> float:
    import keras
    import numpy as np
    import tensorflow as tf

    # float64 throughout, so that the differences measure the computation, not float32 round-off.
    keras.config.set_floatx("float64")
    keras.config.set_dtype_policy("float64")  # every layer, the losses' temperature variables included
    keras.utils.set_random_seed(0)  # the same weights every run

    one = tf.distribute.OneDeviceStrategy("/cpu:0")
    two = tf.distribute.MirroredStrategy([d.name for d in tf.config.list_logical_devices("CPU")][:2])
    with one.scope():
        weights = _check_model().get_weights()
    data = _check_batch()
    worst = 0.0
    for name in names:
        reference_loss, reference = _gradients(one, name, "local", 0, weights, data)
        for label, strategy, negatives, chunk in (("global, 2 replicas", two, "global", 0),
                                                  ("cached (chunk 4), one device", one, "local", 4),
                                                  ("global + cached, 2 replicas", two, "global", 4)):
            loss, gradients = _gradients(strategy, name, negatives, chunk, weights, data)
            loss_gap = abs(loss - reference_loss)
            gradient_gap = max(float(np.max(np.abs(a - b))) for a, b in zip(gradients, reference))
            worst = max(worst, loss_gap, gradient_gap)
            print(f"{name:<16}{label:<38}{loss_gap:>14.2e}{gradient_gap:>18.2e}")
        if name in ("infonce", "graded_infonce"):  # what the check would see without the gathers: not counted
            loss, gradients = _gradients(two, name, "local", 0, weights, data)
            gradient_gap = max(float(np.max(np.abs(a - b))) for a, b in zip(gradients, reference))
            print(f"{name:<16}{'(local, 2 replicas: not counted)':<38}{abs(loss - reference_loss):>14.2e}"
                  f"{gradient_gap:>18.2e}")
    return worst


# ---------------------------------------------------------------------------------------------------------------
# JAX: keras.distribution.DataParallel over 2 host devices, in a subprocess

def jax_step(distribution, make_loss, weights, data, model_class=None) -> tuple:
    """(logs, [gradient per variable]) of one Keras training step on JAX (`train_on_batch`), under `distribution`
    (a keras.distribution, or None: one device) from `weights`, with the loss `make_loss()`.

    The optimizer is SGD at learning rate 1: w' = w - g, so the gradient the step applied is w - w' (the model's
    trainable variables, the losses' temperature and bias among them on JAX). The model and its loss are built
    under the distribution, so that their variables are laid out (replicated) on its mesh, and Keras shards the
    batch's rows over it."""
    import keras
    import numpy as np

    previous = keras.distribution.distribution()
    keras.distribution.set_distribution(distribution)
    try:
        model = _check_model(model_class)
        model.set_weights(weights)
        model.compile(keras.optimizers.SGD(1.0), losses={"main": make_loss()})
        variables = model.optimizer_variables()
        before = [np.array(variable.value) for variable in variables]
        logs = model.train_on_batch(*data, return_dict=True)
        gradients = [b - np.array(variable.value) for b, variable in zip(before, variables)]
        return {key: float(value) for key, value in logs.items()}, gradients
    finally:
        keras.distribution.set_distribution(previous)


def jax_check(names=LOSSES) -> float:
    """The JAX rows (module docstring), in a process started with 2 host devices; returns the largest difference."""
    import jax

    jax.config.update("jax_enable_x64", True)
    import keras
    import numpy as np

    devices = jax.devices()
    if keras.backend.backend() != "jax" or len(devices) < JAX_DEVICES:
        raise SystemExit(f"the JAX check needs KERAS_BACKEND=jax and {JAX_DEVICES} devices (XLA_FLAGS="
                         f"--xla_force_host_platform_device_count={JAX_DEVICES}); got {keras.backend.backend()} with "
                         f"{len(devices)} device(s).")
    keras.config.set_floatx("float64")
    keras.config.set_dtype_policy("float64")
    keras.utils.set_random_seed(0)
    weights = _check_model().get_weights()
    data = _check_batch()
    several = keras.distribution.DataParallel(devices=devices[:JAX_DEVICES])
    worst = 0.0
    for name in names:
        reference, reference_gradients = jax_step(None, lambda: _loss(name, "local"), weights, data)
        logs, gradients = jax_step(several, lambda: _loss(name, "global"), weights, data)
        loss_gap = abs(logs["loss"] - reference["loss"])
        gradient_gap = max(float(np.max(np.abs(a - b))) for a, b in zip(gradients, reference_gradients))
        worst = max(worst, loss_gap, gradient_gap)
        print(f"{name:<16}{JAX_ROW:<38}{loss_gap:>14.2e}{gradient_gap:>18.2e}", flush=True)
        if name == "infonce":  # what the backend cannot give: not counted
            try:
                jax_step(several, lambda: _loss(name, "local"), weights, data)
                outcome = "trained (expected a refusal)"
                worst = float("inf")
            except NotImplementedError:
                outcome = "refused at compile"
            print(f"{name:<16}{f'(local, {JAX_DEVICES} devices)':<38}{outcome:>32}", flush=True)
    print(f"jax worst {worst!r}")
    return worst


def jax_rows(names) -> float:
    """Runs `jax_check` in a subprocess with JAX_DEVICES host devices and relays its rows; 0 where JAX is not
    installed (its rows say so), inf where the subprocess fails."""
    if importlib.util.find_spec("jax") is None:
        for name in names:
            print(f"{name:<16}{JAX_ROW:<38}{'skipped: JAX not installed':>32}")
        return 0.0
    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={JAX_DEVICES}".strip()
    env = dict(os.environ, KERAS_BACKEND="jax", XLA_FLAGS=flags, JAX_PLATFORMS="cpu")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (root, os.environ.get("PYTHONPATH"))))
    result = subprocess.run([sys.executable, os.path.abspath(__file__), "--jax_check_child", "--losses",
                             ",".join(names)], env=env, capture_output=True, text=True)
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines or not lines[-1].startswith("jax worst "):
        print(result.stdout[-3000:] + result.stderr[-3000:])
        print(f"{'(all)':<16}{JAX_ROW:<38}{'failed':>32}")
        return float("inf")
    for line in lines[:-1]:
        print(line)
    return float(lines[-1].split()[-1])


# ---------------------------------------------------------------------------------------------------------------
# Timing and memory

def _timing_model(image_size: int):
    import tensorflow as tf

    import keras
    from kitm.layers import SmallConvEncoder
    from kitm.models import DualEncoder

    text = keras.Sequential([keras.layers.Embedding(1000, 64), keras.layers.GlobalAveragePooling1D()])
    model = DualEncoder(SmallConvEncoder(filters=(16, 32, 64, 64), width=128), text, embedding_dim=64)
    model.build_from_inputs({"image": tf.TensorSpec([None, image_size, image_size, 3]),
                             "tokens": tf.TensorSpec([None, 16], tf.int32)})
    return model


def _prepared_step(strategy, batch: int, image_size: int, negatives: str, chunk: int):
    """A function that runs one training step (the tf.function `fit` runs) and waits for it; traced and warmed up."""
    import keras
    import numpy as np
    import tensorflow as tf

    from kitm.losses import InfoNCELoss

    rng = np.random.default_rng(0)
    x = {"image": rng.uniform(size=(batch, image_size, image_size, 3)).astype(np.float32),
         "tokens": rng.integers(1, 1000, size=(batch, 16)).astype(np.int32)}
    y = {"image_index": np.arange(batch, dtype=np.int32)}
    with strategy.scope():
        model = _timing_model(image_size)
        model.compile(keras.optimizers.Adam(1e-4), losses={"infonce": InfoNCELoss(negatives=negatives)},
                      grad_cache_chunk=chunk, jit_compile=False)
    dataset = tf.data.Dataset.from_tensors((x, y)).repeat()
    if strategy.num_replicas_in_sync > 1:
        dataset = strategy.experimental_distribute_dataset(dataset.unbatch().batch(batch, drop_remainder=True))
    with strategy.scope():
        model.optimizer.build(model.optimizer_variables())
    model.make_train_function()
    train = model.train_function  # the tf.function `fit` runs, one step per call
    iterator = iter(dataset)

    def step():
        logs = train(iterator)
        tf.nest.map_structure(lambda value: np.asarray(value), logs)  # wait for the step

    for _ in range(2):  # trace and warm up
        step()
    return step


def _time(step) -> float:
    started = time.perf_counter()
    step()
    return time.perf_counter() - started


def _machine() -> str:
    load = os.getloadavg()
    return (f"{platform.machine()} {os.cpu_count()} cores, {platform.platform()}; load average "
            f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


def timings(batch: int, image_size: int, repeats: int, chunk: int) -> None:
    import statistics

    import tensorflow as tf

    two = tf.distribute.MirroredStrategy([d.name for d in tf.config.list_logical_devices("CPU")][:2])
    print(f"InfoNCE step, 2 logical CPU devices, global batch {batch} ({batch // 2} per replica), {image_size} px; "
          f"the three steps interleaved, median of {repeats} rounds")
    settings = (("local negatives", "local", 0), ("global negatives", "global", 0),
                (f"global + grad_cache_chunk={chunk}", "global", chunk))
    steps = [_prepared_step(two, batch, image_size, negatives, use_chunk) for _, negatives, use_chunk in settings]
    times = [[] for _ in settings]
    for round_ in range(repeats):
        order = range(len(steps)) if round_ % 2 == 0 else reversed(range(len(steps)))
        for index in order:
            times[index].append(_time(steps[index]))
    medians = [statistics.median(t) for t in times]
    for (label, _, _), median, t in zip(settings, medians, times):
        print(f"  {label:<34} {median * 1000:9.1f} ms  (min {min(t) * 1000:.1f})")
    print(f"global/local {medians[1] / medians[0]:.3f}; cached/global {medians[2] / medians[1]:.3f}")
    print(_machine())


def _status(field: str) -> float:
    """A /proc/self/status memory field (VmRSS, VmHWM) in MiB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise KeyError(field)


def memory_child(batch: int, image_size: int, chunk: int, repeats: int) -> None:
    import statistics

    import tensorflow as tf

    marks = {}

    def after_warm_up():
        # The steps' own peaks, once the step is traced and warmed up: TensorFlow's allocator statistics (every
        # tensor: weights, optimizer slots, inputs, activations) and the resident set's high-water mark (Linux
        # clear_refs 5), so that graph building and tracing do not count.
        tf.config.experimental.reset_memory_stats("CPU:0")
        marks["tensors_before"] = tf.config.experimental.get_memory_info("CPU:0")["current"] / 2 ** 20
        marks["rss_before"] = _status("VmRSS")
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")

    step = _prepared_step(tf.distribute.get_strategy(), batch, image_size, "local", chunk)
    after_warm_up()
    times = [_time(step) for _ in range(repeats)]
    print(json.dumps({"chunk": chunk, "median_s": statistics.median(times), "rss_before_mib": marks["rss_before"],
                      "step_peak_mib": _status("VmHWM"), "tensors_before_mib": marks["tensors_before"],
                      "tensor_peak_mib": tf.config.experimental.get_memory_info("CPU:0")["peak"] / 2 ** 20,
                      "process_peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def memory(batch: int, image_size: int, chunks: list[int], repeats: int) -> None:
    print(f"InfoNCE step, one device, batch {batch}, {image_size} px; one process per setting, median of {repeats} "
          "steps. MiB: TensorFlow's tensors held between steps and at the steps' peak (allocator statistics), the "
          "resident set's peak during the steps and over the whole process (tracing included)")
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072")
    for chunk in chunks:
        result = subprocess.run([sys.executable, __file__, "--memory_child", "--batch", str(batch), "--image_size",
                                 str(image_size), "--chunk", str(chunk), "--repeats", str(repeats)],
                                capture_output=True, text=True, check=True, env=env)
        figures = json.loads(result.stdout.strip().splitlines()[-1])
        label = f"grad_cache_chunk={chunk}" if chunk else "no gradient caching"
        print(f"  {label:<24} step {figures['median_s'] * 1000:7.1f} ms   tensors {figures['tensors_before_mib']:5.0f}"
              f" -> peak {figures['tensor_peak_mib']:6.0f}   RSS peak in steps {figures['step_peak_mib']:6.0f}"
              f"   process RSS peak {figures['process_peak_mib']:6.0f}")
    # The times above come from separate processes; interleaved in one process they compare under the same load.
    import statistics

    import tensorflow as tf

    steps = [_prepared_step(tf.distribute.get_strategy(), batch, image_size, "local", chunk) for chunk in chunks]
    times = [[] for _ in chunks]
    for round_ in range(repeats):
        for index in (range(len(steps)) if round_ % 2 == 0 else reversed(range(len(steps)))):
            times[index].append(_time(steps[index]))
    medians = [statistics.median(t) for t in times]
    shown = ", ".join(f"{'chunk ' + str(chunk) if chunk else 'plain'} {median * 1000:.1f} ms"
                      for chunk, median in zip(chunks, medians))
    if chunks[0] == 0:
        shown += f"; cached/plain {', '.join(f'{m / medians[0]:.2f}' for m in medians[1:])}"
    print(f"Interleaved in one process, median of {repeats} rounds: {shown}")
    print(_machine())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="the equalities (exit 1 above 1e-5)")
    parser.add_argument("--memory", action="store_true", help="peak memory and time, one process per setting")
    parser.add_argument("--memory_child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--image_size", type=int, default=32)
    parser.add_argument("--chunk", type=int, default=64, help="grad_cache_chunk of the timed cached step")
    parser.add_argument("--chunks", default="0,128", help="--memory: the settings (0: no gradient caching)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--losses", default=",".join(LOSSES), help="--check: the losses checked")
    parser.add_argument("--backends", default=",".join(BACKENDS),
                        help="--check: tensorflow (2 replicas, MirroredStrategy) and/or jax (2 devices, DataParallel)")
    parser.add_argument("--jax_check_child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    names = [name for name in args.losses.split(",") if name]
    if args.jax_check_child:
        jax_check(names)
        return 0
    if args.memory_child:
        memory_child(args.batch, args.image_size, args.chunk, args.repeats)
        return 0
    if args.memory:
        memory(args.batch or 1024, args.image_size, [int(c) for c in args.chunks.split(",")], args.repeats)
        return 0
    if args.check:
        backends = [backend for backend in args.backends.split(",") if backend]
        unknown = set(backends) - set(BACKENDS)
        if unknown:
            parser.error(f"--backends: {sorted(unknown)} not among {BACKENDS}")
        _header()
        worst = 0.0
        if "tensorflow" in backends:
            if importlib.util.find_spec("tensorflow") is None:
                print(f"{'(all)':<16}{'2 replicas (TensorFlow)':<38}{'skipped: TensorFlow not installed':>32}")
            else:
                _devices(2)
                worst = check(names)
        if "jax" in backends:
            worst = max(worst, jax_rows(names))
        print(f"largest difference {worst:.3e} (tolerance {TOLERANCE:g})")
        return 0 if worst <= TOLERANCE else 1
    _devices(2)
    timings(args.batch or 256, args.image_size, args.repeats, args.chunk)
    return 0


if __name__ == "__main__":
    sys.exit(main())

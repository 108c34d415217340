"""The same kitm training step on Keras' TensorFlow and JAX backends, at the same thread count, interleaved: JAX/TF.

Rows (`--rows`, default all):

    demo          the demo's model and objective as the launcher builds them from launch/demo.flags: the small CNN
                  image tower at 48x48, word embeddings (64) + bidirectional GRU (128) text tower, a 256-d joint
                  space, batch 128, the triplet loss summed over negatives (margin 0.2), Adam with the demo's step
                  schedule and global clip norm 2, the relevance statistics monitor (the demo trains with
                  --relevance=truth, so y carries the batch's [B, B] relevance matrix);
    demo_sam      the same with --loss=sam (kitm.losses.SAMLoss: the triplet + the semantic adaptive margin from the
                  relevance matrix in y_true), the launcher's SAM defaults;
    clip_infonce  a tiny CLIP: keras-hub CLIPVisionEncoder / CLIPTextEncoder with random weights (no download), 64 px
                  images in 8 px patches, 32-token captions, 2 layers of width 128 per tower, a 64-d joint space, batch
                  64, wrapped as kitm's HubImageTower / HubTextTower (built by benchmarks/bench_clip_step.py's
                  `kitm_model`), kitm's InfoNCE with its learnable temperature, AdamW (weight decay 0.2);
    clip_graded   the same tiny CLIP with graded InfoNCE (soft targets from the relevance matrix in y_true).

The demo rows go through kitm's own construction: the flagfile is parsed by the launcher's flags
(`kitm.launch.experiment_config`), the towers come from `kitm.experiment.encoders.build_towers`, the optimizer from
`encoders.make_optimizer` with the run's learning-rate schedule, the losses from `kitm.experiment.build_objective`,
and the model is compiled by the launcher's `Trainer`: the steps of `kitm.experiment.training_run._build_model`,
without a dataset. So each backend gets what the launcher gives it by default (printed per row): on TensorFlow the
GRU may trim each batch's padding and run the packed recurrence and Adam may be the fused kernel; on JAX the step is
XLA-compiled (Keras' jit_compile "auto" is on there; on a CPU it is off on TensorFlow) and the GRU runs over the
tokenizer's fixed width. The CLIP rows' losses also come from `build_objective` (the launcher's defaults).

Inputs: random numpy arrays of the pipeline's shapes and dtypes, from the same seed in both processes, converted
once to the backend's tensors before any timing: images uniform in [0, 1]; the demo's captions are 0-padded to the
tokenizer's 32 ids, with lengths drawn around the synthetic world's (mean 14.4 words, 3 to 32; 130 ids: its ~126
words + padding and [UNK]); `image_index` drawn from its 2,400 training images (so a few rows share an image, as with
--captions_per_step=all); relevance 1 for rows of the same image, uniform in [0, 0.6] elsewhere. CLIP's captions are
bench_clip_step's (start token, 8-20 random tokens, end token); its vocabulary is 4,096 ids, not CLIP's 49,408: at
width 128 the full table would hold 6.3 M of the model's ~7 M weights and the row would time the embedding's Adam
update rather than the towers.

One step = `model.train_on_batch(x, y)`: on TensorFlow the tf.function Keras compiles for `fit` (kitm's own train
step); on JAX Keras' jitted train step, whose state `train_on_batch` writes back into the variables after each step.
Both return the logs as numpy, so every step ends synchronised.

How the two backends run side by side: Keras picks its backend once per process, so each backend runs in its own
long-lived worker process (`--worker`, started once, KERAS_BACKEND set before anything imports Keras), which builds
every row's model, runs `--warmup` untimed steps (the first traces / compiles: its time is printed as "first step"),
then answers timing requests over a pipe. Once every row is built, each row takes one more untimed step on each
side (building a row calls `keras.utils.set_random_seed`, whose `tf.random.set_seed` clears TensorFlow's kernel
caches: the next step of a TF row built earlier took ~1.3 s instead of ~20 ms). The parent alternates timed blocks
of `--steps` steps between the two workers, round by round over the rows, TF first in even rounds and JAX first in
odd ones (as benchmarks/_sidebyside.py's `interleaved` does within one process), so a drift in the machine's load
hits both alike.
A block's time is measured inside the worker (perf_counter around the steps), per step. Per row:

    JAX/TF ratio of round r = (JAX seconds per step in round r) / (TF seconds per step in round r)
    printed: median over rounds of each side's ms/step, the median ratio and its spread (min-max over rounds)

Threads (`--threads`, default 2), set in each worker before its framework starts:
  * TensorFlow: TF_NUM_INTRAOP_THREADS / TF_NUM_INTEROP_THREADS and `tf.config.threading.set_intra_op_parallelism_
    threads` / `set_inter_op_parallelism_threads` (the latter two are what counts; they must precede the first op).
  * JAX: XLA_FLAGS gets `--xla_cpu_multi_thread_eigen=true` (Eigen's multi-threaded dot and convolution kernels,
    XLA's default, stated). XLA:CPU in jaxlib 0.10 has no thread-count option: the old advice
    `intra_op_parallelism_threads=N` is TensorFlow's session setting, and XLA_FLAGS rejects `--intra_op_parallelism_
    threads` as an unknown flag (and silently skips it without the dashes). Its thread pools are sized by the CPUs
    the process may run on (sched_getaffinity), so where the machine has more CPUs than `--threads`, both workers
    are pinned to the same first `--threads` CPUs (os.sched_setaffinity) before their frameworks start; on a
    machine with exactly `--threads` CPUs (the project's 2-core machine) that changes nothing.

    python benchmarks/bench_backends.py [--rows demo,demo_sam,clip_infonce,clip_graded] [--repeats 5] [--steps 3]
    python benchmarks/bench_backends.py --quick          # tiny shapes, 2 rounds of 1 step: the smoke test

JAX must be installed beside TensorFlow (`pip install "jax[cpu]>=0.10,<0.11"`, docs/backends.md); a row whose step
fails on one backend prints the error and is left out of the rounds.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

import _sidebyside as side

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BACKENDS = ("tensorflow", "jax")
ROWS = ("demo", "demo_sam", "clip_infonce", "clip_graded")
DEMO_FLAGFILE = os.path.join(ROOT, "launch", "demo.flags")
# The synthetic world's captions (3,000 scenes at 48 px; measured on 300 of them): ~126 distinct words, 14.4 words on
# average, 3 to 32. Ids 0 and 1 are padding and [UNK] (kitm.layers.CaptionTokenizer).
DEMO_VOCABULARY, DEMO_MEAN_WORDS, DEMO_WORDS_SD, DEMO_TRAINING_IMAGES = 130, 14.4, 4.0, 2400
# The demo's settings the quick mode shrinks (launcher flags, given after the flagfile's).
QUICK_DEMO_SETTINGS = {"image_size": 32, "embedding_dim": 32, "word_dim": 16, "text_units": 16, "batch_size": 16,
                       "max_caption_length": 16}
# The tiny CLIP, in open_clip's configuration format as bench_clip_step.kitm_model takes it.
TINY_CLIP = {"embed_dim": 64, "quick_gelu": True,
             "vision_cfg": {"image_size": 64, "layers": 2, "width": 128, "head_width": 64, "patch_size": 8},
             "text_cfg": {"context_length": 32, "vocab_size": 4096, "width": 128, "heads": 2, "layers": 2}}
CLIP_BATCH, QUICK_CLIP_BATCH = 64, 8
CLIP_LEARNING_RATE, CLIP_WEIGHT_DECAY = 5e-4, 0.2  # bench_clip_step's


# ---------------------------------------------------------------------------------------------------------------
# Worker side: one process per backend.

def worker_environment(backend: str, threads: int) -> dict:
    """The worker's environment: its Keras backend and thread settings (module docstring), set before it starts."""
    env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="2", HF_HUB_OFFLINE="1",
               TF_NUM_INTRAOP_THREADS=str(threads), TF_NUM_INTEROP_THREADS=str(threads),
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if backend == "jax":
        flags = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith("--xla_cpu_multi_thread_eigen")]
        env["XLA_FLAGS"] = " ".join(flags + ["--xla_cpu_multi_thread_eigen=true"])
    return env


def pin_to_cpus(threads: int) -> str:
    """Pin this process to its first `threads` allowed CPUs where it may use more (XLA sizes its pools by them)."""
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) > threads:
        os.sched_setaffinity(0, allowed[:threads])
        return f"pinned to CPUs {allowed[:threads]} of {len(allowed)}"
    return f"{len(allowed)} CPUs allowed, not pinned"


def demo_config(loss: str, quick: bool):
    """The launcher's configuration for launch/demo.flags (+ --loss, + the quick sizes): its own flag parsing."""
    from kitm import launch

    arguments = ["bench_backends", f"--flagfile={DEMO_FLAGFILE}", f"--loss={loss}"]
    if quick:
        arguments += [f"--{name}={value}" for name, value in QUICK_DEMO_SETTINGS.items()]
    launch.FLAGS.unparse_flags()  # the next row parses afresh
    launch.FLAGS(arguments)
    return launch.experiment_config()


class _DemoVocabulary:
    """What `encoders.build_towers` reads of the run's tokenizer: its vocabulary size."""

    vocabulary_size = DEMO_VOCABULARY


def demo_model(config):
    """The DualEncoder, optimizer and objective as kitm.experiment.training_run._build_model makes them (one device,
    no joint preset, no fine-tuning phase), compiled."""
    from kitm.experiment import encoders
    from kitm.experiment.trainers import Trainer
    from kitm.experiment.training_run import learning_rate_schedule
    from kitm.metrics import EmbeddingCollapse
    from kitm.models import DualEncoder

    import keras

    keras.utils.set_random_seed(config.training.seed)
    t = config.training
    # The demo's epoch: 2,400 training scenes x 5 captions (--captions_per_step=all) per batch.
    steps_per_epoch = DEMO_TRAINING_IMAGES * 5 // t.batch_size
    image_encoder, text_encoder, _ = encoders.build_towers(config, _DemoVocabulary())
    model = DualEncoder(image_encoder, text_encoder, config.model.embedding_dim, name="dual_encoder")
    size = config.data.image_size
    model.build_from_inputs({"image": keras.KerasTensor([None, size, size, 3], "float32"),
                             "tokens": keras.KerasTensor([None, config.data.max_caption_length], "int32")})
    encoders.apply_tower_training(config, model)
    optimizer = encoders.make_optimizer(config, model, learning_rate_schedule(config, steps_per_epoch),
                                        global_clipnorm=t.grad_clip_norm or None)
    jit_compile = {"auto": "auto", "true": True, "false": False}[str(t.jit_compile).lower()]
    monitors = [EmbeddingCollapse()] if t.collapse_threshold else []
    trainer = Trainer(config)
    trainer.compile(model, optimizer=optimizer, strategy=None, monitors=monitors, jit_compile=jit_compile,
                    steps_per_epoch=steps_per_epoch)
    trainer.build_optimizer(model, optimizer)
    return model


def demo_batch(config, seed: int = 0):
    """(x, y) numpy arrays of the demo pipeline's shapes (module docstring)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    batch, size, width = config.training.batch_size, config.data.image_size, config.data.max_caption_length
    images = rng.random((batch, size, size, 3), dtype=np.float32)
    lengths = np.clip(np.round(rng.normal(DEMO_MEAN_WORDS, DEMO_WORDS_SD, batch)), 3, width).astype(int)
    tokens = np.zeros((batch, width), np.int32)
    for row, length in enumerate(lengths):
        tokens[row, :length] = rng.integers(2, DEMO_VOCABULARY, size=length)
    image_index = rng.integers(0, DEMO_TRAINING_IMAGES, size=batch).astype(np.int32)
    return {"image": images, "tokens": tokens}, {"image_index": image_index,
                                                 "caption_index": np.arange(batch, dtype=np.int32),
                                                 "relevance": graded_relevance(rng, image_index)}


def graded_relevance(rng, image_index):
    """[B, B] float32: 1 where two rows show the same image, uniform in [0, 0.6] elsewhere."""
    import numpy as np

    relevance = rng.uniform(0.0, 0.6, size=(len(image_index), len(image_index))).astype(np.float32)
    relevance[image_index[:, None] == image_index[None, :]] = 1.0
    return relevance


def clip_model_and_batch(loss: str, quick: bool, seed: int = 0):
    """The tiny CLIP DualEncoder compiled with the launcher's `loss` (infonce or graded_infonce), and its (x, y)."""
    import bench_clip_step as clip_step
    import keras
    import numpy as np

    from kitm.experiment import build_objective, experiment_config

    config, batch = (clip_step.QUICK_CONFIG, QUICK_CLIP_BATCH) if quick else (TINY_CLIP, CLIP_BATCH)
    on_tensorflow = keras.backend.backend() == "tensorflow"
    # The fused Adam kernel is TensorFlow's (the launcher's --fused_update=auto takes it there, Keras' AdamW elsewhere).
    model = clip_step.kitm_model(config, learning_rate=CLIP_LEARNING_RATE, weight_decay=CLIP_WEIGHT_DECAY, seed=seed,
                                 fused=on_tensorflow)
    # kitm_model compiles with InfoNCELoss(); compile again with the launcher's loss of this row (optimizer not built
    # yet, so it starts from the same state).
    losses, weights = build_objective(experiment_config("synthetic", loss=[loss], relevance="truth"))
    model.compile(model.optimizer, losses=losses, loss_weights=weights)
    data = clip_step.make_batch(config, batch, seed=seed)
    x = {"image": data["images"], "tokens": {"token_ids": data["tokens"].astype(np.int32)}}
    model.build_from_inputs(keras.tree.map_structure(lambda a: keras.KerasTensor(a.shape, a.dtype.name), x))
    model.optimizer.build(model.optimizer_variables())
    image_index = np.arange(batch, dtype=np.int32)
    y = {"image_index": image_index}
    if loss == "graded_infonce":
        y["relevance"] = graded_relevance(np.random.default_rng(seed + 1), image_index)
    return model, x, y


def prepare_row(row: str, quick: bool):
    """(model, x, y) of `row`, x and y as the backend's tensors."""
    import keras

    if row in ("demo", "demo_sam"):
        config = demo_config("triplet" if row == "demo" else "sam", quick)
        model = demo_model(config)
        x, y = demo_batch(config)
    else:
        model, x, y = clip_model_and_batch("infonce" if row == "clip_infonce" else "graded_infonce", quick)
    # Converted once, outside every timing (the tf.data pipeline hands tensors over too).
    to_tensor = lambda a: keras.ops.convert_to_tensor(a)  # noqa: E731
    return model, keras.tree.map_structure(to_tensor, x), keras.tree.map_structure(to_tensor, y)


def describe(model) -> str:
    """The row's loss and what the backend's defaults made of the step: XLA or not, the optimizer, the GRU."""
    import keras

    losses = "+".join(type(loss).__name__ for loss in model.loss_functions.values())
    parts = [losses, f"jit_compile={model.jit_compile}", f"optimizer {type(model.optimizer).__name__}"]
    text = model.text_encoder
    if hasattr(text, "recurrence"):
        # GRUTextEncoder trims the padding and packs the recurrence on TensorFlow only: on JAX it runs the masked
        # equivalent (kitm.ops.packed_gru's masked_gru, ops.scan) over the tokenizer's whole width.
        on_tensorflow = keras.backend.backend() == "tensorflow"
        trimmed = "trimmed to the batch's longest caption" if text.trim_padding and on_tensorflow else "full width"
        loop = text.recurrence if on_tensorflow or text.recurrence == "masked" else "packed -> masked scan"
        parts.append(f"GRU {loop}, {trimmed}")
    # optimizer_variables: the weights and the loss's temperature (on TensorFlow not among trainable_variables).
    weights = sum(math.prod(v.shape) for v in model.optimizer_variables())
    return ", ".join(parts + [f"{weights:,} trained weights"])


def run_worker(backend: str, threads: int, quick: bool, warmup: int) -> None:
    """Answer the parent's requests, one JSON line each way: hello, prepare <row>, time <row> <steps>, quit."""
    # The protocol gets its own copy of stdout; whatever the frameworks print goes to stderr (the parent's log).
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    pinned = pin_to_cpus(threads)
    if backend == "tensorflow":
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    import keras

    assert keras.backend.backend() == backend, (keras.backend.backend(), backend)
    prepared = {}

    def reply(**fields):
        protocol.write(json.dumps(fields) + "\n")

    for line in sys.stdin:
        request = json.loads(line)
        try:
            if request["do"] == "hello":
                if backend == "tensorflow":
                    import tensorflow as tf

                    framework = (f"TensorFlow {tf.__version__}, intra-op threads "
                                 f"{tf.config.threading.get_intra_op_parallelism_threads()}, inter-op "
                                 f"{tf.config.threading.get_inter_op_parallelism_threads()}")
                else:
                    import jax

                    framework = (f"JAX {jax.__version__} ({jax.devices()[0].platform}), "
                                 f"XLA_FLAGS={os.environ['XLA_FLAGS']!r}")
                reply(ok=True, text=f"Keras {keras.__version__} on {framework}; {pinned}")
            elif request["do"] == "prepare":
                model, x, y = prepare_row(request["row"], quick)
                started = time.perf_counter()
                model.train_on_batch(x, y)  # traces / compiles
                first = time.perf_counter() - started
                for _ in range(warmup - 1):
                    model.train_on_batch(x, y)
                prepared[request["row"]] = (model, x, y)
                reply(ok=True, first_step_s=first, text=describe(model))
            elif request["do"] == "time":
                model, x, y = prepared[request["row"]]
                started = time.perf_counter()
                for _ in range(request["steps"]):
                    model.train_on_batch(x, y)
                reply(ok=True, seconds=(time.perf_counter() - started) / request["steps"])
            elif request["do"] == "quit":
                reply(ok=True)
                return
        except Exception as error:  # noqa: BLE001 - reported to the parent, which leaves the row out
            last = traceback.format_exception(error)[-6:]
            reply(ok=False, error=f"{type(error).__name__}: {error}"[:2000], where="".join(last)[-3000:])


# ---------------------------------------------------------------------------------------------------------------
# Parent side.

class Worker:
    """One backend's worker process, and its log (stderr) in a temporary file."""

    def __init__(self, backend: str, args):
        self.backend = backend
        self.label = {"tensorflow": "TF", "jax": "JAX"}[backend]
        self.log = tempfile.TemporaryFile(mode="w+")
        command = [sys.executable, os.path.abspath(__file__), "--worker", backend, "--threads", str(args.threads),
                   "--warmup", str(args.warmup)] + (["--quick"] if args.quick else [])
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                        text=True, bufsize=1, env=worker_environment(backend, args.threads))

    def ask(self, **request) -> dict:
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            self.log.seek(0)
            raise RuntimeError(f"the {self.label} worker exited ({self.process.wait()}); its log ends:\n"
                               + self.log.read()[-3000:])
        return json.loads(line)

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.ask(do="quit")
            except (RuntimeError, BrokenPipeError):
                pass
        self.process.wait(timeout=60)


class BackendComparison(side.Comparison):
    """_sidebyside's Comparison with JAX in kitm's place and TensorFlow in the peer's: ratios are JAX/TF."""

    def summary(self) -> str:
        r = self.ratios
        return (f"{self.label:<13} TF {statistics.median(self.peer) * 1e3:8.1f} ms/step   JAX "
                f"{statistics.median(self.kitm) * 1e3:8.1f} ms/step   JAX/TF median {statistics.median(r):.2f} "
                f"(spread {min(r):.2f}-{max(r):.2f} over {len(r)} rounds)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated, from {', '.join(ROWS)}")
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds (one block per backend and row each)")
    parser.add_argument("--steps", type=int, default=3, help="training steps per timed block")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per row and backend (the first compiles)")
    parser.add_argument("--threads", type=int, default=2, help="each framework's threads (module docstring)")
    parser.add_argument("--quick", action="store_true", help="tiny shapes, 2 rounds of 1 step: the smoke test")
    parser.add_argument("--worker", choices=BACKENDS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        run_worker(args.worker, args.threads, args.quick, max(args.warmup, 1))
        return 0
    if args.quick:
        args.repeats, args.steps = 2, 1
    rows = [row for row in args.rows.split(",") if row]
    unknown = sorted(set(rows) - set(ROWS))
    if unknown:
        parser.error(f"--rows: unknown {', '.join(unknown)}; choose from {', '.join(ROWS)}")
    if importlib.util.find_spec("jax") is None:  # only its presence here; the JAX worker imports it
        print('bench_backends.py needs JAX beside TensorFlow: pip install "jax[cpu]>=0.10,<0.11"', file=sys.stderr)
        return 2

    print(f"kitm training step, TensorFlow against JAX: {'quick (tiny shapes)' if args.quick else 'full shapes'}, "
          f"rows {', '.join(rows)}; {args.repeats} rounds of {args.steps} step(s) per block, after {args.warmup} "
          f"untimed step(s); {args.threads} threads per framework")
    print("before: " + side.load_average(), flush=True)
    workers = {backend: Worker(backend, args) for backend in BACKENDS}
    try:
        for worker in workers.values():
            print(f"  {worker.label:<3} worker: {worker.ask(do='hello')['text']}", flush=True)
        ready = []
        for row in rows:
            failed = False
            for worker in workers.values():  # one after the other: a compiling worker has the CPUs to itself
                answer = worker.ask(do="prepare", row=row)
                if answer["ok"]:
                    print(f"  {row:<13} {worker.label:<3} first step {answer['first_step_s']:6.1f} s; "
                          f"{answer['text']}", flush=True)
                else:
                    failed = True
                    print(f"  {row:<13} {worker.label:<3} FAILED: {answer['error']}\n{answer['where']}", flush=True)
            if not failed:
                ready.append(row)
        # One untimed round once every row is built: building a row calls keras.utils.set_random_seed, whose
        # tf.random.set_seed clears TensorFlow's kernel caches, and the next step of every TF row built before it
        # took ~1.3 s instead of ~20 ms (measured on the quick CLIP row).
        for row in ready:
            for worker in workers.values():
                answer = worker.ask(do="time", row=row, steps=1)
                if not answer["ok"]:
                    raise RuntimeError(f"{row} on {worker.backend}: {answer['error']}\n{answer['where']}")
        times = {row: {backend: [] for backend in BACKENDS} for row in ready}
        for round_ in range(args.repeats):
            order = BACKENDS if round_ % 2 == 0 else BACKENDS[::-1]
            for row in ready:
                for backend in order:
                    answer = workers[backend].ask(do="time", row=row, steps=args.steps)
                    if not answer["ok"]:
                        raise RuntimeError(f"{row} on {backend}: {answer['error']}\n{answer['where']}")
                    times[row][backend].append(answer["seconds"])
                tf_s, jax_s = times[row]["tensorflow"][-1], times[row]["jax"][-1]
                print(f"  {row:<13} round {round_}: TF {tf_s * 1e3:8.1f} ms  JAX {jax_s * 1e3:8.1f} ms  "
                      f"JAX/TF {jax_s / tf_s:5.2f}", flush=True)
    finally:
        for worker in workers.values():
            worker.close()
    print("after: " + side.load_average())
    print(f"summary (ms per training step, median of {args.repeats} rounds; JAX/TF below 1: JAX faster):")
    for row in ready:
        print("  " + BackendComparison(row, times[row]["jax"], times[row]["tensorflow"]).summary())
    for row in rows:
        if row not in ready:
            print(f"  {row:<13} not timed: its step failed on a backend (above)")
    return 0 if len(ready) == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())

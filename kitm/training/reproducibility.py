"""Reproducible runs: one seed for everything random, and TensorFlow's op determinism on request.

`set_seeds(seed)` calls `keras.utils.set_random_seed`, which seeds Python's `random`, NumPy and TensorFlow's
global generator; with it, and the seeds kitm passes explicitly, the same seed gives
    the synthetic world           `build_synthetic(seed=...)` (NumPy generator of its own)
    data order                    file and record shuffles (`tf.data` shuffle with `seed`), interleave and
                                  maps with `deterministic=True`
    caption sampling,             stateless draws, one seed pair per image and per sample from
    augmentation                  `tf.data.Dataset.random(seed)` (`kitm.data.pipeline`): the same whatever
                                  the threads do, a new sequence each epoch
    initialisation                Keras initialisers draw from the global seed
    SAM's random negatives        `SAMLoss(seed=...)`
Measured on CPU (tests/end_to_end/test_reproducibility.py): two launcher runs with the same seed log the same epoch
losses to the last bit without op determinism (before the stateless draws they did not: the crops of a
parallel map followed the thread timing).

What the seed alone does not fix, and `deterministic_ops=True`
(`tf.config.experimental.enable_op_determinism()`, flag `--deterministic_ops`) does:
  - GPU kernels that add in a thread-dependent order, per TensorFlow's documentation for example cuDNN
    convolution backward passes and the segment sums behind the gradient of an embedding lookup: with
    determinism on they use deterministic algorithms or raise `UnimplementedError` naming the op (not
    tried here: our machines have no GPU);
  - `tf.data`: every `deterministic=False` becomes True, and a map whose function holds a stateful op
    runs serially. The caption tokenizer's vocabulary lookup (a `StringLookup` hash table) is such an op,
    so with determinism on the input pipeline runs on one thread: much slower on large images;
  - random ops without a seed are refused (`RuntimeError`), which finds any draw the seed does not reach.
Runs in one process: TF Model Garden's `official.core.input_reader` (imported with the vision ops that
`kitm.ops.images` uses) draws one number from Python's global generator when it is first imported, so before this
was handled the first run in a process (which imported it after seeding) and every later one (which did not)
started from different weights. `set_seeds` now imports it before seeding and then makes that draw itself: every run
sees the same sequence, and the same weights as runs made before the fix in a fresh process
(tests/training/test_reproducibility.py, tests/end_to_end/test_reproducibility.py).

Bit-identical runs were checked on one device only; across replicas the gradients also pass through the
strategy's all-reduce, whose summation order we have not checked (NCCL on GPUs, gRPC rings between
workers). Under several replicas
BatchNormalization's moving statistics are updated per replica (Keras creates them with aggregation
"none"), so the chief's first replica's statistics are the ones saved.
"""

from __future__ import annotations

import random

import keras
import tensorflow as tf


def set_seeds(seed: int, *, deterministic_ops: bool = False) -> None:
    """Seed Python, NumPy and TensorFlow (`keras.utils.set_random_seed`); optionally make ops deterministic.

    The same seed leaves the generators in the same state whatever the process imported before (module docstring).
    """
    import kitm.ops.images  # noqa: F401 - its Model Garden import draws from Python's generator: before seeding
    keras.utils.set_random_seed(seed)
    # The draw that import made right after seeding in every run before this was handled (a fresh process imported
    # it lazily, after set_seeds): kept, so that a seed gives the weights it always gave.
    random.randint(0, (1 << 31) - 1)
    if deterministic_ops:
        tf.config.experimental.enable_op_determinism()

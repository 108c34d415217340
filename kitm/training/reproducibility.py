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
Bit-identical runs were checked on one device only; across replicas the gradients also pass through the
strategy's all-reduce, whose summation order we have not checked (NCCL on GPUs, gRPC rings between
workers). Under several replicas
BatchNormalization's moving statistics are updated per replica (Keras creates them with aggregation
"none"), so the chief's first replica's statistics are the ones saved.
"""

from __future__ import annotations

import keras
import tensorflow as tf


def set_seeds(seed: int, *, deterministic_ops: bool = False) -> None:
    """Seed Python, NumPy and TensorFlow (`keras.utils.set_random_seed`); optionally make ops deterministic."""
    keras.utils.set_random_seed(seed)
    if deterministic_ops:
        tf.config.experimental.enable_op_determinism()

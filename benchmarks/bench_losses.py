"""Time one training step with each semantic loss against the VSE++ triplet baseline.

A step is forward + backward + SGD update of a dual encoder on random inputs, inside one
`tf.function`, batch 128. Two encoders:

- `tiny`: one Dense layer per side from D = 256 random features (the brief's minimal model); the loss
  dominates such a step, so its ratios overstate the loss's share of a real step;
- `mlp`: two-layer MLPs from precomputed features (image 2048 -> 2048 -> 1024, text 768 -> 2048 -> 1024),
  closer to a VSE-style model on region/grid features, still far lighter than a CNN/transformer step.

For each loss the script prints the median step time over `--runs` steps after warm-up, the ratio to
the triplet step and the absolute added milliseconds (the added time does not shrink with a bigger
model, the ratio does). The target is that no semantic loss adds more than 25% to a real model step.
Wall time is shared with whatever else runs on the machine (2 cores here), so figures on a busy box
are pessimistic.

    python benchmarks/bench_losses.py [--batch 128] [--runs 30] [--models tiny,mlp]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import kitm  # noqa: F401,E402  (selects the TensorFlow backend)
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from kitm.losses.angular import AngularLoss, NeighborhoodAngularLoss  # noqa: E402
from kitm.losses.ladder import AdaptiveLadderLoss, LadderLoss, adaptive_levels  # noqa: E402
from kitm.losses.sam import SAMLoss  # noqa: E402
from kitm.losses.triplet import TripletLoss  # noqa: E402

MODELS = {
    # name: (image layer widths, text layer widths); the first width is the input feature size.
    "tiny": ((256, 256), (256, 256)),
    "mlp": ((2048, 2048, 1024), (768, 2048, 1024)),
}


def losses() -> dict:
    return {
        "triplet (baseline)": TripletLoss(),
        "SAM hardest, matched": SAMLoss(tau=3.0, sampling="hardest"),
        "SAM random, reference": SAMLoss(tau=3.0, sampling="random", pairing="reference"),
        "ladder fixed (L=2)": LadderLoss(),
        "ladder fixed (L=3)": LadderLoss(thresholds=(0.40, 0.35), margins=(0.2, 0.01, 0.01), betas=(1, 0.25, 0.125)),
        "ladder adaptive (2, 4)": AdaptiveLadderLoss(),
        "ladder adaptive, levels given": (AdaptiveLadderLoss(), "levels"),
        "angular N-pair sym": AngularLoss(),
        "neighbourhood angular": NeighborhoodAngularLoss(),
    }


def make_encoder(widths, rng):
    weights = [tf.Variable(rng.normal(scale=1 / np.sqrt(a), size=(a, b)).astype(np.float32))
               for a, b in zip(widths[:-1], widths[1:])]

    def encode(x):
        for i, w in enumerate(weights):
            x = tf.matmul(x, w)
            if i + 1 < len(weights):
                x = tf.nn.relu(x)
        return tf.math.l2_normalize(x, axis=1)

    return encode, weights


def batch_inputs(rng, batch, image_width, text_width):
    image = tf.constant(rng.normal(size=(batch, image_width)).astype(np.float32))
    text = tf.constant(rng.normal(size=(batch, text_width)).astype(np.float32))
    relevance = rng.uniform(size=(batch, batch)).astype(np.float32)
    np.fill_diagonal(relevance, 1.0)
    y_true = {
        "relevance": tf.constant(relevance),
        "image_index": tf.range(batch),
        "neighbor_position": tf.constant(rng.permutation(batch).astype(np.int32)),
    }
    return image, text, y_true


def time_round_robin(steps, runs, warmup=3):
    """Median wall ms of each step; steps alternate within every round, so that load from other
    processes on the machine spreads evenly over the losses instead of biasing whichever ran last."""
    for fn, args in steps.values():
        for _ in range(warmup):
            fn(*args)
    times = {label: [] for label in steps}
    for _ in range(runs):
        for label, (fn, args) in steps.items():
            start = time.perf_counter()
            fn(*args).numpy()
            times[label].append(time.perf_counter() - start)
    return {label: statistics.median(t) * 1e3 for label, t in times.items()}


def bench_model(name, batch, runs):
    rng = np.random.default_rng(0)
    image_widths, text_widths = MODELS[name]
    encode_image, image_weights = make_encoder(image_widths, rng)
    encode_text, text_weights = make_encoder(text_widths, rng)
    variables = image_weights + text_weights
    image, text, y_true = batch_inputs(rng, batch, image_widths[0], text_widths[0])
    # Fixed embeddings for timing the loss alone (forward and backward with respect to them).
    embeddings = (tf.math.l2_normalize(tf.random.normal([batch, 256], seed=1), axis=1),
                  tf.math.l2_normalize(tf.random.normal([batch, 256], seed=2), axis=1))
    steps, alone = {}, {}
    row_levels, column_levels = adaptive_levels(y_true["relevance"], 2, 4)
    with_levels = dict(y_true, row_levels=row_levels, column_levels=column_levels)
    for label, loss in losses().items():
        batch_true = y_true
        if isinstance(loss, tuple):  # levels computed by the input pipeline, outside the step
            loss, batch_true = loss[0], with_levels

        @tf.function
        def step(image, text, y_true, loss=loss):
            with tf.GradientTape() as tape:
                value = loss(y_true, {"image": encode_image(image), "text": encode_text(text)})
            grads = tape.gradient(value, variables)
            for v, g in zip(variables, grads):
                v.assign_sub(1e-4 * g)
            return value

        @tf.function
        def loss_only(x, y, y_true, loss=loss):
            with tf.GradientTape() as tape:
                tape.watch([x, y])
                value = loss(y_true, {"image": x, "text": y})
            gx, gy = tape.gradient(value, [x, y])
            return value + tf.reduce_sum(gx) + tf.reduce_sum(gy)

        steps[label] = (step, (image, text, batch_true))
        alone[label] = (loss_only, (*embeddings, batch_true))

    step_ms = time_round_robin(steps, runs)
    alone_ms = time_round_robin(alone, runs)
    print(f"\nmodel {name}: image {image_widths}, text {text_widths}, batch {batch}, median of {runs} steps")
    print(f"  {'loss':<30s} {'step ms':>9s} {'ratio':>7s} {'added ms':>9s}   {'loss-only ms':>12s}")
    baseline = step_ms["triplet (baseline)"]
    for label, ms in step_ms.items():
        print(f"  {label:<30s} {ms:9.2f} {ms / baseline:7.2f} {ms - baseline:+9.2f}   {alone_ms[label]:12.2f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--models", default="tiny,mlp")
    options = parser.parse_args()
    tf.get_logger().setLevel("ERROR")  # one tf.function per loss: the retracing warning is expected
    print(f"TensorFlow {tf.__version__}, {os.cpu_count()} CPU cores visible; wall-clock medians")
    for name in options.models.split(","):
        bench_model(name.strip(), options.batch, options.runs)


if __name__ == "__main__":
    main()

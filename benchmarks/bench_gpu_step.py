"""kitm's training step with the photo configuration on an accelerator: step time, images/s and model FLOP utilisation.

Issue 14, item 5: ResNet152 (ImageNet architecture, random weights: no download) + BiGRU text tower, batch 128,
224 px, triplet loss with hardest negatives, Adam with global clip 2.0; each of the four combinations of
`--mixed_precision` (mixed_bfloat16 here; `--policy`) and `jit_compile`. The frozen backbone (VSE++ without "FT") runs
forward only; `--finetune` trains it too.

FLOPs per step are counted analytically: ResNet152 forward 11.56 GMACs = 23.1 GFLOP per 224 px image (x3 for forward
+ backward when fine-tuned); GRU 2 x 3 x (word_dim + units) x units FLOP per token and direction, x3 for training; the
projections and the loss are counted too. MFU = achieved FLOP/s / the accelerator's peak for the precision
(`--peak_tflops`; defaults: H100/H200 SXM dense 989 TFLOP/s for bf16/fp16 tensor cores, 494 for TF32 (float32
matmuls use TF32 on these GPUs by default in TensorFlow)).

Run it on the device machine (the project's `run` tool), never timed in tests:

    python benchmarks/bench_gpu_step.py [--steps 20] [--batch 128] [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import time

import _sidebyside as side

RESNET152_FORWARD_GFLOP = 23.1


def step_flops(batch, tokens, word_dim, units, embed, finetune):
    image = RESNET152_FORWARD_GFLOP * 1e9 * batch * (3 if finetune else 1)
    gru = 2 * 2 * 3 * (word_dim + units) * units * tokens * batch * 3  # 2 directions, x3 for training
    projections = 2 * batch * (2048 * embed + 2 * units * embed) * 3
    loss = 2 * batch * batch * embed * 3
    return image + gru + projections + loss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--policy", default="mixed_bfloat16")
    parser.add_argument("--finetune", action="store_true")
    parser.add_argument("--peak_tflops_half", type=float, default=989.0)
    parser.add_argument("--peak_tflops_float32", type=float, default=494.0)
    parser.add_argument("--quick", action="store_true", help="batch 4, 64 px, 2 steps: checks that it runs (CPU)")
    args = parser.parse_args()
    import keras
    import numpy as np
    import tensorflow as tf

    from kitm.layers import GRUTextEncoder, build_image_encoder
    from kitm.losses import TripletLoss
    from kitm.models import DualEncoder

    size, batch, steps = (64, 4, 2) if args.quick else (224, args.batch, args.steps)
    print(f"devices: {tf.config.list_physical_devices()}; " + side.load_average(), flush=True)
    rng = np.random.default_rng(0)
    images = tf.constant(rng.random((batch, size, size, 3), dtype=np.float32))
    lengths = side.caption_lengths(rng, batch, side.FULL)
    tokens = np.zeros((batch, 32), np.int32)
    for row, length in enumerate(lengths):
        tokens[row, :length] = rng.integers(2, 10_000, size=length)
    x = {"image": images, "tokens": tf.constant(tokens)}
    y = {"image_index": tf.range(batch, dtype=tf.int32)}
    for mixed in (False, True):
        for jit in (False, True):
            keras.mixed_precision.set_global_policy(args.policy if mixed else "float32")
            keras.utils.set_random_seed(0)
            image_encoder = build_image_encoder("resnet152", image_size=size, weights=None,
                                                trainable_backbone=args.finetune)
            model = DualEncoder(image_encoder, GRUTextEncoder(10_000, 300, 1024), 1024)
            optimizer = keras.optimizers.Adam(2e-4, global_clipnorm=2.0)
            if mixed and args.policy == "mixed_float16":
                optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
            model.compile(optimizer, losses={"triplet": TripletLoss()}, jit_compile=jit)
            for _ in range(2):
                model.train_on_batch(x, y)
            times = []
            for _ in range(steps):
                started = time.perf_counter()
                model.train_on_batch(x, y)
                times.append(time.perf_counter() - started)
            step = statistics.median(times)
            flops = step_flops(batch, 32, 300, 1024, 1024, args.finetune)  # the masked GRU runs all 32 steps
            peak = (args.peak_tflops_half if mixed else args.peak_tflops_float32) * 1e12
            print(f"mixed_precision={mixed} ({keras.mixed_precision.global_policy().name}) jit_compile={jit}: "
                  f"step {step * 1e3:.1f} ms (spread {min(times) * 1e3:.1f}-{max(times) * 1e3:.1f}), "
                  f"{batch / step:.0f} images/s, {flops / step / 1e12:.1f} TFLOP/s, MFU {flops / step / peak:.1%}",
                  flush=True)
    keras.mixed_precision.set_global_policy("float32")
    print("after: " + side.load_average())


if __name__ == "__main__":
    main()

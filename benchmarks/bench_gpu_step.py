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

`--backend=jax` (issue 33) runs where TensorFlow is absent (the GPU machine has JAX and PyTorch only; keras and
keras-hub travel as wheels), on Keras 3's JAX backend, every row jit-compiled by Keras' own JAX trainer,
mixed_bfloat16. The step is timed as `model.fit` runs it (`--loop=fit`): the training state stays on the device and
is written back to the model's variables at the epoch's end, so (epoch of 3n steps - epoch of n steps) / 2n is the
step alone. `--loop=train_on_batch` times one `train_on_batch` call a step instead, which also writes the whole
state back each step (for ResNet152 about 44 ms of host work a step on an H100: docs/performance.md). `--trace DIR`
profiles 3 more steps of each row (a Perfetto trace of the device's kernels).

- `clip_infonce`, `clip_graded_infonce`: CLIP ViT-B/32 (keras-hub's `CLIPVisionEncoder` / `CLIPTextEncoder` of the
  ViT-B/32 configuration, random weights) as kitm's `HubImageTower` / `HubTextTower` in a `DualEncoder`, batch 512,
  224 px, 77 tokens, kitm's `InfoNCELoss` (learnable temperature) or `GradedInfoNCELoss` (a random graded relevance
  matrix), AdamW. FLOPs: 2 x parameters x tokens per transformer layer plus attention (2 x 2 x tokens^2 x width),
  both towers, x3 for training: about 45 GFLOP a pair. Side by side on the same H100 (issue 33): keras-hub's plain
  `CLIPBackbone` step 5,410 samples/s, torch.compile 5,939, PyTorch eager 3,794.
- `photo_frozen`, `photo_finetune`: the photo configuration (ResNet152, 224 px, + bidirectional GRU, triplet with
  the hardest negative), batch 128; the goal 7,800 / 1,550 samples/s (a PyTorch VSE++ re-creation ran 4,407 /
  1,550, the same model written in Keras on JAX 7,856 / 1,561).

    KERAS_BACKEND=jax python benchmarks/bench_gpu_step.py --backend=jax [--rows clip_infonce,...] [--steps 10]
        [--device_data] [--loop fit|train_on_batch] [--step dual_encoder|plain] [--trace DIR]
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


def transformer_flops(layers: int, width: int, tokens: int) -> float:
    """Forward FLOPs of a transformer tower: 2 x (12 width^2 parameters a layer) x tokens + attention scores and
    values (2 x 2 x tokens^2 x width a layer)."""
    return layers * (2 * 12 * width * width * tokens + 4 * tokens * tokens * width)


def clip_b32_flops(batch: int) -> float:
    """One training step of CLIP ViT-B/32 (224 px: 49 patches + the class token; 77 text tokens): forward x 3."""
    vision = transformer_flops(12, 768, 50) + 2 * 3 * 32 * 32 * 768 * 49  # + the patch embedding
    text = transformer_flops(12, 512, 77)
    return 3 * batch * (vision + text)


def _jax_rows(args) -> None:
    """The JAX rows (module docstring); imports no TensorFlow."""
    import os

    os.environ.setdefault("KERAS_BACKEND", "jax")
    import keras
    import numpy as np

    if keras.backend.backend() != "jax":
        raise SystemExit(f"--backend=jax needs KERAS_BACKEND=jax (Keras runs on {keras.backend.backend()}).")
    import jax

    from kitm.losses import GradedInfoNCELoss, InfoNCELoss, TripletLoss

    if args.step == "dual_encoder":
        from kitm.layers import GRUTextEncoder, build_image_encoder
        from kitm.layers.hub_towers import HubImageTower, HubTextTower
        from kitm.models import DualEncoder

    class _PlainClip(keras.Model):
        """`--step=plain`: keras-hub's two CLIP encoders, class-token / end-of-text pooling and bias-free
        projections, as keras-hub's CLIPBackbone, trained with kitm's loss through Keras' own JAX train step."""

        def __init__(self, image, text, loss):
            super().__init__()
            self.image, self.text, self.loss_object = image, text, loss
            self.image_projection = keras.layers.Dense(512, use_bias=False)
            self.text_projection = keras.layers.Dense(512, use_bias=False)

        def call(self, x):
            pooled_image = self.image(x["image"])[:, 0, :]
            token_ids = x["tokens"]["token_ids"]
            hidden = self.text(token_ids)
            end = keras.ops.argmax(token_ids, axis=-1)
            pooled_text = keras.ops.take_along_axis(hidden, end[:, None, None], axis=1)[:, 0, :]
            image = keras.ops.cast(self.image_projection(pooled_image), "float32")
            text = keras.ops.cast(self.text_projection(pooled_text), "float32")
            return {"image": image / keras.ops.norm(image, axis=-1, keepdims=True),
                    "text": text / keras.ops.norm(text, axis=-1, keepdims=True)}

        def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
            return self.loss_object(y, y_pred)

    class _PlainPhoto(keras.Model):
        """`--step=plain` for the photo rows: the same parts as kitm's (keras.applications' ResNet152 with average
        pooling on caffe-style input, frozen or not; word embeddings + a bidirectional Keras GRU of 1024; two
        projections to 1024 and L2 normalisation), in a plain Keras model trained with kitm's loss through Keras'
        own JAX train step. On the CPU (64 px, batch 16) it ran at kitm's speed (1,195-1,491 against 1,171-1,188 ms a
        step): the row tells on an accelerator whether a gap is kitm's or the model's."""

        def __init__(self, size, finetune, loss):
            super().__init__()
            self.resnet = keras.applications.ResNet152(include_top=False, weights=None, pooling="avg",
                                                       input_shape=(size, size, 3))
            self.resnet.trainable = finetune
            self.finetune, self.loss_object = finetune, loss
            self.words = keras.layers.Embedding(10_000, 300, mask_zero=True)
            self.gru = keras.layers.Bidirectional(keras.layers.GRU(1024))
            self.image_projection = keras.layers.Dense(1024)
            self.text_projection = keras.layers.Dense(1024)

        def call(self, x, training=False):
            pixels = keras.applications.resnet.preprocess_input(x["image"] * 255.0)
            image = self.image_projection(self.resnet(pixels, training=training and self.finetune))
            text = self.text_projection(self.gru(self.words(x["tokens"]), mask=self.words.compute_mask(x["tokens"])))
            image, text = keras.ops.cast(image, "float32"), keras.ops.cast(text, "float32")
            return {"image": image / keras.ops.norm(image, axis=-1, keepdims=True),
                    "text": text / keras.ops.norm(text, axis=-1, keepdims=True)}

        def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
            return self.loss_object(y, y_pred)

    print(f"JAX {jax.__version__} on {jax.devices()}, Keras {keras.__version__}", flush=True)
    quick = args.quick
    rng = np.random.default_rng(0)
    keras.mixed_precision.set_global_policy(args.policy)
    peak = args.peak_tflops_half * 1e12

    def timed(name, model, x, y, batch, flops):
        model(x)  # build every weight eagerly before the first compiled step
        unrolled = 0
        if args.gru_unroll:  # an experiment: Keras' GRUs unrolled (no XLA while loop) instead of scanned
            for layer in model._flatten_layers(include_self=False):
                if isinstance(layer, keras.layers.GRU):
                    layer.unroll, unrolled = True, unrolled + 1
        if args.device_data:  # the batch on the accelerator once, as a prefetching input pipeline would leave it
            x, y = jax.device_put((x, y))
        steps = 2 if quick else args.steps
        if args.loop == "fit":
            def batches():
                while True:  # host arrays: fit copies each batch to the device one step ahead, as in training
                    yield x, y

            def run(count):
                # the epoch ends with the state synced back to the model's variables: the steps have finished
                model.fit(batches(), steps_per_epoch=count, epochs=1, verbose=0, shuffle=False)
        else:  # train_on_batch: each call also writes the whole state back to the model's variables
            def run(count):
                for _ in range(count):
                    model.train_on_batch(x, y)  # returns host floats: the step has finished

        def seconds(count):
            started = time.perf_counter()
            run(count)
            return time.perf_counter() - started

        run(2)  # compile, then warm steps
        if args.loop == "fit":
            # fit keeps the training state on the device between steps and syncs it to the model's variables once,
            # at the epoch's end: the difference of a long and a short epoch is the steps alone.
            short = min(seconds(steps) for _ in range(2))  # the faster of two: the least disturbed
            long = min(seconds(3 * steps) for _ in range(2))
            step = (long - short) / (2 * steps)
            spread = f"epochs of {steps} and {3 * steps} steps: {short:.2f} s, {long:.2f} s"
        else:
            times = [seconds(1) for _ in range(steps)]
            step = statistics.median(times)
            spread = f"spread {min(times) * 1e3:.1f}-{max(times) * 1e3:.1f} ms"
        if args.trace:  # a few more steps under JAX's profiler: a Perfetto (Chrome JSON) trace of the device's kernels
            options = jax.profiler.ProfileOptions()
            options.python_tracer_level = 0  # the device's kernels and XLA's host events, not every Python call
            with jax.profiler.trace(os.path.join(args.trace, f"{name}_{args.step}"), create_perfetto_trace=True,
                                    profiler_options=options):
                run(3)
        rate = "" if quick else f", {flops / step / 1e12:.1f} TFLOP/s, MFU {flops / step / peak:.1%}"  # full sizes
        how = f"{args.step}, {args.loop}{', batch on the device' if args.device_data else ''}"
        how += f", {unrolled} GRUs unrolled" if args.gru_unroll else ""
        print(f"{name} ({how}): batch {batch}, step {step * 1e3:.1f} ms ({spread}), "
              f"{batch / step:,.0f} samples/s{rate}", flush=True)

    rows = args.rows.split(",")
    for row in rows:
        keras.utils.set_random_seed(0)
        if row.startswith("clip"):
            import keras_hub

            batch, size, tokens = (8, 64, 16) if quick else (args.clip_batch, 224, 77)
            width, layers = (64, 2) if quick else (768, 12)
            image = keras_hub.models.CLIPVisionEncoder(patch_size=32, hidden_dim=width, num_layers=layers,
                                                       num_heads=width // 64, intermediate_dim=4 * width,
                                                       image_shape=(size, size, 3))
            text_width = 64 if quick else 512
            text = keras_hub.models.CLIPTextEncoder(vocabulary_size=49408, embedding_dim=text_width,
                                                    hidden_dim=text_width, num_layers=layers,
                                                    num_heads=text_width // 64, intermediate_dim=4 * text_width,
                                                    max_sequence_length=tokens)
            loss = GradedInfoNCELoss(0.1) if row == "clip_graded_infonce" else InfoNCELoss()  # tau_R: the default
            if args.step == "dual_encoder":
                model = DualEncoder(HubImageTower(image, "clip", name="image_backbone"),
                                    HubTextTower(text, "clip", name="text_backbone"), 512, name="dual_encoder")
                model.compile(keras.optimizers.AdamW(5e-4, weight_decay=0.2), losses={"contrastive": loss},
                              jit_compile=True)
            else:
                model = _PlainClip(image, text, loss)
                model.compile(keras.optimizers.AdamW(5e-4, weight_decay=0.2), jit_compile=True)
            ids = rng.integers(1, 49407, size=(batch, tokens)).astype("int32")
            ids[np.arange(batch), rng.integers(4, tokens, size=batch)] = 49407  # each caption's end-of-text token
            x = {"image": rng.random((batch, size, size, 3), dtype=np.float32), "tokens": {"token_ids": ids}}
            relevance = rng.random((batch, batch)).astype("float32")
            np.fill_diagonal(relevance, 1.0)
            y = {"image_index": np.arange(batch, dtype="int32"), "relevance": relevance}
            timed(row, model, x, y, batch, clip_b32_flops(batch))
        elif row.startswith("photo"):
            finetune = row == "photo_finetune"
            size, batch = (64, 4) if quick else (224, args.batch)
            if args.step == "dual_encoder":
                image_encoder = build_image_encoder("resnet152", image_size=size, weights=None,
                                                    trainable_backbone=finetune)
                model = DualEncoder(image_encoder, GRUTextEncoder(10_000, 300, 1024), 1024)
                model.compile(keras.optimizers.Adam(2e-4, global_clipnorm=2.0),
                              losses={"triplet": TripletLoss(max_violation=True)}, jit_compile=True)
            else:
                model = _PlainPhoto(size, finetune, TripletLoss(max_violation=True))
                model.compile(keras.optimizers.Adam(2e-4, global_clipnorm=2.0), jit_compile=True)
            lengths = side.caption_lengths(rng, batch, side.FULL)
            tokens = np.zeros((batch, 32), np.int32)
            for i, length in enumerate(lengths):
                tokens[i, :length] = rng.integers(2, 10_000, size=length)
            x = {"image": rng.random((batch, size, size, 3), dtype=np.float32), "tokens": tokens}
            y = {"image_index": np.arange(batch, dtype="int32")}
            timed(row, model, x, y, batch, step_flops(batch, 32, 300, 1024, 1024, finetune))
        else:
            raise SystemExit(f"unknown row {row!r}")
    keras.mixed_precision.set_global_policy("float32")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("tensorflow", "jax"), default="tensorflow")
    parser.add_argument("--rows", default="clip_infonce,clip_graded_infonce,photo_frozen,photo_finetune",
                        help="--backend=jax: which rows")
    parser.add_argument("--clip_batch", type=int, default=512)
    parser.add_argument("--step", choices=("dual_encoder", "plain"), default="dual_encoder",
                        help="--backend=jax: kitm's DualEncoder, or the same parts in a plain Keras model with kitm's "
                             "loss (keras-hub's CLIP encoders; the photo configuration's ResNet152 + BiGRU)")
    parser.add_argument("--loop", choices=("fit", "train_on_batch"), default="fit",
                        help="--backend=jax: time the step inside model.fit (the training state stays on the device; "
                             "how kitm trains) or one train_on_batch call a step (which also syncs the state back)")
    parser.add_argument("--gru_unroll", action="store_true",
                        help="--backend=jax, photo rows: unroll the GRUs (an experiment)")
    parser.add_argument("--device_data", action="store_true",
                        help="--backend=jax: put the batch on the accelerator once instead of copying it each step")
    parser.add_argument("--trace", default="",
                        help="--backend=jax: a folder; 3 more steps of each row traced there (jax.profiler, Perfetto)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--policy", default="mixed_bfloat16")
    parser.add_argument("--finetune", action="store_true")
    parser.add_argument("--peak_tflops_half", type=float, default=989.0)
    parser.add_argument("--peak_tflops_float32", type=float, default=494.0)
    parser.add_argument("--quick", action="store_true", help="batch 4, 64 px, 2 steps: checks that it runs (CPU)")
    args = parser.parse_args()
    if args.backend == "jax":
        _jax_rows(args)
        return
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

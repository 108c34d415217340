"""Input-pipeline throughput with and without each batch relevance source, against the training step it feeds.

For each relevance source (none, truth, cider, sbert) the script builds `kitm.data.pipeline.training_dataset`
at batch 128 (every caption a sample, as in launch/demo.flags) and prints batches per second over `--batches`
batches after a warm-up, plus the time of the relevance op alone on one batch. It then times the demo model's
training step (small CNN + BiGRU, triplet) on the same batches, so the last column says whether the pipeline
keeps up: the pipeline must deliver batches at least as fast as the step consumes them.

The data is a synthetic world with every relevance row (`--num_scenes`, built under `--data_dir` when absent).
Other jobs on the machine share its cores; the script prints the load average it ran under.

    python benchmarks/bench_pipeline.py [--data_dir /tmp/kitm_bench/synthetic] [--num_scenes 3000] [--batches 40]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import kitm  # noqa: F401,E402  (selects the TensorFlow backend)
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from kitm.data import schema  # noqa: E402
from kitm.data.pipeline import (PipelineConfig, batch_relevance_matrix, batched_samples,  # noqa: E402
                                training_captions, training_dataset)
from kitm.layers import CaptionTokenizer, build_vocabulary  # noqa: E402

SOURCES = ("none", "truth", "cider", "sbert")


def ensure_data(data_dir: pathlib.Path, num_scenes: int) -> None:
    if (data_dir / schema.INFO_FILE).is_file():
        return
    from kitm.data.synthetic_records import build_synthetic

    started = time.perf_counter()
    build_synthetic(data_dir, num_scenes=num_scenes, seed=0, image_size=48, relevance=("cider", "sbert"))
    print(f"built {data_dir} in {time.perf_counter() - started:.1f} s")


def config_for(source: str, batch: int) -> PipelineConfig:
    return PipelineConfig(batch_size=batch, image_size=48, captions="all", relevance=source, flip=False,
                          eval_crop_fraction=1.0, seed=0, cache=True)


def batches_per_second(dataset: tf.data.Dataset, batches: int) -> float:
    iterator = iter(dataset.repeat())
    for _ in range(5):  # warm-up: tracing, cache filling
        next(iterator)
    started = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    return batches / (time.perf_counter() - started)


def relevance_op_ms(data_dir, tokenizer, source: str, batch: int, info) -> float:
    """Milliseconds of the relevance matrix alone, on one batch's raw samples, in a tf.function."""
    if source == "none":
        return 0.0
    _, samples = batched_samples(data_dir, "train", config_for(source, batch))
    sample = next(iter(samples))
    compute = tf.function(lambda b: batch_relevance_matrix(b, source, info, 1))
    compute(sample)
    started = time.perf_counter()
    for _ in range(20):
        compute(sample)
    return (time.perf_counter() - started) / 20 * 1e3


def training_step_seconds(dataset: tf.data.Dataset, tokenizer, steps: int) -> float:
    import keras

    from kitm.layers import GRUTextEncoder, build_image_encoder
    from kitm.losses import TripletLoss
    from kitm.models import DualEncoder

    image_encoder = build_image_encoder("small_cnn", image_size=48)
    text_encoder = GRUTextEncoder(tokenizer.vocabulary_size, 64, 128)
    model = DualEncoder(image_encoder, text_encoder, 256)
    model.build_from_inputs(dataset.element_spec[0])
    model.compile(keras.optimizers.Adam(2e-3), losses={"triplet": TripletLoss(0.2, max_violation=False)})
    batches = list(dataset.take(steps + 3))
    for x, y in batches[:3]:
        model.train_on_batch(x, y)
    started = time.perf_counter()
    for x, y in batches[3:]:
        model.train_on_batch(x, y)
    return (time.perf_counter() - started) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data_dir", default="/tmp/kitm_bench/synthetic")
    parser.add_argument("--num_scenes", type=int, default=3000)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--steps", type=int, default=15)
    args = parser.parse_args()
    data_dir = pathlib.Path(args.data_dir)
    ensure_data(data_dir, args.num_scenes)
    info = schema.load_info(data_dir)
    tokenizer = CaptionTokenizer(build_vocabulary(training_captions(data_dir)), max_length=32)
    print(f"load average {os.getloadavg()[0]:.1f}; {os.cpu_count()} cores; batch {args.batch}; "
          f"{info.num_images('train')} training images x {info.captions_per_image} captions")
    step = training_step_seconds(training_dataset(data_dir, "train", tokenizer, config_for("none", args.batch)),
                                 tokenizer, args.steps)
    print(f"demo model training step: {step * 1e3:.0f} ms = {1 / step:.1f} batches/s consumed")
    print(f"{'source':8s} {'batches/s':>10s} {'relevance op':>13s} {'vs none':>8s} {'keeps up':>9s}")
    baseline = None
    for source in SOURCES:
        dataset = training_dataset(data_dir, "train", tokenizer, config_for(source, args.batch))
        rate = batches_per_second(dataset, args.batches)
        baseline = baseline or rate
        op = relevance_op_ms(data_dir, tokenizer, source, args.batch, info)
        print(f"{source:8s} {rate:10.1f} {op:10.1f} ms {rate / baseline:8.2f} {'yes' if rate >= 1 / step else 'NO':>9s}")


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()

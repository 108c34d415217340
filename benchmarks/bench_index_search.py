"""Time building a search index (kitm.index) and answering searches (kitm.search), and the exact/approximate choice.

Three parts, wall seconds printed (the machine's load average is printed with them: on a shared 2-core box the
figures are pessimistic):

1. index build and search latency over a built dataset: ``--data_dir`` and ``--split`` (the demo's world:
   tfrecords/synthetic, split test), and over a synthetic world of ``--num_images`` scenes (default 10,000, all
   splits; built here with the truth only, no relevance rows, at the run's image size). Each build embeds every
   image and caption with the run's SavedModel and writes the faiss indexes; the printed seconds are the
   manifest's (load the model, embed images, embed captions, faiss) and the total. Latency: the median and 90th
   percentile of ``Searcher.search_text`` for the world's own captions (exact truth relevance) and for short free
   queries (CIDEr-D relevance), of ``search_indexed_image`` (captions and images for an indexed image), and of the
   same caption search through the HTTP API of a running uvicorn server (``POST /api/search/text``).
2. exact search's single-query latency over random unit vectors of the model's width at 10k to 200k rows, one
   faiss thread (as the search app runs it): where it stays near 5 ms is ``DEFAULT_EXACT_THRESHOLD``.
3. the HNSW path forced on the 10,000-image index (``exact_threshold=0``): its tuned efSearch, measured recall@10
   and query latency against exact search.

    python benchmarks/bench_index_search.py --run=runs/demo [--data_dir=tfrecords/synthetic] [--num_images=10000]
    python benchmarks/bench_index_search.py --run=runs/demo --quick       # 300 images, fewer queries
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import socket
import statistics
import tempfile
import threading
import time
import urllib.request

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def load_average() -> str:
    return "load average " + " ".join(f"{value:.2f}" for value in os.getloadavg())


def quantiles(seconds: list[float]) -> str:
    ms = sorted(1e3 * s for s in seconds)
    return f"median {statistics.median(ms):.2f} ms, p90 {ms[int(0.9 * (len(ms) - 1))]:.2f} ms over {len(ms)}"


def timed_calls(function, arguments) -> list[float]:
    times = []
    for argument in arguments:
        started = time.perf_counter()
        function(argument)
        times.append(time.perf_counter() - started)
    return times


def read_source(data_dir, split):
    from kitm.index import dataset_source

    started = time.perf_counter()
    source = dataset_source(data_dir, split)
    print(f"  read {source.num_images} images and their captions from {data_dir} in "
          f"{time.perf_counter() - started:.1f} s", flush=True)
    return source


def build(source, export_dir, out, **options) -> dict:
    from kitm.index import BuildOptions, build_index

    manifest = build_index(source, export_dir, out, BuildOptions(progress=False, overwrite=True, **options))
    s = manifest["seconds"]
    print(f"  build: {manifest['num_images']} images, {manifest['num_captions']} captions: total {s['total']:.1f} s "
          f"(load model {s['load_model']:.1f}, embed images {s['embed_images']:.1f}, embed captions "
          f"{s['embed_captions']:.1f}, faiss {s['faiss']:.2f}); images index {manifest['images_index']['kind']}; "
          f"{load_average()}", flush=True)
    return manifest


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http_latency(searcher, queries: list[str]) -> list[float]:
    """Seconds per POST /api/search/text against a uvicorn server in this process (a thread)."""
    import uvicorn

    from kitm.search.app import create_app

    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(searcher), host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    url = f"http://127.0.0.1:{port}/api/search/text"

    def ask(query):
        request = urllib.request.Request(url, json.dumps({"query": query, "k": 10}).encode(),
                                         {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            json.loads(response.read())

    try:
        ask(queries[0])  # warm-up
        return timed_calls(ask, queries)
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def latencies(index_dir, num_queries: int) -> None:
    from kitm.search import Searcher

    searcher = Searcher.open(index_dir)
    captions = [c["text"] for c in searcher.index.captions]
    rng = np.random.default_rng(0)
    own = [captions[i] for i in rng.choice(len(captions), num_queries, replace=False)]
    free = [" ".join(words) for words in zip(*(rng.choice(["a", "red", "blue", "circle", "square", "large", "left",
                                                           "of", "small", "green", "triangle"], num_queries)
                                               for _ in range(4)))]
    images = [int(i) for i in rng.choice(searcher.index.num_images, num_queries, replace=False)]
    for query, image in zip(own[:5], images[:5]):  # warm-up: the first calls fill caches and thread pools
        searcher.search_text(query), searcher.search_text(query + " x"), searcher.search_indexed_image(image)
    print(f"  caption -> images, the world's captions (truth relevance): "
          f"{quantiles(timed_calls(searcher.search_text, own))}", flush=True)
    print(f"  caption -> images, free queries (CIDEr-D relevance): "
          f"{quantiles(timed_calls(searcher.search_text, free))}", flush=True)
    print(f"  image -> captions and images (an indexed image): "
          f"{quantiles(timed_calls(searcher.search_indexed_image, images))}", flush=True)
    print(f"  caption -> images through HTTP (POST /api/search/text): {quantiles(http_latency(searcher, own))}; "
          f"{load_average()}", flush=True)


def exact_threshold_table(dim: int, sizes: list[int]) -> None:
    import faiss

    faiss.omp_set_num_threads(1)
    rng = np.random.default_rng(0)
    for n in sizes:
        rows = rng.standard_normal((n, dim), dtype=np.float32)
        faiss.normalize_L2(rows)
        index = faiss.IndexFlatIP(dim)
        index.add(rows)
        queries = rows[:50] + 0.1 * rng.standard_normal((50, dim), dtype=np.float32)
        seconds = timed_calls(lambda q: index.search(q[None], 10), queries)
        print(f"  exact, {n:>7,} rows x {dim}: {quantiles(seconds)}", flush=True)
    faiss.omp_set_num_threads(os.cpu_count() or 1)


def hnsw_on(index_dir) -> None:
    import faiss

    from kitm.index.vectors import build_vector_index

    images = np.load(pathlib.Path(index_dir) / "image_embeddings.npy")
    captions = np.load(pathlib.Path(index_dir) / "caption_embeddings.npy")
    started = time.perf_counter()
    built = build_vector_index(images, captions, exact_threshold=0)
    seconds = time.perf_counter() - started
    print(f"  HNSW over {len(images):,} image embeddings, tuned on caption queries: built and tuned in {seconds:.1f} s;"
          f" efSearch {built.ef_search}, recall@10 {built.recall:.3f} on {built.recall_queries} held-out queries",
          flush=True)
    faiss.omp_set_num_threads(1)
    exact = faiss.IndexFlatIP(images.shape[1])
    exact.add(images)
    queries = captions[:200]
    for name, index in (("HNSW", built.index), ("exact", exact)):
        print(f"    {name}: {quantiles(timed_calls(lambda q: index.search(q[None], 10), queries))}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", required=True, help="A run directory of python -m kitm.launch (e.g. runs/demo).")
    parser.add_argument("--data_dir", help="A built dataset to index too (the demo's world: tfrecords/synthetic).")
    parser.add_argument("--split", default="test")
    parser.add_argument("--num_images", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--work_dir", help="Where the world and the indexes go (default: a temporary folder).")
    parser.add_argument("--quick", action="store_true", help="300 images, 20 queries, two exact sizes.")
    args = parser.parse_args()
    if args.quick:
        args.num_images, args.queries = 300, 20

    from kitm.data.synthetic_records import build_synthetic
    from kitm.eval.run_dir import default_export_dir, read_summary
    export_dir = default_export_dir(args.run)
    image_size = int(read_summary(args.run).get("flags", {}).get("image_size") or 48)
    work = pathlib.Path(args.work_dir or tempfile.mkdtemp(prefix="kitm_bench_index_"))
    print(f"kitm.index / kitm.search benchmark: model {export_dir}, {os.cpu_count()} cores, {load_average()}")
    if args.data_dir:
        print(f"1a. {args.data_dir}, split {args.split}")
        build(read_source(args.data_dir, args.split), export_dir, work / "index_data")
        latencies(work / "index_data", min(args.queries, 100))
    print(f"1b. a synthetic world of {args.num_images:,} scenes at {image_size} px (truth only), every split")
    world = work / f"world_{args.num_images}"
    started = time.perf_counter()
    build_synthetic(world, num_scenes=args.num_images, seed=1, image_size=image_size, relevance=(), progress=False)
    print(f"  world generated and written in {time.perf_counter() - started:.1f} s (not part of the index build)")
    manifest = build(read_source(world, "all"), export_dir, work / "index_world")
    latencies(work / "index_world", args.queries)
    print("2. exact search, one query, one faiss thread")
    exact_threshold_table(manifest["model"]["embedding_dim"], [10_000, 30_000] if args.quick else
                          [10_000, 50_000, 100_000, 200_000])
    print("3. HNSW forced on the world's index")
    hnsw_on(work / "index_world")
    print(f"done; {load_average()}")


if __name__ == "__main__":
    main()

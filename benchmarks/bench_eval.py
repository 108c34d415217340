"""Time kitm.eval's metric suite on random data at Flickr/COCO-1K and COCO-5K scale.

Suite: ``evaluate`` with a relevance matrix (R@K, R^V@K, medr, meanr, mAP, NCS@K, SR@K, both
directions, K = 1, 5, 10) and CS@K on one caption per image in both directions at the paper's
cut-offs (100/1000 on 1K sets, 500/5000 on 5K). Prints wall seconds per part, the suite total
and peak resident memory (ru_maxrss). Wall time is shared with whatever else runs on the
machine, so figures on a busy 2-core box are pessimistic.

    python benchmarks/bench_eval.py [--sizes 1000x5000,5000x25000]
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np

import kitm.eval as keval

CPI = 5
CS_CUTOFFS = {1000: (100, 1000), 5000: (500, 5000)}


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2


def current_rss_gb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024**2
    return float("nan")


def timed(label: str, fn):
    start = time.perf_counter()
    cpu_start = time.process_time()
    value = fn()
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu_start
    print(f"  {label:<44s} {wall:7.2f} s wall  {cpu:7.2f} s cpu")
    return value, wall


def run(num_images: int) -> None:
    num_captions = num_images * CPI
    rng = np.random.default_rng(0)
    sims = rng.standard_normal((num_images, num_captions), dtype=np.float32)
    # CIDEr-like: non-negative, many small values, own captions most relevant.
    relevance = rng.random((num_captions, num_images))
    np.power(relevance, 4, out=relevance)  # in place: no second 1 GB temporary at 5K
    relevance[np.arange(num_captions), np.arange(num_captions) // CPI] += 1.0
    print(f"{num_images} images x {num_captions} captions (sims float32, relevance float64)")
    print(f"  resident after building the inputs           {current_rss_gb():7.2f} GB")

    _, t_binary = timed("evaluate, no relevance (R, R^V, medr, mAP)", lambda: keval.evaluate(sims))
    results, t_full = timed(
        "evaluate with relevance (+ NCS, SR)", lambda: keval.evaluate(sims, relevance=relevance)
    )
    ks = CS_CUTOFFS.get(num_images, (min(100, num_images), num_images))
    first = sims[:, ::CPI]  # one caption per image: [images, captions]
    first_relevance = relevance[::CPI]  # [captions, images]
    cs_i2t, t_i2t = timed(
        f"CS@{ks} i2t", lambda: keval.coherent_score(first, first_relevance.T, ks)
    )
    cs_t2i, t_t2i = timed(
        f"CS@{ks} t2i", lambda: keval.coherent_score(first.T, first_relevance, ks)
    )
    total = t_full + t_i2t + t_t2i
    print(f"  suite total (evaluate with relevance + CS)   {total:7.2f} s")
    print(f"  NCS+SR share of evaluate                     {t_full - t_binary:7.2f} s")
    print(f"  peak RSS of the process so far               {peak_rss_gb():7.2f} GB")
    print(
        "  sample figures: i2t R@1 %.2f, NCS@10 %.2f, SR@10 %.2f, mAP %.2f; CS i2t %s"
        % (
            results["i2t"]["recall"][1],
            results["i2t"]["ncs"][10],
            results["i2t"]["semantic_recall"][10],
            results["i2t"]["map"],
            {k: round(v, 4) for k, v in cs_i2t.items()},
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000x5000,5000x25000", help="images x captions, comma separated")
    args = parser.parse_args()
    for size in args.sizes.split(","):
        images, captions = (int(v) for v in size.lower().split("x"))
        if captions != images * CPI:
            raise SystemExit(f"size {size}: captions must be {CPI} x images")
        run(images)


if __name__ == "__main__":
    main()

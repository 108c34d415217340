"""Speed and memory of kitm.relevance.cider_matrix against pycocoevalcap's per-pair CiderScorer.

Two matrices, every caption against every image's captions (the NCS relevance matrix):
  * Flickr8K test: 5000 captions x 1000 images (Flickr_8k.testImages.txt).
  * COCO-5K size: 25000 captions x 5000 images. There is no COCO here, so it is built from
    Flickr8K captions: all 8091 Flickr8K images, shuffled with a fixed seed and repeated until
    5000 images are drawn; repeated images get their captions' word order lightly perturbed (two
    adjacent words swapped) so that they are not exact copies. Caption statistics (length,
    vocabulary) are Flickr8K's, not COCO's.

pycocoevalcap's scorer is timed on a random sample of pairs (each pair scored as one
CiderScorer item, with the document frequency of the whole matrix's groups injected so the work
per pair is what a per-pair loop would do) and extrapolated to the full matrix. The idf set-up it
would need is not charged to it. Normalisation (pure-Python PTB) is included in kitm's time and
also printed on its own.

Run:  python benchmarks/bench_cider.py [--skip-coco] [--pairs 2000]
The machine has 2 cores shared with other jobs: figures are pessimistic.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import sys
import time

import numpy as np

import kitm  # noqa: F401  (sets the Keras backend before anything else)
from kitm.relevance.cider import cider_matrix
from kitm.relevance.text_normalization import ptb_normalize

DATA = "/work/shared/data/flickr8k"


def load_captions() -> dict[str, list[str]]:
    captions: dict[str, list[str]] = {}
    with open(os.path.join(DATA, "Flickr8k.token.txt"), encoding="utf-8") as stream:
        for line in stream:
            key, caption = line.rstrip("\n").split("\t")
            captions.setdefault(key.split("#")[0], []).append(caption)
    return captions


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def perturb(caption: str, rng: random.Random) -> str:
    words = caption.split()
    if len(words) > 3:
        i = rng.randrange(len(words) - 2)
        words[i], words[i + 1] = words[i + 1], words[i]
    return " ".join(words)


def coco_sized(captions: dict[str, list[str]], num_images: int = 5000) -> list[list[str]]:
    rng = random.Random(0)
    keys = sorted(captions)
    groups: list[list[str]] = []
    seen: set[str] = set()
    while len(groups) < num_images:
        rng.shuffle(keys)
        for key in keys:
            if len(groups) == num_images:
                break
            group = captions[key][:5]
            groups.append([perturb(c, rng) for c in group] if key in seen else list(group))
            seen.add(key)
    return groups


def pycocoevalcap_seconds_per_pair(hypotheses: list[str], groups: list[list[str]], pairs: int) -> float:
    """Seconds per (hypothesis, group) pair of pycocoevalcap's CiderScorer, on normalised text."""
    from collections import defaultdict

    from pycocoevalcap.cider.cider_scorer import CiderScorer, cook_refs

    normalized_groups = [[ptb_normalize(c) for c in g] for g in groups]
    frequency: defaultdict[tuple[str, ...], float] = defaultdict(float)
    for group in normalized_groups:
        for gram in {g for ref in cook_refs(group) for g in ref}:
            frequency[gram] += 1
    rng = random.Random(1)
    sample = [(rng.randrange(len(hypotheses)), rng.randrange(len(groups))) for _ in range(pairs)]
    scorer = CiderScorer(n=4, sigma=6.0)
    for h, g in sample:
        scorer += (ptb_normalize(hypotheses[h]), normalized_groups[g])
    scorer.document_frequency = frequency
    # compute_cider sets ref_len = log(#items) = log(pairs), so the idf offset differs from the
    # full matrix's, but the per-pair work (what is timed) is the same.
    start = time.perf_counter()
    scorer.compute_cider()
    return (time.perf_counter() - start) / pairs


def run(name: str, hypotheses: list[str], groups: list[list[str]], pairs: int, repeat: int) -> None:
    print(f"== {name}: {len(hypotheses)} captions x {len(groups)} groups "
          f"({sum(len(g) for g in groups)} references)")
    timings, normalize_timings = [], []
    for _ in range(repeat):
        ptb_normalize.cache_clear()
        start = time.perf_counter()
        for caption in set(hypotheses) | {c for g in groups for c in g}:
            ptb_normalize(caption)
        normalize_timings.append(time.perf_counter() - start)
        ptb_normalize.cache_clear()
        start = time.perf_counter()
        matrix = cider_matrix(hypotheses, groups)
        timings.append(time.perf_counter() - start)
    seconds = min(timings)
    print(f"kitm cider_matrix: best {seconds:.2f} s of {repeat} (all: {', '.join(f'{t:.2f}' for t in timings)}; "
          f"PTB normalisation alone ~{min(normalize_timings):.2f} s), peak RSS so far {peak_rss_gb():.2f} GB, "
          f"matrix {matrix.shape} mean {matrix.mean():.4f}")
    per_pair = pycocoevalcap_seconds_per_pair(hypotheses, groups, pairs)
    total = per_pair * len(hypotheses) * len(groups)
    print(f"pycocoevalcap CiderScorer: {per_pair * 1e6:.1f} us/pair on {pairs} sampled pairs -> "
          f"{total:.0f} s ({total / 3600:.2f} h) extrapolated; ratio {total / seconds:.0f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--skip-coco", action="store_true")
    parser.add_argument("--pairs", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of the Flickr8K matrix (best kept)")
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, numpy {np.__version__}, cores {os.cpu_count()}, "
          f"load average {os.getloadavg()[0]:.1f}")
    ptb_normalize("Warm the normaliser once before timing.")
    captions = load_captions()
    with open(os.path.join(DATA, "Flickr_8k.testImages.txt"), encoding="utf-8") as stream:
        test = [line.strip() for line in stream if line.strip()]
    groups = [captions[key][:5] for key in test]
    run("Flickr8K test", [c for g in groups for c in g], groups, args.pairs, args.repeat)
    if not args.skip_coco:
        groups = coco_sized(captions)
        run("COCO-5K size (Flickr8K captions, see docstring)", [c for g in groups for c in g], groups,
            args.pairs, 1)


if __name__ == "__main__":
    main()

"""Validation-split differences against the triplet (same seed), mean over the seeds evaluated, per configuration."""
import json
import os

import numpy as np

OUT = "studies/claims/ladder_diagnosis/out"
KEYS = ["i2t_CS@100", "t2i_CS@100", "i2t_NCS@10", "t2i_NCS@10", "i2t_mAP_at_R", "t2i_mAP_at_R", "fold100_i2t_R@1",
        "fold100_t2i_R@1"]


def figures(configuration, seed):
    path = f"{OUT}/val_{configuration}_{seed}.json"
    return json.load(open(path))["flat"] if os.path.exists(path) else None


baseline = {seed: figures("triplet", seed) for seed in range(4)}
for configuration in ["sam_truth", "ladder_adaptive_truth", "bounds26", "hardest", "fixed3"]:
    rows = [[run[k] - baseline[seed][k] for k in KEYS] for seed in range(4)
            if (run := figures(configuration, seed)) and baseline[seed]]
    if rows:
        means = np.mean(rows, axis=0)
        print(f"{configuration:22s} n={len(rows)} " + "  ".join(f"{k} {m:+.4f}" for k, m in zip(KEYS, means)))

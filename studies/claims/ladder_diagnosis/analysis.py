"""Where the adaptive ladder's t2i CS@100 falls: per caption query (the first caption of each validation image, as
CS uses), the ladder-truth minus triplet difference averaged over seeds 0-3, grouped by how many validation images
the caption fits exactly (truth relevance >= 1) or partly (0.5 <= relevance < 1). Run val_evals.sh first."""
import numpy as np

from kitm.data.split_reading import read_split
from kitm.eval.split_relevance import split_relevance

OUT = "studies/claims/ladder_diagnosis/out"
relevance = np.asarray(split_relevance(read_split("tfrecords/claims_features", "val"), "truth"))  # [captions, images]
first = relevance[::5]  # the CS query of each image: its first caption
exact, partial = (first >= 1).sum(1), ((first >= 0.5) & (first < 1)).sum(1)


def per_query(configuration, metric):
    return np.mean([np.load(f"{OUT}/val_{configuration}_{seed}.per_query.npz")[metric] for seed in range(4)], axis=0)


base = per_query("triplet", "t2i_CS@100")
difference = per_query("ladder_adaptive_truth", "t2i_CS@100") - base
print(f"all: triplet {np.nanmean(base):.3f}, ladder - triplet {np.nanmean(difference):+.4f}")
for name, counts, groups in (("exact fits", exact, [(1, 1), (2, 2), (3, 5), (6, 20), (21, 1000)]),
                             ("partial fits", partial, [(0, 50), (51, 150), (151, 300), (301, 1000)])):
    for low, high in groups:
        rows = (counts >= low) & (counts <= high)
        print(f"{name} {low}-{high}: {rows.sum()} captions, triplet {np.nanmean(base[rows]):.3f}, "
              f"ladder - triplet {np.nanmean(difference[rows]):+.4f}")

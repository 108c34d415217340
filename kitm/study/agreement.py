"""How well an imperfect relevance source ranks (caption, image) pairs the way the exact truth does.

For one split, with N[c, i] the relevance of caption c to image i under a source (``kitm.eval.relevance_sources``:
CIDEr-D against the image's captions, the mean sentence-embedding cosine to them, ...) and T[c, i] the synthetic
world's exact relevance, three Kendall tau-b figures:

- ``all_pairs``: tau-b between N and T over every (caption, image) pair (``scipy.stats.kendalltau``), the figure
  that human-judgement studies of relevance sources report (Flickr8K expert judgements: sentence embeddings about
  0.62, CIDEr-D about 0.50);
- ``per_caption``: the mean over captions c of tau-b between N[c, :] and T[c, :] (does the source rank the images of
  one caption query as the truth does; ``kitm.eval.kendall.kendall_tau_b``, vectorised over rows);
- ``per_image``: the same down the columns (the captions of one image query).
A row whose values are all tied has no tau-b (NaN) and is left out of the mean; ``rows_without_tau`` counts them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np


def tau_b_figures(source: np.ndarray, reference: np.ndarray) -> dict[str, float | int]:
    """The three figures of the module docstring for two [captions, images] matrices."""
    from scipy import stats

    from kitm.eval.kendall import kendall_tau_b

    source, reference = np.asarray(source, np.float64), np.asarray(reference, np.float64)
    if source.shape != reference.shape or source.ndim != 2:
        raise ValueError(f"relevance matrices must be [captions, images] of one shape; got {source.shape} and "
                         f"{reference.shape}.")
    per_caption = kendall_tau_b(source, reference)
    per_image = kendall_tau_b(source.T, reference.T)
    undefined = int(np.isnan(per_caption).sum() + np.isnan(per_image).sum())
    return {"all_pairs": float(stats.kendalltau(source.ravel(), reference.ravel(), variant="b").statistic),
            "per_caption": float(np.nanmean(per_caption)) if np.isfinite(per_caption).any() else float("nan"),
            "per_image": float(np.nanmean(per_image)) if np.isfinite(per_image).any() else float("nan"),
            "rows_without_tau": undefined}


def relevance_agreement(data_dir: str | os.PathLike, split: str = "test", sources: Sequence[str] = ("cider", "sbert"),
                        reference: str = "truth") -> dict[str, object]:
    """{"data_dir", "split", "reference", "captions", "images", "sources": {source: tau_b_figures}} of a split."""
    from kitm.data.split_reading import read_split
    from kitm.eval.split_relevance import split_relevance

    data = read_split(data_dir, split, with_images=False)
    truth = split_relevance(data, reference)
    figures = {source: tau_b_figures(split_relevance(data, source), truth) for source in sources}
    return {"data_dir": str(data_dir), "split": split, "reference": reference, "captions": int(truth.shape[0]),
            "images": int(truth.shape[1]), "sources": figures}

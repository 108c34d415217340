"""How much a set of captions looks like real ones: the figures `python -m kitm.data.world_stats` compares.

Input: captions grouped by image (``groups[i]`` = image i's captions, at least two). Figures:

- **sentence-embedding relevance** (cosine of all-MiniLM-L6-v2 embeddings, the ladder loss's and SAM's sentence
  relevance): of *matching* pairs, each image's first caption against its own second caption, and of
  *non-matching* pairs, each image's first caption against every other image's second caption; mean, quantiles and
  the shares at or above 0.4 and 0.6; the *contrast* is the matching mean minus the non-matching mean;
- **CIDEr-D** of each image's first caption against the other images' remaining captions (non-matching) and its
  own (matching), the document frequencies from those groups (`kitm.relevance.cider_matrix`);
- **vocabulary**: distinct lower-case words (``[a-z]+``) in the captions of the first ``vocabulary_images`` images,
  so that two sources are compared on equal image counts;
- **length**: words (``[a-z0-9']+``) per caption; **duplicates**: the share of captions that repeat an earlier
  caption of the same source word for word (case and punctuation ignored);
- against a reference: the **Kolmogorov-Smirnov distance** between the two non-matching distributions (scipy's
  two-sample statistic: the largest gap between their cumulative distributions).

``WORLD_GOALS`` are the things world's calibration goals against Flickr8K's test captions (docs/demo.md).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

import numpy as np

_WORD = re.compile(r"[a-z]+")
_TOKEN = re.compile(r"[a-z0-9']+")
QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)


@dataclasses.dataclass
class CaptionStats:
    """The figures of one source of captions (module docstring); ``non_matching_values`` are kept for the KS
    distance and the figure."""

    name: str
    images: int
    captions: int
    non_matching: dict
    matching: dict
    contrast: float
    cider_non_matching: float
    cider_matching: float
    vocabulary: int
    vocabulary_images: int
    length_mean: float
    length_median: float
    duplicate_rate: float
    non_matching_values: np.ndarray = dataclasses.field(repr=False, default_factory=lambda: np.zeros(0))

    def as_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out.pop("non_matching_values")
        return out


def _summary(values: np.ndarray) -> dict:
    return {"mean": float(values.mean()), "quantiles": {str(q): float(v) for q, v in
                                                       zip(QUANTILES, np.quantile(values, QUANTILES))},
            "share_at_least_0.4": float((values >= 0.4).mean()), "share_at_least_0.6": float((values >= 0.6).mean())}


def _checked_groups(groups: Sequence[Sequence[str]], name: str) -> list[list[str]]:
    kept = [list(g) for g in groups if len(g) >= 2]
    if len(kept) < 2:
        raise ValueError(f"{name}: the statistics need at least two images with two captions or more; got "
                         f"{len(kept)} of {len(groups)} images.")
    return kept


def vocabulary_size(groups: Sequence[Sequence[str]], images: int) -> int:
    """Distinct lower-case words of the captions of the first ``images`` images."""
    return len({word for group in groups[:images] for caption in group for word in _WORD.findall(caption.lower())})


def _duplicate_rate(captions: Sequence[str]) -> float:
    normalised = [" ".join(_TOKEN.findall(caption.lower())) for caption in captions]
    return 1.0 - len(set(normalised)) / len(normalised)


def caption_statistics(groups: Sequence[Sequence[str]], *, name: str, vocabulary_images: int = 300,
                       sentence_model=None) -> CaptionStats:
    """The figures of the module docstring for ``groups`` (images with fewer than two captions are left out)."""
    from kitm.relevance import cider_matrix, sentence_embeddings

    groups = _checked_groups(groups, name)
    first = sentence_embeddings([g[0] for g in groups], model=sentence_model)
    second = sentence_embeddings([g[1] for g in groups], model=sentence_model)
    similarity = first @ second.T
    off = ~np.eye(len(groups), dtype=bool)
    non_matching, matching = similarity[off], np.diag(similarity)
    cider = cider_matrix([g[0] for g in groups], [g[1:] for g in groups])
    captions = [caption for group in groups for caption in group]
    lengths = np.array([len(_TOKEN.findall(caption.lower())) for caption in captions])
    return CaptionStats(
        name=name, images=len(groups), captions=len(captions), non_matching=_summary(non_matching),
        matching=_summary(matching), contrast=float(matching.mean() - non_matching.mean()),
        cider_non_matching=float(cider[off].mean()), cider_matching=float(np.diag(cider).mean()),
        vocabulary=vocabulary_size(groups, vocabulary_images), vocabulary_images=min(vocabulary_images, len(groups)),
        length_mean=float(lengths.mean()), length_median=float(np.median(lengths)),
        duplicate_rate=_duplicate_rate(captions), non_matching_values=non_matching.astype(np.float32))


def ks_distance(stats: CaptionStats, reference: CaptionStats) -> float:
    """The two-sample Kolmogorov-Smirnov statistic between the two non-matching distributions."""
    from scipy.stats import ks_2samp

    return float(ks_2samp(stats.non_matching_values, reference.non_matching_values).statistic)


# The things world's calibration goals against Flickr8K's test captions (issue: "a world whose captions look like
# real ones"): (name, how to read it from (stats, reference), comparison, bound).
WORLD_GOALS = (
    ("non-matching mean <= 0.15", lambda s, r: s.non_matching["mean"], "<=", 0.15),
    ("non-matching share >= 0.4 at most 5%", lambda s, r: s.non_matching["share_at_least_0.4"], "<=", 0.05),
    ("matching minus non-matching >= 0.35", lambda s, r: s.contrast, ">=", 0.35),
    ("KS distance to the reference <= 0.2", lambda s, r: ks_distance(s, r), "<=", 0.2),
    ("vocabulary at least half the reference's", lambda s, r: s.vocabulary / max(r.vocabulary, 1), ">=", 0.5),
)


def goals(stats: CaptionStats, reference: CaptionStats) -> list[tuple[str, float, bool]]:
    """(goal, value, met) for each of ``WORLD_GOALS``; the vocabularies must be counted on equal image counts."""
    if stats.vocabulary_images != reference.vocabulary_images:
        raise ValueError(f"The vocabularies were counted on {stats.vocabulary_images} and "
                         f"{reference.vocabulary_images} images; compare them on equal counts (--vocabulary_images).")
    out = []
    for goal, value_of, comparison, bound in WORLD_GOALS:
        value = float(value_of(stats, reference))
        out.append((goal, value, value <= bound if comparison == "<=" else value >= bound))
    return out

"""`python -m kitm.data.world_stats`: how much a dataset's captions look like real captions.

It prints, for a built dataset or a synthetic world generated in memory, beside a reference (Flickr8K's test
captions, your own caption table, another dataset): the sentence-embedding relevance of matching and non-matching
caption pairs, CIDEr-D among them, the vocabulary on equal image counts, caption lengths, the duplicate rate and the
Kolmogorov-Smirnov distance between the non-matching distributions, and whether the things world's calibration goals
hold (docs/demo.md, "How real are the captions?"). One job per module: `sources` (captions by image), `statistics`
(the figures and the goals), `report` (the table and the figure), `cli`.
"""

from kitm.data.world_stats.report import comparison_table, goals_table, plot_distributions
from kitm.data.world_stats.sources import dataset_groups, reference_groups, world_groups
from kitm.data.world_stats.statistics import WORLD_GOALS, CaptionStats, caption_statistics, goals, ks_distance

__all__ = ["CaptionStats", "WORLD_GOALS", "caption_statistics", "comparison_table", "dataset_groups", "goals",
           "goals_table", "ks_distance", "plot_distributions", "reference_groups", "world_groups"]

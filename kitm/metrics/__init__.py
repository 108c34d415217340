"""kitm.metrics: Keras metrics computed during training from a batch (`DualEncoder.compile(monitors=)`)."""

from kitm.metrics.collapse import COLLAPSE_THRESHOLD, EmbeddingCollapse, mean_pairwise_cosine
from kitm.metrics.relevance_statistics import RelevanceStatistics

__all__ = ["COLLAPSE_THRESHOLD", "EmbeddingCollapse", "mean_pairwise_cosine", "RelevanceStatistics"]

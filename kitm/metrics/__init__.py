"""kitm.metrics: Keras metrics computed during training from a batch's embeddings (`DualEncoder.compile(monitors=)`)."""

from kitm.metrics.collapse import COLLAPSE_THRESHOLD, EmbeddingCollapse, mean_pairwise_cosine

__all__ = ["COLLAPSE_THRESHOLD", "EmbeddingCollapse", "mean_pairwise_cosine"]

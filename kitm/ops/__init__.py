"""Small numeric kernels shared by losses and evaluation."""

from kitm.ops.kmeans1d import KMeans1DCandidates, auto_kmeans_1d, kmeans_1d_candidates
from kitm.ops.similarity import cosine_similarity_matrix, negative_mask, same_image_mask

__all__ = ["KMeans1DCandidates", "auto_kmeans_1d", "kmeans_1d_candidates", "cosine_similarity_matrix",
           "negative_mask", "same_image_mask"]

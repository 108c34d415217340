"""Relevance sources: CIDEr-D (exact, vectorised), caption normalisation, sentence embeddings, nearest-neighbour
rows (caption and image space), SPICE. Importing this package loads only numpy; torch, faiss, pycocoevalcap and
TensorFlow (image features) load on first use."""

from kitm.relevance.cider import DocumentFrequency, cider_matrix, ngram_counts
from kitm.relevance.image_features import ImageNeighborOptions
from kitm.relevance.neighbors import (DEFAULT_EXACT_THRESHOLD, approximate_nearest_neighbors, approximate_recall,
                                      exact_nearest_neighbors, nearest_neighbors)
from kitm.relevance.sentence import DEFAULT_SENTENCE_MODEL, load_sentence_model, sentence_embeddings
from kitm.relevance.spice import (SpiceUnavailableError, check_spice_available, spice_matrix,
                                  spice_missing_requirements)
from kitm.relevance.text_normalization import normalize_captions, ptb_normalize, ptb_normalize_java, ptb_tokenize

__all__ = ["DocumentFrequency", "cider_matrix", "ngram_counts", "ImageNeighborOptions", "normalize_captions",
           "ptb_normalize", "ptb_normalize_java", "ptb_tokenize", "DEFAULT_EXACT_THRESHOLD",
           "approximate_nearest_neighbors", "approximate_recall", "exact_nearest_neighbors", "nearest_neighbors",
           "DEFAULT_SENTENCE_MODEL",
           "load_sentence_model", "sentence_embeddings", "SpiceUnavailableError", "check_spice_available",
           "spice_matrix", "spice_missing_requirements"]

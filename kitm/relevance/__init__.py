"""Relevance sources: CIDEr-D (exact, vectorised) and caption normalisation."""

from kitm.relevance.cider import DocumentFrequency, cider_matrix, ngram_counts
from kitm.relevance.text_normalization import normalize_captions, ptb_normalize, ptb_normalize_java, ptb_tokenize

__all__ = ["DocumentFrequency", "cider_matrix", "ngram_counts", "normalize_captions", "ptb_normalize",
           "ptb_normalize_java", "ptb_tokenize"]

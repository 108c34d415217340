"""Search indexes over a model's embeddings: build one from a folder of photos or a built dataset
(``python -m kitm.index``, :func:`build_index`), read one (:func:`load_index`); ``kitm.search`` serves it."""

from kitm.index.build import BuildOptions, build_index
from kitm.index.sources import IndexSource, dataset_source, folder_source, open_source
from kitm.index.store import Index, load_index
from kitm.index.vectors import DEFAULT_EXACT_THRESHOLD, build_vector_index

__all__ = ["BuildOptions", "build_index", "IndexSource", "dataset_source", "folder_source", "open_source", "Index",
           "load_index", "DEFAULT_EXACT_THRESHOLD", "build_vector_index"]

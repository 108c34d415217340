"""Searching an index (``kitm.index``) by caption or by image: :class:`Searcher` answers queries with graded
relevance where the index knows it; ``python -m kitm.search`` serves a web page and a JSON API over it."""

from kitm.search.engine import MAX_QUERY_CHARS, MAX_RESULTS, MAX_UPLOAD_BYTES, QueryError, Searcher

__all__ = ["MAX_QUERY_CHARS", "MAX_RESULTS", "MAX_UPLOAD_BYTES", "QueryError", "Searcher"]

"""The search behind the page and its JSON API: a caption finds images, an image finds captions (and images).

`Searcher.open(index_dir)` loads an index (``kitm.index``) and the SavedModel it was built with, and refuses a
SavedModel with another fingerprint: its queries would land in another embedding space. Every query is checked
before it reaches the model, and a bad one raises `QueryError` with a message for the person who typed it and the
HTTP status the app answers with; the searcher stays usable.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import os
import pathlib
import threading
import time

import numpy as np

from kitm.errors import KitmDataError, KitmError
from kitm.index.sources import MAX_IMAGE_PIXELS
from kitm.search.batching import QueryBatcher
from kitm.search.relevance import image_queries_relevance, normalized, text_queries_relevance
from kitm.search.settings import ServingSettings

MAX_QUERY_CHARS = 1000
MAX_RESULTS = 100
MAX_UPLOAD_BYTES = 20 * 2**20
# Uploads decoded at once: each may take up to MAX_IMAGE_PIXELS x 4 bytes (160 MB) and a copy or two while Pillow
# turns it upright; the others wait their turn, so a burst of uploads cannot add more than about 1 GB.
MAX_DECODES_IN_FLIGHT = 2


class QueryError(KitmError, ValueError):
    """A query the searcher cannot answer; `status` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


@dataclasses.dataclass
class Searcher:
    """An index and its model, ready to answer queries (thread-safe). Queries reach the model and faiss through
    dynamic batchers (`kitm.search.batching`): those that arrive together are encoded and searched in one call."""

    index: object
    model: object
    export_dir: pathlib.Path
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    _decoding: threading.BoundedSemaphore = dataclasses.field(
        default_factory=lambda: threading.BoundedSemaphore(MAX_DECODES_IN_FLIGHT))
    _caption_rows: dict = dataclasses.field(default_factory=dict)
    _digests: dict = dataclasses.field(default_factory=dict)
    vocabulary: frozenset | None = None
    settings: ServingSettings = dataclasses.field(default_factory=ServingSettings)
    _batchers: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def open(cls, index_dir: str | os.PathLike, export_dir: str | os.PathLike | None = None,
             settings: ServingSettings | None = None) -> Searcher:
        """Load the index at `index_dir` and its SavedModel (`export_dir`: another copy of the same model)."""
        from kitm.index import load_index
        from kitm.index.model import load_model, model_fingerprint

        index = load_index(index_dir)
        recorded = index.manifest["model"]
        export_dir = pathlib.Path(export_dir or recorded["export_dir"])
        if not (export_dir / "saved_model.pb").is_file():
            raise KitmDataError(f"The index at {index_dir} was built with the SavedModel {recorded['export_dir']}, "
                                f"which is not at {export_dir} any more: pass --export_dir=<that SavedModel, moved>.")
        fingerprint = model_fingerprint(export_dir)
        if fingerprint != recorded["fingerprint"]:
            raise KitmDataError(
                f"The index at {index_dir} was built with another model ({recorded['export_dir']}, fingerprint "
                f"{recorded['fingerprint']}) than the SavedModel at {export_dir} (fingerprint {fingerprint}): its "
                "queries would land in another embedding space. Rebuild the index with this model (python -m "
                f"kitm.index --export_dir={export_dir} ...), or serve it with the model it was built with.")
        from kitm.index.model import model_vocabulary

        model = load_model(export_dir)
        searcher = cls(index=index, model=model, export_dir=export_dir, vocabulary=model_vocabulary(model),
                       settings=settings or ServingSettings())
        probe = searcher._embed_text("a")
        if probe.shape[-1] != index.embedding_dim:
            raise KitmDataError(f"The SavedModel at {export_dir} embeds into {probe.shape[-1]} dimensions but the "
                                f"index at {index_dir} holds {index.embedding_dim}: rebuild the index.")
        if index.captions:
            for row, caption in enumerate(index.captions):
                searcher._caption_rows.setdefault(normalized(caption["text"]), row)
        searcher._digests = {image["sha256"]: position for position, image in enumerate(index.images)}
        return searcher

    # --- the model and faiss, batched ------------------------------------------------------------------------------
    def _batcher(self, kind: str) -> QueryBatcher:
        """The batcher of one kind of query ("text", "image", "search"), started on first use."""
        with self._lock:
            if kind not in self._batchers:
                work = {"text": self._text_batch, "image": self._image_batch, "search": self._search_batch}[kind]
                self._batchers[kind] = QueryBatcher(work, self.settings, name=kind)
            return self._batchers[kind]

    def _text_batch(self, items: list[tuple[str, int]]) -> list[tuple]:
        """(embedding, words, image positions, scores, graded relevance) of each (caption, k): one model call, one
        faiss search a k, one relevance matrix for the batch."""
        from kitm.index.model import embed_texts, queries_words

        texts = [text for text, _ in items]
        vectors = embed_texts(self.model, texts)
        words = queries_words(texts) if self.vocabulary is not None else [None] * len(texts)
        found = self._search_by_k(self.index.image_index, vectors, [k for _, k in items])
        matched = [self._caption_rows.get(normalized(text)) for text in texts]
        graded = text_queries_relevance(self.index, texts, matched, [positions for positions, _ in found])
        return [(vector, row_words, positions, scores, row_graded, row_matched) for vector, row_words,
                (positions, scores), row_graded, row_matched in zip(vectors, words, found, graded, matched)]

    def _image_batch(self, images: list[bytes]) -> np.ndarray:
        from kitm.index.model import embed_images

        return embed_images(self.model, images)

    def _search_batch(self, items: list[tuple[np.ndarray, int, int | None]]) -> list[tuple]:
        """(caption rows, their scores, their graded relevance, image positions, their scores) of each (image
        embedding, k, the image's position in the index or None)."""
        vectors = np.stack([vector for vector, _, _ in items]).astype(np.float32)
        ks = [k for _, k, _ in items]
        images = self._search_by_k(self.index.image_index, vectors, ks)
        if not self.index.captions:
            empty = (np.zeros(0, np.int64), np.zeros(0, np.float32), None)
            return [(*empty, *image_hits) for image_hits in images]
        captions = self._search_by_k(self.index.caption_index, vectors, ks)
        graded = image_queries_relevance(self.index, [position for _, _, position in items],
                                         [rows for rows, _ in captions])
        return [(rows, scores, row_graded, *image_hits)
                for (rows, scores), row_graded, image_hits in zip(captions, graded, images)]

    def _embed_text(self, text: str) -> np.ndarray:
        return self._batcher("text")((text, 1))[0]

    def _embed_image(self, data: bytes) -> np.ndarray:
        return self._batcher("image")(data)

    @staticmethod
    def _search_by_k(faiss_index, vectors: np.ndarray, ks: list[int]) -> list[tuple[np.ndarray, np.ndarray]]:
        """The nearest `k` of each row of `vectors`: one faiss search for the rows of each distinct k (an
        approximate index's answer may depend on k, so a row is never searched with another k than its own)."""
        import faiss

        # One OpenMP thread: the batcher's thread searches while the server's other threads answer; left at the
        # default, a query over 10,000 images took 60 ms instead of 8 on a loaded 2-core machine (threads waiting).
        faiss.omp_set_num_threads(1)
        vectors = np.ascontiguousarray(vectors, np.float32)
        answers: list = [None] * len(ks)
        for k in sorted(set(ks)):
            rows = [row for row, row_k in enumerate(ks) if row_k == k]
            scores, found = faiss_index.search(vectors[rows], min(k, faiss_index.ntotal))
            for at, row in enumerate(rows):
                keep = found[at] >= 0
                answers[row] = (found[at][keep].astype(np.int64), scores[at][keep])
        return answers

    # --- checks ----------------------------------------------------------------------------------------------------
    @staticmethod
    def check_k(k) -> int:
        """`k`, the number of results: a JSON integer, or a string of ASCII digits (a URL's ?k=), from 1 to
        MAX_RESULTS. Anything else is refused, never rounded or coerced: 1.5, true, Infinity, 1e400, "٣"."""
        if isinstance(k, str) and k.strip().isascii() and k.strip().isdigit() and len(k.strip()) <= 6:
            value = int(k.strip())
        elif isinstance(k, int) and not isinstance(k, bool):
            value = k
        else:
            shown = json.dumps(k, ensure_ascii=False) if isinstance(k, (str, float, bool)) or k is None else repr(k)
            raise QueryError(f"k (the number of results) must be an integer from 1 to {MAX_RESULTS}; got "
                             f"{shown[:40]}.")
        if not 1 <= value <= MAX_RESULTS:
            raise QueryError(f"k (the number of results) must be an integer from 1 to {MAX_RESULTS}; got "
                             f"{str(value)[:40]}.")
        return value

    @staticmethod
    def check_query(query) -> str:
        if not isinstance(query, str):
            raise QueryError("The query must be text.")
        if len(query) > MAX_QUERY_CHARS:
            raise QueryError(f"The query is {len(query):,} characters long; a caption of at most {MAX_QUERY_CHARS:,} "
                             "characters is searched.", 413)
        query = query.strip()
        if not query:
            raise QueryError("Type a caption to search for: the query is empty.")
        return query

    # --- queries ---------------------------------------------------------------------------------------------------
    def image_result(self, position: int) -> dict:
        image = self.index.images[position]
        return {"image": int(position), "path": image["path"], "thumbnail": f"/api/thumbnail/{int(position)}"}

    def search_text(self, query, k=10) -> dict:
        """The `k` images nearest to the caption `query`, with their scores and graded relevance."""
        started = time.perf_counter()
        query, k = self.check_query(query), self.check_k(k)
        return self._text_answer(query, k, self._batcher("text")((query, k)), started)

    async def search_text_async(self, query, k=10) -> dict:
        """`search_text` for an event loop: it awaits its batch (no thread waits on it), so the server answers
        many requests on one thread instead of handing each to a pool thread that blocks on the batch."""
        started = time.perf_counter()
        query, k = self.check_query(query), self.check_k(k)
        return self._text_answer(query, k, await asyncio.wrap_future(self._batcher("text").submit((query, k))),
                                 started)

    def _text_answer(self, query: str, k: int, found: tuple, started: float) -> dict:
        _, query_words, positions, scores, graded, matched = found
        words = self.words_report(query_words)
        results = [{"rank": rank + 1, "score": float(score), **self.image_result(position),
                    "relevance": graded.values[rank], "annotated": graded.annotated[rank]}
                   for rank, (position, score) in enumerate(zip(positions, scores))]
        return {"query": query, "k": k, "results": results, "relevance_source": graded.source,
                "relevance_note": graded.note,
                **words,
                "matched_caption": None if matched is None else {"caption": int(matched),
                                                                 "image": int(self.index.captions[matched]["image"])},
                "seconds": round(time.perf_counter() - started, 4)}

    def query_words(self, query: str) -> dict:
        """`words_report` of the words the model reads in `query`."""
        from kitm.index.model import query_words

        return self.words_report(None if self.vocabulary is None else query_words(query))

    def words_report(self, words: list[str] | None) -> dict:
        """{"num_words", "unknown_words", "warning"}: how many words the model reads in a query (`words`, as its
        tokenizer splits them), those its vocabulary lacks, and a warning when some are unknown (None: all are
        known, or the model's vocabulary is not known).

        A query of words the model never saw (emoji, "!!!", a zero-width space, another script) is embedded as an
        empty caption and still gets scores as high as a real one's: the page says so instead of looking sure."""
        if self.vocabulary is None or words is None:
            return {"num_words": None, "unknown_words": None, "warning": None}
        unknown = [word for word in words if word not in self.vocabulary]
        size = f"{len(self.vocabulary):,} words from its training captions"
        if not words:
            warning = ("The query has no words the model can read: only punctuation, symbols, emoji or invisible "
                       "characters, which the model drops. The results below answer an empty caption, not the query.")
        elif len(unknown) == len(words):
            warning = (f"None of the query's words ({', '.join(unknown[:10])}) is in the model's vocabulary "
                       f"({size}): the results below answer an empty caption, not the query.")
        elif unknown:
            warning = (f"{len(unknown)} of the query's {len(words)} words are not in the model's vocabulary ({size}) "
                       f"and are ignored: {', '.join(unknown[:10])}.")
        else:
            warning = None
        return {"num_words": len(words), "unknown_words": unknown, "warning": warning}

    def search_image_bytes(self, data: bytes, k=10) -> dict:
        """The captions (and images) nearest to the uploaded image `data`."""
        from kitm.index.sources import prepare_image

        k = self.check_k(k)
        if not data:
            raise QueryError("The upload is empty: drop an image file (PNG, JPEG, GIF, BMP or WebP).")
        if len(data) > MAX_UPLOAD_BYTES:
            raise QueryError(f"The upload is {len(data):,} bytes; images of at most {MAX_UPLOAD_BYTES:,} bytes are "
                             "searched.", 413)
        with self._decoding:
            prepared = prepare_image(data)
            if prepared.too_large:
                raise QueryError(f"The upload is {prepared.error}.", 413)
            if prepared.error:
                raise QueryError(f"The upload is {prepared.error}: drop a photo or picture file.", 415)
            vector = self._embed_image(prepared.model_bytes)
        position = self._digests.get(hashlib.sha256(data).hexdigest())
        return self._search_image(vector, position, k)

    def search_indexed_image(self, position, k=10) -> dict:
        """The captions (and images) nearest to indexed image `position`."""
        started = time.perf_counter()
        query = self._indexed_image_query(position, k)
        return self._image_answer(query, self._batcher("search")(query), started)

    async def search_indexed_image_async(self, position, k=10) -> dict:
        """`search_indexed_image` for an event loop (as `search_text_async`)."""
        started = time.perf_counter()
        query = self._indexed_image_query(position, k)
        return self._image_answer(query, await asyncio.wrap_future(self._batcher("search").submit(query)), started)

    def _indexed_image_query(self, position, k) -> tuple[np.ndarray, int, int]:
        """The search batcher's item for indexed image `position`: (its embedding, k, position), checked."""
        k = self.check_k(k)
        try:
            position = int(position)
        except (TypeError, ValueError):
            raise QueryError(f"No image {position!r} in the index.", 404) from None
        if not 0 <= position < self.index.num_images:
            raise QueryError(f"No image {position} in the index: it holds images 0 to {self.index.num_images - 1}.",
                             404)
        vector = self.index.image_embeddings[position]  # mapped by load_index (opening it per query cost 1.5 ms)
        return np.array(vector, np.float32), k, position

    def _search_image(self, vector: np.ndarray, position: int | None, k: int) -> dict:
        started = time.perf_counter()
        query = (vector, k, position)
        return self._image_answer(query, self._batcher("search")(query), started)

    def _image_answer(self, query: tuple, found: tuple, started: float) -> dict:
        _, k, position = query
        rows, caption_scores, graded, positions, scores = found
        captions = []
        if graded is not None:
            captions = [{"rank": rank + 1, "score": float(score), "caption": int(row),
                         "text": self.index.captions[int(row)]["text"],
                         "image": int(self.index.captions[int(row)]["image"]),
                         "relevance": graded.values[rank], "annotated": graded.annotated[rank]}
                        for rank, (row, score) in enumerate(zip(rows, caption_scores))]
        images = [{"rank": rank + 1, "score": float(score), **self.image_result(p)}
                  for rank, (p, score) in enumerate(zip(positions, scores))]
        return {"k": k, "query_image": None if position is None else self.image_result(position),
                "captions": captions, "images": images,
                "relevance_source": graded.source if graded else None,
                "relevance_note": graded.note if graded else "This index holds no captions: the nearest images only.",
                "seconds": round(time.perf_counter() - started, 4)}

    def thumbnail(self, position) -> tuple[bytes, str]:
        try:
            position = int(position)
        except (TypeError, ValueError):
            raise QueryError(f"No image {position!r} in the index.", 404) from None
        if not 0 <= position < self.index.num_images:
            raise QueryError(f"No image {position} in the index.", 404)
        return self.index.thumbnail(position)

    def info(self) -> dict:
        manifest = self.index.manifest
        return {"num_images": manifest["num_images"], "num_captions": manifest["num_captions"],
                "relevance": manifest["relevance"], "source": manifest["source"],
                "model": {"export_dir": str(self.export_dir), "embedding_dim": manifest["model"]["embedding_dim"]},
                "images_index": manifest["images_index"], "captions_index": manifest["captions_index"],
                "limits": {"max_query_chars": MAX_QUERY_CHARS, "max_results": MAX_RESULTS,
                           "max_upload_bytes": MAX_UPLOAD_BYTES, "max_image_pixels": MAX_IMAGE_PIXELS,
                           "max_decodes_in_flight": MAX_DECODES_IN_FLIGHT},
                "serving": self.settings.as_dict(),
                "batching": {kind: batcher.statistics() for kind, batcher in sorted(self._batchers.items())}}

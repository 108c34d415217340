"""Dynamic batching of the search's query encodings: the queries that arrive together are encoded in one call.

A SavedModel call costs about the same for one caption as for dozens (the fixed cost of a TensorFlow function call,
the tokenizer's and the GRU's launch, on a CPU a few milliseconds), so a server that encodes each request alone
serves no more requests a second with fifty clients than with one. `QueryBatcher` runs one worker thread per kind
of query: it takes the first waiting query, gathers the ones that arrive within `batch_window_ms` of it (at most
`max_batch` in all; those already waiting are taken at once), encodes them in one call and hands each caller its own
row, as TensorFlow Serving's and Triton's dynamic batchers do. Under load the batches grow by themselves: the queries
that arrive while the model runs form the next batch, so the default window is 0 ms (a 1 ms window batched no better
at 50 clients and cost one client 2.5 ms: benchmarks/bench_search_load.py, docs/search.md). The rows equal those of
one query a call (each caption is encoded independently; tests compare them).
"""

from __future__ import annotations

import concurrent.futures
import queue
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np

from kitm.search.settings import ServingSettings


class QueryBatcher:
    """Calls `encode(items) -> one row per item` on batches of the items submitted from many threads or tasks.

    `submit(item)` returns a `concurrent.futures.Future` of the item's row; an exception from `encode` is set on
    every future of its batch (each caller sees it, the worker goes on). Counters (`calls`, `items`) say how well
    the queries batch."""

    def __init__(self, encode: Callable[[Sequence], np.ndarray], settings: ServingSettings = ServingSettings(),
                 name: str = "queries"):
        self._encode = encode
        self.settings = settings
        self._waiting: queue.SimpleQueue = queue.SimpleQueue()
        self.calls = 0
        self.items = 0
        self.largest = 0
        self._worker = threading.Thread(target=self._run, name=f"kitm-batcher-{name}", daemon=True)
        self._worker.start()

    def submit(self, item) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._waiting.put((item, future))
        return future

    def __call__(self, item):
        """The row of one item, encoded in a batch with whatever arrives with it."""
        return self.submit(item).result()

    def statistics(self) -> dict:
        return {"calls": self.calls, "queries": self.items, "largest_batch": self.largest,
                "mean_batch": round(self.items / self.calls, 2) if self.calls else None}

    def _gather(self) -> list:
        batch = [self._waiting.get()]
        deadline = time.monotonic() + self.settings.batch_window_ms / 1000
        while len(batch) < self.settings.max_batch:
            try:
                batch.append(self._waiting.get_nowait())
                continue
            except queue.Empty:
                pass
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                batch.append(self._waiting.get(timeout=left))
            except queue.Empty:
                break
        return batch

    def _run(self) -> None:
        while True:
            batch = self._gather()
            futures = [future for _, future in batch]
            try:
                rows = self._encode([item for item, _ in batch])
            except BaseException as error:  # noqa: BLE001 - every caller of the batch gets it; the worker lives on
                for future in futures:
                    future.set_exception(error)
                continue
            self.calls += 1
            self.items += len(batch)
            self.largest = max(self.largest, len(batch))
            for future, row in zip(futures, rows):
                future.set_result(row)

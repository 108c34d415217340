"""The searcher behind the page, without a model or a server: what it refuses and how many uploads it decodes."""

import pathlib
import struct
import threading
import time
import zlib

import pytest

from kitm.search.engine import MAX_DECODES_IN_FLIGHT, QueryError, Searcher


def _png_header(width: int, height: int) -> bytes:
    def chunk(kind: bytes, payload: bytes) -> bytes:
        return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b""))


def _searcher() -> Searcher:
    return Searcher(index=None, model=None, export_dir=pathlib.Path("model"))


def test_an_image_bomb_upload_is_413_naming_the_limit():
    for width, height, size in ((12000, 12000, "144 MP"), (20000, 20000, "400 MP")):
        with pytest.raises(QueryError, match=f"too large.*{size}.*at most 40 MP") as caught:
            _searcher().search_image_bytes(_png_header(width, height))
        assert caught.value.status == 413


def test_uploads_are_decoded_at_most_max_decodes_in_flight_at_once(monkeypatch):
    from kitm.index.sources import PreparedImage

    running, most = [0], [0]
    guard = threading.Lock()

    def slow_prepare(data):
        with guard:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.05)
        with guard:
            running[0] -= 1
        return PreparedImage(b"x", b"x")

    import kitm.index.sources

    monkeypatch.setattr(kitm.index.sources, "prepare_image", slow_prepare)
    searcher = _searcher()
    monkeypatch.setattr(searcher, "_embed_image", lambda data: None)
    monkeypatch.setattr(searcher, "_search_image", lambda vector, position, k: {})
    threads = [threading.Thread(target=searcher.search_image_bytes, args=(b"image",)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert most[0] == MAX_DECODES_IN_FLIGHT == 2

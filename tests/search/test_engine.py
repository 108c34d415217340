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


@pytest.mark.parametrize("k, shown", [(float("inf"), "Infinity"), (1e400, "Infinity"), (float("nan"), "NaN"),
                                      (1.5, "1.5"), (3.0, "3.0"), (True, "true"), ("٣", '"٣"'), ("1.5", '"1.5"'),
                                      ("", '""'), (None, "null"), ([3], "[3]"), (0, "0"), (101, "101"),
                                      ("-1", '"-1"'), (10**400, "1" + "0" * 39)])
def test_k_that_is_not_an_integer_from_1_to_100_is_refused_naming_k(k, shown):
    with pytest.raises(QueryError) as caught:
        Searcher.check_k(k)
    assert str(caught.value) == f"k (the number of results) must be an integer from 1 to 100; got {shown}."
    assert caught.value.status == 400


def test_k_as_a_json_integer_or_the_digits_of_a_url():
    assert [Searcher.check_k(k) for k in (1, 100, "7", " 20 ")] == [1, 100, 7, 20]


@pytest.mark.parametrize("query, warning", [
    ("\U0001F642\U0001F308", "The query has no words the model can read: only punctuation, symbols, emoji or "
                             "invisible characters"),
    ("!!!", "The query has no words the model can read"),
    ("\u200b", "The query has no words the model can read"),
    ("قطة حمراء", "None of the query's words (قطة, حمراء) is in the model's vocabulary (2 words from its training "
                  "captions): the results below answer an empty caption, not the query."),
    ("a Red circle", "1 of the query's 3 words are not in the model's vocabulary (2 words from its training "
                     "captions) and are ignored: a."),
    ("red circle.", None),
])
def test_a_query_of_words_the_model_never_saw_is_said_so(query, warning):
    searcher = Searcher(index=None, model=None, export_dir=pathlib.Path("model"),
                        vocabulary=frozenset({"red", "circle"}))
    words = searcher.query_words(query)
    assert (words["warning"] or "").startswith(warning or "") and (words["warning"] is None) == (warning is None)


def test_the_vocabulary_is_read_from_the_savedmodel(tiny_search_run, tiny_synthetic):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401 (the tokenizer's ops)

    from kitm.data.split_reading import read_split
    from kitm.index.model import model_vocabulary

    vocabulary = model_vocabulary(tf.saved_model.load(str(tiny_search_run / "export" / "1")))
    captions = read_split(tiny_synthetic, "train", with_images=False).captions
    assert vocabulary == {word for caption in captions for word in caption.lower().split()}
    assert model_vocabulary(object()) is None  # no tables: a model whose vocabulary is not known, no warning

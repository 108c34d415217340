"""kitm.relevance.embedding_cache and sentence_embeddings(cache_dir=...): a hit returns exactly what encoding gives,
without loading the model; the key follows the model's files, the device, the batch size and the texts; what cannot
be read is written again; what cannot be written is a warning.

Oracle: the same call without a cache (bitwise equal), and the files in the cache folder."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from kitm.relevance import embedding_cache, sentence  # noqa: E402
from kitm.relevance.embedding_cache import cache_file, default_cache_dir, read_cached  # noqa: E402
from kitm.relevance.sentence import load_sentence_model, sentence_embeddings  # noqa: E402

TEXTS = ["a red circle left of a blue square", "two green triangles above a yellow star", "a small purple cross"]


def _cached_files(cache_dir):
    folder = cache_dir / embedding_cache.SUBDIRECTORY
    return sorted(folder.glob("*.npy")) if folder.is_dir() else []


@pytest.fixture(scope="module")
def uncached():
    load_sentence_model()  # the one model load of this module
    return sentence_embeddings(TEXTS)


def _refuse_to_load(*args, **kwargs):
    raise AssertionError("the model was loaded although the embeddings were in the cache")


def test_a_hit_is_bitwise_the_encoding_and_loads_no_model(uncached, tmp_path, monkeypatch):
    first = sentence_embeddings(TEXTS, cache_dir=tmp_path)
    assert np.array_equal(first, uncached) and first.dtype == np.float32
    assert len(_cached_files(tmp_path)) == 1
    monkeypatch.setattr(sentence, "load_sentence_model", _refuse_to_load)
    second = sentence_embeddings(TEXTS, cache_dir=tmp_path)
    assert np.array_equal(second, uncached)


def test_other_texts_order_or_batch_size_get_their_own_file(uncached, tmp_path):
    sentence_embeddings(TEXTS, cache_dir=tmp_path)
    reordered = sentence_embeddings(TEXTS[::-1], cache_dir=tmp_path)
    assert np.array_equal(reordered, uncached[::-1])
    sentence_embeddings(TEXTS, cache_dir=tmp_path, batch_size=2)
    assert len(_cached_files(tmp_path)) == 3


def test_an_unreadable_file_is_written_again(uncached, tmp_path):
    sentence_embeddings(TEXTS, cache_dir=tmp_path)
    (path,) = _cached_files(tmp_path)
    for damage in (b"not a numpy file", None):
        if damage is None:  # a readable array of the wrong shape
            np.save(path, np.ones((2, 384), np.float32))
        else:
            path.write_bytes(damage)
        assert read_cached(path, len(TEXTS)) is None
        assert np.array_equal(sentence_embeddings(TEXTS, cache_dir=tmp_path), uncached)
        assert np.array_equal(np.load(path), uncached)


def test_only_models_in_a_local_folder_are_cached(uncached, tmp_path):
    loaded = load_sentence_model()
    assert np.array_equal(sentence_embeddings(TEXTS, loaded, cache_dir=tmp_path), uncached)
    # A Hub name (here one that falls back to the bundled copy): its files may change under the same name.
    assert np.array_equal(sentence_embeddings(TEXTS, "all-MiniLM-L6-v2", cache_dir=tmp_path), uncached)
    assert _cached_files(tmp_path) == []
    assert sentence_embeddings([], cache_dir=tmp_path).shape == (0, 384) and _cached_files(tmp_path) == []


def test_the_key_follows_the_model_files_device_batch_size_and_texts(tmp_path):
    model_dir = tmp_path / "model"
    (model_dir / "sub").mkdir(parents=True)
    (model_dir / "modules.json").write_text("[]")
    (model_dir / "sub" / "weights.bin").write_bytes(b"\0" * 8)

    def key(texts=TEXTS, batch_size=128, device="cpu"):
        return cache_file(tmp_path / "cache", str(model_dir), texts, batch_size=batch_size, device=device)

    base = key()
    assert base.parent == tmp_path / "cache" / "sentence_embeddings" and base.suffix == ".npy"
    assert key() == base
    assert len({base, key(batch_size=64), key(device="cuda"), key(texts=TEXTS[:2]), key(texts=TEXTS[::-1]),
                key(texts=["a red circle left of a blue", "square"] + TEXTS[1:])}) == 6
    os.utime(model_dir / "sub" / "weights.bin", ns=(1, 1))  # the model saved again at the same path
    assert key() != base
    after_touch = key()
    (model_dir / "sub" / "weights.bin").write_bytes(b"\0" * 9)
    assert key() != after_touch


def test_a_cache_that_cannot_be_written_is_a_warning(uncached, tmp_path):
    blocked = tmp_path / "a_file"
    blocked.write_text("in the way of the cache folder")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = sentence_embeddings(TEXTS, cache_dir=blocked)
    assert np.array_equal(result, uncached)
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert any("could not keep sentence embeddings" in m and str(blocked) in m for m in messages), messages
    assert list(tmp_path.glob("**/*.tmp*")) == [] and list(tmp_path.glob("**/*.partial*")) == []


def test_default_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("KITM_CACHE_DIR", str(tmp_path / "kitm_cache"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "kitm_cache"
    monkeypatch.delenv("KITM_CACHE_DIR")
    assert default_cache_dir() == tmp_path / "xdg" / "kitm"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "kitm"

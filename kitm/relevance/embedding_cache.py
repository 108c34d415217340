"""An on-disk cache of sentence embeddings, so that a split's captions are embedded once per model.

Scoring many runs on one test split (a study's seeds, a sweep) embeds the same captions with the same sentence model
every time: on a 2-core CPU, 5,000 captions through all-MiniLM-L6-v2 take about 40 s, most of an evaluation. The
cache keeps each result as ``<cache dir>/sentence_embeddings/<key>.npy`` (float32 [N, D]), where the key is the
sha256 of

- the model's files: every file under its directory, by relative path, size and modification time (a model saved
  again at the same path gets a new key);
- the torch device and the batch size (both change the result by float rounding, and a hit must return exactly
  what encoding would);
- the texts, in order.

Only a model that resolves to a local directory is cached (the bundled all-MiniLM-L6-v2, a saved model's path): a
Hub name can point at other files tomorrow without kitm seeing it, and a loaded ``SentenceTransformer`` has no files
to key on. Files are written under a temporary name and renamed (two processes that race rename the same bytes). A
file that cannot be read as [N, D] float32 rows of unit norm is ignored and written again.

The directory: ``$KITM_CACHE_DIR`` if set, otherwise ``$XDG_CACHE_HOME/kitm`` (``~/.cache/kitm``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pathlib
from collections.abc import Sequence

import numpy as np

__all__ = ["default_cache_dir", "cache_file", "read_cached", "write_cached"]

SUBDIRECTORY = "sentence_embeddings"


def default_cache_dir() -> pathlib.Path:
    """``$KITM_CACHE_DIR``, else ``$XDG_CACHE_HOME/kitm``, else ``~/.cache/kitm``."""
    if os.environ.get("KITM_CACHE_DIR"):
        return pathlib.Path(os.environ["KITM_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    return pathlib.Path(base).expanduser() / "kitm"


def _model_identity(model_dir: str) -> bytes:
    """Every file under the model's directory: relative path, size and modification time (ns), sorted."""
    entries = []
    for root, _, files in os.walk(model_dir):
        for name in files:
            path = os.path.join(root, name)
            stat = os.stat(path)
            entries.append(f"{os.path.relpath(path, model_dir)}\0{stat.st_size}\0{stat.st_mtime_ns}")
    return "\n".join(sorted(entries)).encode("utf-8")


def cache_file(cache_dir: str | os.PathLike, model_dir: str, texts: Sequence[str], *, batch_size: int,
               device: str) -> pathlib.Path:
    """The cache file for ``texts`` embedded by the model in ``model_dir`` (module docstring: the key)."""
    digest = hashlib.sha256()
    digest.update(_model_identity(model_dir))
    digest.update(f"\0device={device}\0batch_size={int(batch_size)}\0texts={len(texts)}\0".encode())
    for text in texts:
        digest.update(text.encode("utf-8") + b"\0")
    return pathlib.Path(cache_dir) / SUBDIRECTORY / f"{digest.hexdigest()}.npy"


def read_cached(path: pathlib.Path, num_texts: int) -> np.ndarray | None:
    """The cached embeddings, or None when the file is absent or not [num_texts, D] finite unit rows."""
    try:
        embeddings = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError):
        return None
    if embeddings.dtype != np.float32 or embeddings.ndim != 2 or embeddings.shape[0] != num_texts:
        return None
    norms = np.linalg.norm(embeddings, axis=1)
    if not np.all(np.isfinite(norms)) or np.any(np.abs(norms - 1.0) > 1e-3):
        return None
    return embeddings


def write_cached(path: pathlib.Path, embeddings: np.ndarray) -> None:
    """Store ``embeddings`` at ``path``: written to a temporary name that carries the process id, then renamed onto
    ``path`` (processes that race rename the same bytes; an unreadable file there is replaced). A cache that cannot
    be written (a read-only disk, no space) is a warning, not an error: the embeddings are returned anyway."""
    import warnings

    from kitm.files import temporary_sibling

    tmp = temporary_sibling(path, ".npy", unique=True)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(tmp, np.ascontiguousarray(embeddings, dtype=np.float32))
        os.replace(tmp, path)
    except OSError as error:
        with contextlib.suppress(OSError):  # no temporary, or no folder to hold one
            tmp.unlink()
        warnings.warn(f"could not keep sentence embeddings in the cache at {path} ({error}); set KITM_CACHE_DIR "
                      "to a writable folder, or turn the cache off", RuntimeWarning, stacklevel=3)

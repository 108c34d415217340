"""Building a search index: embed every image (and caption) with a run's SavedModel, then write the faiss indexes.

An index is a folder (``kitm.index.store`` reads it):

| file | content |
|---|---|
| manifest.json | format, the model (SavedModel path, fingerprint, embedding width), the source, counts, each faiss index's kind and measured recall, the build's seconds, skipped files |
| images.json | per image: its path (file, or `<split>/<image key>`), SHA-256 of its bytes, the thumbnail's type |
| thumbnails.bin, thumbnail_offsets.npy | every thumbnail's bytes, concatenated, and their [N + 1] offsets |
| image_embeddings.npy, images.faiss | float32 [N, D]; the faiss index over them |
| captions.json, caption_embeddings.npy, captions.faiss | where the data has captions: [{"text", "image"}], [C, D], the index |
| truth.npz | the synthetic world's facts (exact relevance of any of its captions to any of its images) |
| document_frequency.json.gz | CIDEr-D's document frequencies over the images' captions (relevance of a typed query) |

The work happens in ``<out>.partial/``: images are embedded in chunks, each chunk saved (embeddings, thumbnails,
digests) under a temporary name and renamed when whole, so a killed build started again with the same inputs,
model and options resumes after its last whole chunk; with anything changed it starts over (and says so). The
finished index is assembled in ``<out>.tmp`` and renamed onto ``<out>``: a reader sees no index, the old one, or
the whole new one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import json
import os
import pathlib
import shutil
import sys
import time

import numpy as np
from tqdm.auto import tqdm

from kitm.errors import KitmDataError
from kitm.files import atomic_path, read_json, write_json_atomically
from kitm.progress import progress_bar
from kitm.index.sources import (THUMBNAIL_SIDE, IndexSource, PreparedImage, prepare_image, source_manifest,
                                unreadable)
from kitm.index.vectors import DEFAULT_EXACT_THRESHOLD, DEFAULT_TARGET_RECALL, build_vector_index, write_index
from kitm.relevance.world_truth import DEFAULT_WORLD

FORMAT = "kitm.index"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
DEFAULT_CHUNK = 256
_STATE = "state.json"
_NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
# Free bytes under which a failed write is put down to a full disk (a write fails with less room than it needs).
_NEARLY_FULL = 16 * 2**20


@dataclasses.dataclass
class BuildOptions:
    """How an index is built (library callers; the CLI's flags map onto these)."""

    batch_size: int = 64
    chunk_size: int = DEFAULT_CHUNK
    exact_threshold: int = DEFAULT_EXACT_THRESHOLD
    target_recall: float = DEFAULT_TARGET_RECALL
    overwrite: bool = False
    progress: bool = True


def _partial_dir(out: pathlib.Path) -> pathlib.Path:
    return out.with_name(out.name + ".partial")


def _log(message: str, progress: bool) -> None:
    """Resuming or starting over is always said (on stderr), with progress bars or without."""
    if progress:
        tqdm.write(message, file=sys.stderr)
    else:
        print(message, file=sys.stderr, flush=True)


def _start_work(work: pathlib.Path, signature: str, progress: bool) -> None:
    """Keep `work` when it was started with `signature` (resume), else empty it (start over)."""
    state = read_json(work / _STATE) if (work / _STATE).is_file() else None
    if isinstance(state, dict) and state.get("signature") == signature:
        return
    if work.exists():
        _log(f"{work}: left by a build with other inputs, model or options; starting over.", progress)
        shutil.rmtree(work)
    (work / "chunks").mkdir(parents=True)
    with _room(work / _STATE):
        write_json_atomically(work / _STATE, {"signature": signature})


def _chunk_path(work: pathlib.Path, chunk: int) -> pathlib.Path:
    return work / "chunks" / f"images-{chunk:05d}.npz"


def _embed_batches(embed, values: list, batch_size: int, bar) -> np.ndarray:
    parts = []
    for start in range(0, len(values), batch_size):
        batch = values[start:start + batch_size]
        parts.append(np.asarray(embed(batch), np.float32))
        bar.update(len(batch))
    return np.concatenate(parts) if parts else np.zeros([0, 0], np.float32)


def _embed_chunk(loaded, source: IndexSource, positions: range, batch_size: int, bar) -> dict:
    from kitm.index.model import embed_images

    import tensorflow as tf

    # A file that could not be read comes as its OSError (kitm.index.sources.read_file): skipped, with the reason.
    raw = source.read(positions)
    prepared = [prepare_image(data) if isinstance(data, bytes) else PreparedImage(None, None, error=unreadable(data))
                for data in raw]
    readable = [i for i, item in enumerate(prepared) if item.error is None]
    bar.update(len(prepared) - len(readable))
    try:
        embeddings = _embed_batches(lambda batch: embed_images(loaded, batch),
                                    [prepared[i].model_bytes for i in readable], batch_size, bar)
    except tf.errors.InvalidArgumentError:
        # An image Pillow reads but TensorFlow's decoder refuses: embed one by one, skipping (and naming) it.
        rows = []
        for i in readable:
            try:
                rows.append(embed_images(loaded, [prepared[i].model_bytes])[0])
            except tf.errors.InvalidArgumentError as error:
                prepared[i].error = "TensorFlow cannot decode it (" + " ".join(error.message.split())[:200] + ")"
        embeddings = np.asarray(rows, np.float32)
    valid = np.array([item.error is None for item in prepared])
    errors = [item.error or "" for item in prepared]
    thumbs = [item.thumbnail or b"" for item in prepared]
    offsets = np.concatenate([[0], np.cumsum([len(t) for t in thumbs])]).astype(np.int64)
    return {"embeddings": embeddings, "valid": valid,
            "sha256": np.array([hashlib.sha256(data if isinstance(data, bytes) else b"").hexdigest()
                                for data in raw]),
            "errors": np.array(errors), "thumb_types": np.array([item.thumbnail_type for item in prepared]),
            "thumbs": np.frombuffer(b"".join(thumbs), np.uint8), "thumb_offsets": offsets}


def _lack_of_room(path: pathlib.Path) -> int | None:
    """EFBIG when `path` has reached the file-size limit (ulimit -f), ENOSPC when its disk is full, else None."""
    import resource

    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    try:
        size = path.stat().st_size
    except OSError:
        size = 0
    if limit != resource.RLIM_INFINITY and size >= limit:
        return errno.EFBIG
    try:
        free = shutil.disk_usage(path.parent).free
    except OSError:
        return None
    return errno.ENOSPC if free < _NEARLY_FULL else None


@contextlib.contextmanager
def _room(path: pathlib.Path):
    """Writes to `path` that fail for lack of room raise OSError(ENOSPC or EFBIG, path), which
    `kitm.files.no_room_error` turns into kitm.data.build's one line (the file, the cause, the fix).

    Not every writer says why it stopped: numpy's np.save says "25600000 requested and 1279968 written", faiss a
    RuntimeError, Python's write an errno without the file. So the cause is read from the file and its disk."""
    try:
        yield
    except (OSError, RuntimeError) as error:
        code = error.errno if isinstance(error, OSError) and error.errno in _NO_ROOM else _lack_of_room(path)
        if code is None:
            raise
        raise OSError(code, os.strerror(code), str(path)) from error


def _save_npz(path: pathlib.Path, arrays: dict) -> None:
    with atomic_path(path, ".npz") as tmp, _room(tmp):
        np.savez(tmp, **arrays)


def _save_npy(path: pathlib.Path, array: np.ndarray) -> None:
    with atomic_path(path, ".npy") as tmp, _room(tmp):
        np.save(tmp, array)


def _document_frequency(captions: list[list[str]]):
    from kitm.relevance import DocumentFrequency

    return DocumentFrequency.from_reference_groups([[c.lower() for c in group] for group in captions],
                                                   normalize=False)


def build_index(source: IndexSource, export_dir: str | os.PathLike, out: str | os.PathLike,
                options: BuildOptions | None = None) -> dict:
    """Build the index of `source` with the SavedModel at `export_dir` into the folder `out`; returns its manifest.

    Raises KitmDataError when `out` holds an index and `options.overwrite` is false, or when nothing in `source`
    is a readable image.
    """
    from kitm.index.model import load_model, model_fingerprint

    options = options or BuildOptions()
    for name in ("batch_size", "chunk_size"):
        value = getattr(options, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise KitmDataError(f"--{name} must be a positive integer; got {value!r}.")
    out = pathlib.Path(out)
    if out.exists() and not options.overwrite:
        raise KitmDataError(f"--out={out} exists; pass --overwrite to replace it, or choose another --out.")
    began = started = time.perf_counter()
    export_dir = pathlib.Path(export_dir)
    loaded = load_model(export_dir)
    fingerprint = model_fingerprint(export_dir)
    signature = hashlib.sha256(json.dumps([FORMAT_VERSION, source.signature, fingerprint, options.chunk_size,
                                           THUMBNAIL_SIDE]).encode()).hexdigest()
    work = _partial_dir(out)
    _start_work(work, signature, options.progress)
    seconds = {"load_model": time.perf_counter() - started}

    started = time.perf_counter()
    parts = _embed_images(loaded, source, work, out, options)
    seconds["embed_images"] = time.perf_counter() - started
    image_embeddings, kept = _kept_image_embeddings(parts, source)

    started = time.perf_counter()
    captions, caption_embeddings = _embed_captions(loaded, source, kept, work, options)
    seconds["embed_captions"] = time.perf_counter() - started

    started = time.perf_counter()
    image_index = build_vector_index(image_embeddings, caption_embeddings, exact_threshold=options.exact_threshold,
                                     target_recall=options.target_recall)
    caption_index = None
    if caption_embeddings is not None:
        caption_index = build_vector_index(caption_embeddings, image_embeddings,
                                           exact_threshold=options.exact_threshold,
                                           target_recall=options.target_recall)
    seconds["faiss"] = time.perf_counter() - started

    manifest = _manifest(source, parts, kept, captions, export_dir, fingerprint, image_embeddings, image_index,
                         caption_index, seconds)
    with atomic_path(out) as tmp:
        tmp.mkdir()
        _write_files(tmp, source, parts, kept, image_embeddings, image_index, captions, caption_embeddings,
                     caption_index)
        manifest["seconds"]["total"] = round(time.perf_counter() - began, 3)
        with _room(tmp / MANIFEST):
            write_json_atomically(tmp / MANIFEST, manifest)
    shutil.rmtree(work, ignore_errors=True)
    return manifest


def _embed_images(loaded, source: IndexSource, work: pathlib.Path, out: pathlib.Path, options: BuildOptions) -> list:
    """Every chunk of images embedded (those already saved in `work` are kept: a resumed build) and read back:
    one dict of arrays per chunk (`_embed_chunk`)."""
    chunks = [range(start, min(start + options.chunk_size, source.num_images))
              for start in range(0, source.num_images, options.chunk_size)]
    done = [c for c in range(len(chunks)) if _chunk_path(work, c).is_file()]
    if done:
        _log(f"Resuming {out}: {sum(len(chunks[c]) for c in done)} of {source.num_images} images already embedded.",
             options.progress)
    with progress_bar(total=source.num_images, desc="embedding images", unit="image", disable=not options.progress,
              file=sys.stderr) as bar:
        bar.update(sum(len(chunks[c]) for c in done))
        for c, positions in enumerate(chunks):
            if c not in done:
                _save_npz(_chunk_path(work, c), _embed_chunk(loaded, source, positions, options.batch_size, bar))
    parts = []
    for c in range(len(chunks)):
        with np.load(_chunk_path(work, c)) as loaded_chunk:
            parts.append({key: loaded_chunk[key] for key in loaded_chunk.files})
    return parts


def _kept_image_embeddings(parts: list, source: IndexSource) -> tuple[np.ndarray, np.ndarray]:
    """(the readable images' embeddings [N, D], their positions in `source`); stops when none is readable."""
    valid = np.concatenate([part["valid"] for part in parts])
    if not valid.any():
        first = next(str(e) for part in parts for e in part["errors"] if e)
        raise KitmDataError(f"None of the {source.num_images} files under --images is a readable image ({first}).")
    image_embeddings = np.concatenate([part["embeddings"] for part in parts if len(part["embeddings"])])
    return image_embeddings, np.flatnonzero(valid)


def _embed_captions(loaded, source: IndexSource, kept: np.ndarray, work: pathlib.Path, options: BuildOptions):
    """The kept images' captions as [{"text", "image"}] and their embeddings [C, D] (saved in `work`, read back
    by a resumed build); (None, None) for a source without captions."""
    from kitm.index.model import embed_texts

    caption_embeddings = captions = None
    if source.captions is not None:
        captions = [{"text": text, "image": int(new)} for new, old in enumerate(kept)
                    for text in source.captions[old]]
        path = work / "caption_embeddings.npy"
        if path.is_file():
            caption_embeddings = np.load(path)
        else:
            with progress_bar(total=len(captions), desc="embedding captions", unit="caption",
                      disable=not options.progress, file=sys.stderr) as bar:
                caption_embeddings = _embed_batches(lambda batch: embed_texts(loaded, batch),
                                                    [c["text"] for c in captions], options.batch_size, bar)
            _save_npy(path, caption_embeddings)
    return captions, caption_embeddings


def _image_records(source: IndexSource, parts: list, kept: np.ndarray) -> list[dict]:
    """images.json: per kept image its path, the SHA-256 of its bytes and its thumbnail's type."""
    thumb_types = np.concatenate([part["thumb_types"] for part in parts])
    digests = np.concatenate([part["sha256"] for part in parts])
    return [{"path": source.paths[old], "sha256": str(digests[old]), "thumbnail_type": str(thumb_types[old])}
            for old in kept]


def _manifest(source: IndexSource, parts: list, kept: np.ndarray, captions, export_dir: pathlib.Path,
              fingerprint, image_embeddings: np.ndarray, image_index, caption_index, seconds: dict) -> dict:
    """manifest.json (the module docstring's table), the total seconds left to the caller."""
    skipped = [{"path": source.paths[i], "error": str(error)} for i, error in
               enumerate(e for part in parts for e in part["errors"]) if error]
    relevance = "truth" if source.scene_facts is not None else ("cider" if captions else None)
    return {
        "format": FORMAT, "version": FORMAT_VERSION,
        "model": {"export_dir": str(export_dir.resolve()), "fingerprint": fingerprint,
                  "embedding_dim": int(image_embeddings.shape[1])},
        "source": source_manifest(source),
        "num_images": int(len(kept)), "num_captions": len(captions) if captions else 0,
        "captions_per_image": len(source.captions[0]) if source.captions else 0,
        "relevance": relevance,
        "images_index": image_index.describe(),
        "captions_index": caption_index.describe() if caption_index else None,
        "skipped": skipped,
        "seconds": {"load_model": round(seconds["load_model"], 3), "embed_images": round(seconds["embed_images"], 3),
                    "embed_captions": round(seconds["embed_captions"], 3), "faiss": round(seconds["faiss"], 3)},
    }


def _write_files(tmp: pathlib.Path, source: IndexSource, parts: list, kept: np.ndarray, image_embeddings, image_index,
                 captions, caption_embeddings, caption_index) -> None:
    """Every file of the index but the manifest into the folder `tmp` (the module docstring's table)."""
    images = _image_records(source, parts, kept)
    with _room(tmp / "images.faiss"):
        write_index(image_index.index, tmp / "images.faiss")
    with _room(tmp / "image_embeddings.npy"):
        np.save(tmp / "image_embeddings.npy", image_embeddings)
    with _room(tmp / "thumbnails.bin"), open(tmp / "thumbnails.bin", "wb") as stream:
        sizes = []
        for part in parts:
            for i in np.flatnonzero(part["valid"]):
                begin, end = part["thumb_offsets"][i], part["thumb_offsets"][i + 1]
                stream.write(part["thumbs"][begin:end].tobytes())
                sizes.append(end - begin)
    with _room(tmp / "thumbnail_offsets.npy"):
        np.save(tmp / "thumbnail_offsets.npy", np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64))
    with _room(tmp / "images.json"):
        (tmp / "images.json").write_text(json.dumps(images, ensure_ascii=False))
    if captions is not None:
        with _room(tmp / "captions.faiss"):
            write_index(caption_index.index, tmp / "captions.faiss")
        with _room(tmp / "caption_embeddings.npy"):
            np.save(tmp / "caption_embeddings.npy", caption_embeddings)
        with _room(tmp / "captions.json"):
            (tmp / "captions.json").write_text(json.dumps(captions, ensure_ascii=False))
        with _room(tmp / "document_frequency.json.gz"):
            _document_frequency([source.captions[old] for old in kept]).save(tmp / "document_frequency.json.gz")
    if source.scene_facts is not None:
        cpi = len(source.captions[0])
        caption_rows = (kept[:, None] * cpi + np.arange(cpi)).reshape(-1)
        with _room(tmp / "truth.npz"):
            np.savez(tmp / "truth.npz", scene_facts=source.scene_facts[kept],
                     caption_facts=source.caption_facts[caption_rows], image_size=np.int64(source.image_size or 64),
                     world=np.array(source.world or DEFAULT_WORLD))

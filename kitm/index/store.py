"""Reading an index folder written by ``kitm.index.build`` (its layout is described there)."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import zipfile

import numpy as np

from kitm.errors import KitmDataError
from kitm.index.build import FORMAT, FORMAT_VERSION, MANIFEST
from kitm.index.vectors import read_index
from kitm.relevance.world_truth import LEGACY_WORLD


@dataclasses.dataclass
class Index:
    """A loaded index.

    Attributes:
      root: its folder.
      manifest: manifest.json.
      images: per image {"path", "sha256", "thumbnail_type"}.
      image_index: faiss index over the images.
      captions: [{"text", "image"}] or None.
      caption_index: faiss index over the captions, or None.
      scene_facts, caption_facts, image_size, world: the synthetic world's truth facts, or None.
      document_frequency: CIDEr-D's document frequencies over the captions, or None.
      image_embeddings: the images' embeddings [N, D], memory-mapped (an indexed image's query vector).
    """

    root: pathlib.Path
    manifest: dict
    images: list[dict]
    image_index: object
    captions: list[dict] | None = None
    caption_index: object = None
    scene_facts: np.ndarray | None = None
    caption_facts: np.ndarray | None = None
    image_size: int | None = None
    world: str | None = None
    document_frequency: object = None
    thumbnail_offsets: np.ndarray | None = None
    image_embeddings: np.ndarray | None = None

    @property
    def num_images(self) -> int:
        return len(self.images)

    @property
    def embedding_dim(self) -> int:
        return int(self.manifest["model"]["embedding_dim"])

    def thumbnail(self, position: int) -> tuple[bytes, str]:
        """(bytes, media type) of image `position`'s thumbnail."""
        begin, end = (int(v) for v in self.thumbnail_offsets[position:position + 2])
        with open(self.root / "thumbnails.bin", "rb") as stream:
            stream.seek(begin)
            return stream.read(end - begin), self.images[position]["thumbnail_type"]

    def captions_of(self, position: int) -> list[int]:
        """The caption rows of image `position` (its annotated captions)."""
        cpi = int(self.manifest["captions_per_image"])
        return list(range(position * cpi, (position + 1) * cpi)) if self.captions else []


def rebuild_command(root: pathlib.Path, manifest: dict | None) -> str:
    """The kitm.index command that builds the index at `root` again (from what its manifest recorded)."""
    manifest = manifest if isinstance(manifest, dict) else {}
    model = (manifest.get("model") or {}).get("export_dir") or "<the SavedModel>"
    source = manifest.get("source") or {}
    images = source.get("folder") or source.get("data_dir") or "<the photos or dataset>"
    split = f" --split={','.join(source['splits'])}" if source.get("splits") else ""
    return f"python -m kitm.index --export_dir={model} --images={images}{split} --out={root} --overwrite"


def _damaged(path: pathlib.Path, what: str, root: pathlib.Path, manifest: dict | None) -> KitmDataError:
    return KitmDataError(f"{path} is damaged ({what}): the index at {root} cannot be served. Rebuild it: "
                         f"{rebuild_command(root, manifest)}")


def _json(path: pathlib.Path, root: pathlib.Path, manifest: dict | None = None):
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise _damaged(path, f"unreadable: {error}", root, manifest) from None


def _array(path: pathlib.Path, shape: tuple, root: pathlib.Path, manifest: dict):
    """The .npy at `path`, memory-mapped, checked to have `shape` (None: any length) and its whole data."""
    try:
        array = np.load(path, mmap_mode="r")
    except (OSError, ValueError, EOFError) as error:  # a truncated file: numpy's "mmap length is greater ..."
        raise _damaged(path, f"unreadable: {str(error).splitlines()[0] if str(error) else type(error).__name__}",
                       root, manifest) from None
    if len(array.shape) != len(shape) or any(want is not None and got != want for got, want in zip(array.shape, shape)):
        raise _damaged(path, f"shape {tuple(array.shape)} where {tuple('N' if w is None else w for w in shape)} was "
                             "expected", root, manifest)
    return array


def _faiss_index(path: pathlib.Path, described: dict, root: pathlib.Path, manifest: dict):
    try:
        return read_index(path, described.get("ef_search"))
    except KitmDataError:
        raise _damaged(path, "not a readable faiss index", root, manifest) from None


def load_index(root: str | os.PathLike) -> Index:
    """The index at `root` (KitmDataError naming the file when it is missing, unfinished, damaged or of another
    format, with the command that rebuilds it).

    Every file is checked against the others when the index is opened (the search server's start), not when a
    query first reads it: lengths of the embeddings, thumbnail offsets and thumbnails, vectors in each faiss file."""
    root = pathlib.Path(root)
    if not (root / MANIFEST).is_file():
        partial = root.with_name(root.name + ".partial")
        hint = (f" ({partial} holds an unfinished build: run the same python -m kitm.index command again to finish "
                "it)") if partial.is_dir() else ""
        raise KitmDataError(f"No index at {root}: {root / MANIFEST} is missing{hint}. Build one with python -m "
                            "kitm.index --run=<run> --images=<folder or dataset> --out=<dir>.")
    manifest = _json(root / MANIFEST, root)
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or manifest.get("version") != FORMAT_VERSION:
        found = manifest if isinstance(manifest, dict) else {}
        raise KitmDataError(f"{root / MANIFEST} is not a kitm index of version {FORMAT_VERSION} (format "
                            f"{found.get('format')!r}, version {found.get('version')!r}); rebuild it: "
                            f"{rebuild_command(root, found)}")
    images = _json(root / "images.json", root, manifest)
    num, dim = len(images), int(manifest["model"]["embedding_dim"])
    if num != manifest.get("num_images"):
        raise _damaged(root / "images.json", f"{num} images where manifest.json says {manifest.get('num_images')}",
                       root, manifest)
    image_embeddings = _array(root / "image_embeddings.npy", (num, dim), root, manifest)
    offsets = np.asarray(_array(root / "thumbnail_offsets.npy", (num + 1,), root, manifest))
    thumbnails = root / "thumbnails.bin"
    size = thumbnails.stat().st_size if thumbnails.is_file() else None
    if size is None or offsets[0] != 0 or (np.diff(offsets) < 0).any() or int(offsets[-1]) != size:
        raise _damaged(thumbnails, "missing" if size is None else
                       f"{size:,} bytes where thumbnail_offsets.npy ends at {int(offsets[-1]):,}", root, manifest)
    index = Index(root=root, manifest=manifest, images=images, thumbnail_offsets=offsets,
                  image_embeddings=image_embeddings,
                  image_index=_faiss_index(root / "images.faiss", manifest["images_index"], root, manifest))
    if index.image_index.ntotal != num:
        raise _damaged(root / "images.faiss", f"{index.image_index.ntotal} vectors where images.json has {num} "
                                              "images", root, manifest)
    if manifest.get("captions_index"):
        index.captions = _json(root / "captions.json", root, manifest)
        num_captions = len(index.captions)
        _array(root / "caption_embeddings.npy", (num_captions, dim), root, manifest)
        index.caption_index = _faiss_index(root / "captions.faiss", manifest["captions_index"], root, manifest)
        if index.caption_index.ntotal != num_captions:
            raise _damaged(root / "captions.faiss", f"{index.caption_index.ntotal} vectors where captions.json has "
                                                    f"{num_captions} captions", root, manifest)
        from kitm.relevance import DocumentFrequency

        if (root / "document_frequency.json.gz").is_file():
            try:
                index.document_frequency = DocumentFrequency.load(root / "document_frequency.json.gz")
            except (OSError, EOFError, ValueError) as error:
                raise _damaged(root / "document_frequency.json.gz", f"unreadable: {error}", root, manifest) from None
    if (root / "truth.npz").is_file():
        try:
            with np.load(root / "truth.npz") as truth:
                index.scene_facts = truth["scene_facts"]
                index.caption_facts = truth["caption_facts"]
                index.image_size = int(truth["image_size"])
                # an index written before the things world records no world: a shapes world's facts
                index.world = str(truth["world"]) if "world" in truth.files else LEGACY_WORLD
        except (OSError, EOFError, ValueError, KeyError, zipfile.BadZipFile) as error:
            raise _damaged(root / "truth.npz", f"unreadable: {error}", root, manifest) from None
    return index

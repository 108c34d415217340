"""Reading an index folder written by ``kitm.index.build`` (its layout is described there)."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib

import numpy as np

from kitm.errors import KitmDataError
from kitm.index.build import FORMAT, FORMAT_VERSION, MANIFEST
from kitm.index.vectors import read_index


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
      scene_facts, caption_facts, image_size: the synthetic world's truth facts, or None.
      document_frequency: CIDEr-D's document frequencies over the captions, or None.
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
    document_frequency: object = None
    thumbnail_offsets: np.ndarray | None = None

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


def _json(path: pathlib.Path):
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise KitmDataError(f"{path} is unreadable ({error}); rebuild the index with python -m kitm.index.") from None


def load_index(root: str | os.PathLike) -> Index:
    """The index at `root` (KitmDataError naming the file when it is missing, unfinished or of another format)."""
    root = pathlib.Path(root)
    if not (root / MANIFEST).is_file():
        partial = root.with_name(root.name + ".partial")
        hint = (f" ({partial} holds an unfinished build: run the same python -m kitm.index command again to finish "
                "it)") if partial.is_dir() else ""
        raise KitmDataError(f"No index at {root}: {root / MANIFEST} is missing{hint}. Build one with python -m "
                            "kitm.index --run=<run> --images=<folder or dataset> --out=<dir>.")
    manifest = _json(root / MANIFEST)
    if manifest.get("format") != FORMAT or manifest.get("version") != FORMAT_VERSION:
        raise KitmDataError(f"{root / MANIFEST} is not a kitm index of version {FORMAT_VERSION} (format "
                            f"{manifest.get('format')!r}, version {manifest.get('version')!r}); rebuild it.")
    images = _json(root / "images.json")
    index = Index(root=root, manifest=manifest, images=images,
                  image_index=read_index(root / "images.faiss", manifest["images_index"].get("ef_search")),
                  thumbnail_offsets=np.load(root / "thumbnail_offsets.npy"))
    if index.image_index.ntotal != len(images):
        raise KitmDataError(f"{root / 'images.faiss'} holds {index.image_index.ntotal} vectors but images.json "
                            f"{len(images)} images: the index is damaged; rebuild it.")
    if manifest.get("captions_index"):
        index.captions = _json(root / "captions.json")
        index.caption_index = read_index(root / "captions.faiss", manifest["captions_index"].get("ef_search"))
        from kitm.relevance import DocumentFrequency

        if (root / "document_frequency.json.gz").is_file():
            index.document_frequency = DocumentFrequency.load(root / "document_frequency.json.gz")
    if (root / "truth.npz").is_file():
        with np.load(root / "truth.npz") as truth:
            index.scene_facts = truth["scene_facts"]
            index.caption_facts = truth["caption_facts"]
            index.image_size = int(truth["image_size"])
    return index

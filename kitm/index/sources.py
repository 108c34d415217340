"""What an index is built over: a folder of image files, or splits of a built kitm dataset.

A folder gives images only (every PNG, JPEG, GIF, BMP or WebP file under it, sorted by relative path); a built
dataset (a folder with ``dataset.json``) gives its images, their captions and, for the synthetic world, the facts
its exact relevance is computed from. Both give the images as bytes the SavedModel's ``encode_image(images)``
signature decodes (PNG, JPEG, GIF, BMP), and a thumbnail per image for the search page.

A photo is stored by cameras as it was shot plus an EXIF orientation; TensorFlow's decoder ignores that tag, so a
photo with one is rotated upright (Pillow's ``exif_transpose``) and re-encoded before it is embedded, as a person
sees it. WebP, which the SavedModel does not decode, is re-encoded as PNG. A file Pillow cannot read is skipped and
named in the build's report, never silently embedded as something else; so is one that cannot be read at all (a
symbolic link loop) or declares more than `MAX_IMAGE_PIXELS` pixels.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import io
import json
import os
import pathlib
import re
import warnings
from collections.abc import Callable, Sequence

import numpy as np

from kitm.errors import KitmDataError

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp")
THUMBNAIL_SIDE = 192
# The formats the SavedModel's encode_image decodes (kitm.serving.export checks their first bytes).
_DECODABLE = {"PNG", "JPEG", "GIF", "BMP"}
_EXIF_ORIENTATION = 0x0112
# The most pixels an image may declare: it is refused from its header, before any decoding. A file of a few
# kilobytes can declare 12000 x 12000 pixels (a "decompression bomb"): decoded, it took 1-2 GB of the search server's
# memory per upload, and 400 MP raised Pillow's own DecompressionBombError. 40 MP holds every camera photo
# (a 45 MP full-frame sensor aside: 8256 x 5504) and decodes into at most 160 MB (RGBA).
MAX_IMAGE_PIXELS = 40_000_000


@dataclasses.dataclass
class PreparedImage:
    """One image ready to embed: `model_bytes` for encode_image, `thumbnail` for the page, or `error`."""

    model_bytes: bytes | None
    thumbnail: bytes | None
    thumbnail_type: str = "image/jpeg"
    error: str | None = None
    too_large: bool = False


@dataclasses.dataclass
class IndexSource:
    """The images (and captions, and truth facts) an index is built over.

    Attributes:
      kind: "folder" or "dataset".
      description: what `kind` names (the folder, or the dataset folder and its splits), for the manifest.
      paths: per image, its file path (folder) or "<split>/<image key>" (dataset).
      read: read(positions) -> the raw bytes of those images.
      captions: per image, its captions (None: the data has none).
      scene_facts: int64 [images, objects * 7] of the synthetic world, or None.
      caption_facts: int64 [images * cpi, the world's width] of the synthetic world, or None (captions image-major).
      image_size: the synthetic world's image side (sets its relation gap), or None.
      world: the synthetic world whose facts these are ("things" or "shapes"), or None.
      signature: a digest of the inputs: a resumed build continues only when it is unchanged.
    """

    kind: str
    description: dict
    paths: list[str]
    read: Callable[[Sequence[int]], list[bytes]]
    captions: list[list[str]] | None = None
    scene_facts: np.ndarray | None = None
    caption_facts: np.ndarray | None = None
    image_size: int | None = None
    world: str | None = None
    signature: str = ""

    @property
    def num_images(self) -> int:
        return len(self.paths)


def folder_source(folder: str | os.PathLike) -> IndexSource:
    """Every image file under `folder` (recursively, by sorted relative path; hidden folders skipped)."""
    folder = pathlib.Path(folder)
    if not folder.is_dir():
        raise KitmDataError(f"--images={folder} is not a folder: give a folder of images, or a dataset built by "
                            "python -m kitm.data.build.")
    paths = []
    for root, directories, files in os.walk(folder):
        directories[:] = sorted(d for d in directories if not d.startswith("."))
        for name in files:
            if name.lower().endswith(IMAGE_SUFFIXES) and not name.startswith("."):
                paths.append(pathlib.Path(root) / name)
    paths.sort(key=lambda path: path.relative_to(folder).as_posix())
    if not paths:
        raise KitmDataError(f"--images={folder} holds no image files ({', '.join(IMAGE_SUFFIXES)}).")
    digest = hashlib.sha256()
    for path in paths:
        try:
            stat = path.stat()
        except OSError:  # a link loop or a dangling link: skipped when read, and named
            stat = path.lstat()
        digest.update(f"{path.relative_to(folder).as_posix()}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    resolved = [_resolved(path) for path in paths]
    return IndexSource(kind="folder", description={"folder": str(folder.resolve())}, paths=resolved,
                       read=lambda positions: [read_file(resolved[i]) for i in positions],
                       signature=digest.hexdigest())


def _resolved(path: pathlib.Path) -> str:
    try:
        return str(path.resolve())
    except (OSError, RuntimeError):  # a symbolic link loop (Python < 3.13 raises RuntimeError)
        return str(path.absolute())


def read_file(path: str | os.PathLike) -> bytes | OSError:
    """The bytes of the file at `path`, or the OSError that stopped reading them: one unreadable file (a link loop,
    a link to a folder, no permission) is skipped and named by the build, which goes on."""
    try:
        return pathlib.Path(path).read_bytes()
    except OSError as error:
        return error


def unreadable(error: OSError) -> str:
    """Why a file could not be read, as the build's manifest lists it."""
    if error.errno == errno.ELOOP:
        return "unreadable: a symbolic link loop (the link leads back to itself)"
    if isinstance(error, IsADirectoryError):
        return "unreadable: a folder (a link to one), not an image file"
    if isinstance(error, FileNotFoundError):
        return "unreadable: a link to a file that does not exist"
    return f"unreadable: {error.strerror or error}"


def dataset_splits(text: str, available: Sequence[str]) -> list[str]:
    """--split: one split, several comma-separated, or "all" (the dataset's splits in train, val, test order)."""
    if text.strip() == "all":
        return [split for split in ("train", "val", "test") if split in available]
    splits = [part.strip() for part in text.split(",") if part.strip()]
    missing = [split for split in splits if split not in available]
    if not splits or missing:
        raise KitmDataError(f"--split={text!r}: the dataset has the splits {sorted(available)}; give one, several "
                            "comma-separated, or 'all'.")
    return splits


def dataset_source(data_dir: str | os.PathLike, split: str = "test") -> IndexSource:
    """The images, captions and (synthetic world) truth facts of `split` of the built dataset at `data_dir`."""
    from kitm.data import schema
    from kitm.data.split_reading import read_split

    data_dir = pathlib.Path(data_dir)
    info = schema.load_info(data_dir)
    if info.image_mode != "encoded":
        raise KitmDataError(f"The dataset at {data_dir} stores image {info.image_mode} ('{info.image_mode}' mode), "
                            "not the images themselves: an index needs pictures to show; build the dataset with its "
                            "images (python -m kitm.data.build --images=...).")
    splits = dataset_splits(split, list(info.splits))
    parts = [read_split(data_dir, name) for name in splits]
    images = [image for part in parts for image in part.images]
    paths = [f"{part.split}/{key}" for part in parts for key in part.image_keys]
    cpi = info.captions_per_image
    captions = [[part.captions[i * cpi + j] for j in range(cpi)] for part in parts for i in range(part.num_images)]
    truth = all(part.scene_facts is not None for part in parts)
    digest = hashlib.sha256((data_dir / schema.INFO_FILE).read_bytes() + ",".join(splits).encode())
    return IndexSource(
        kind="dataset", description={"data_dir": str(data_dir.resolve()), "splits": splits, "name": info.name},
        paths=paths, read=lambda positions: [images[i] for i in positions], captions=captions,
        scene_facts=np.concatenate([part.scene_facts for part in parts]) if truth else None,
        caption_facts=np.concatenate([part.caption_facts for part in parts]) if truth else None,
        image_size=info.image_size, world=info.truth_world if truth else None, signature=digest.hexdigest())


def open_source(images: str | os.PathLike, split: str = "test") -> IndexSource:
    """A dataset when `images` holds dataset.json, else a folder of image files."""
    from kitm.data import schema

    if (pathlib.Path(images) / schema.INFO_FILE).is_file():
        return dataset_source(images, split)
    return folder_source(images)


def _encode(image, fmt: str) -> bytes:
    buffer = io.BytesIO()
    if fmt == "JPEG":
        image.convert("RGB").save(buffer, "JPEG", quality=90)
    else:
        image.save(buffer, "PNG")
    return buffer.getvalue()


def _too_large(size) -> str | None:
    width, height = size
    if width * height <= MAX_IMAGE_PIXELS:
        return None
    return (f"too large: {width} x {height} pixels ({width * height / 1e6:,.0f} MP) where at most "
            f"{MAX_IMAGE_PIXELS / 1e6:.0f} MP are decoded (kitm.index.sources.MAX_IMAGE_PIXELS); scale it down")


def prepare_image(data: bytes, *, thumbnail_side: int = THUMBNAIL_SIDE) -> PreparedImage:
    """The bytes to embed (upright, a decodable format) and a thumbnail of at most `thumbnail_side` px a side.

    An image declaring more than `MAX_IMAGE_PIXELS` pixels in its header is refused (`too_large`) before it is
    decoded; so is any file Pillow cannot read (`error` says why)."""
    from PIL import Image, ImageOps, UnidentifiedImageError

    try:
        # Pillow warns from its own limit (89 MP) up; ours is lower and refuses before decoding.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            opened = Image.open(io.BytesIO(data))
        with opened:
            fmt = opened.format
            if (too_large := _too_large(opened.size)) is not None:
                return PreparedImage(None, None, error=too_large, too_large=True)
            orientation = opened.getexif().get(_EXIF_ORIENTATION, 1)
            opened.load()
            image = ImageOps.exif_transpose(opened) if orientation not in (None, 1) else opened.copy()
    except Image.DecompressionBombError as error:  # over twice Pillow's limit: refused by Pillow at open
        size = re.search(r"\((\d+) pixels\)", str(error))
        pixels = f" ({int(size.group(1)) / 1e6:,.0f} MP)" if size else ""
        return PreparedImage(None, None, too_large=True,
                             error=f"too large{pixels}: at most {MAX_IMAGE_PIXELS / 1e6:.0f} MP are decoded "
                                   "(kitm.index.sources.MAX_IMAGE_PIXELS); scale it down")
    except UnidentifiedImageError:
        return PreparedImage(None, None, error="not a PNG, JPEG, GIF, BMP or WebP image (Pillow cannot identify it)")
    except (OSError, SyntaxError, ValueError) as error:
        return PreparedImage(None, None, error=f"a damaged image ({error})")
    mode = image.mode
    if image.mode not in ("RGB", "L", "RGBA", "P"):
        image = image.convert("RGB")
    # TensorFlow's JPEG decoder cannot convert CMYK (print scans) to RGB: those are re-encoded too.
    if fmt in _DECODABLE and orientation in (None, 1) and not (fmt == "JPEG" and mode not in ("RGB", "L")):
        model_bytes = data
    else:
        model_bytes = _encode(image, "JPEG" if fmt == "JPEG" else "PNG")
    if max(image.size) <= thumbnail_side and fmt in ("PNG", "JPEG") and orientation in (None, 1):
        return PreparedImage(model_bytes, data, "image/png" if fmt == "PNG" else "image/jpeg")
    thumb = image.copy()
    thumb.thumbnail((thumbnail_side, thumbnail_side))
    return PreparedImage(model_bytes, _encode(thumb, "JPEG"), "image/jpeg")


def source_manifest(source: IndexSource) -> dict:
    """The source's part of an index manifest (JSON-ready)."""
    return json.loads(json.dumps({"kind": source.kind, **source.description, "num_images": source.num_images,
                                  "has_captions": source.captions is not None,
                                  "has_truth": source.scene_facts is not None}))

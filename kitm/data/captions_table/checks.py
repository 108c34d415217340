"""The checks of a caption table's images that need their bytes: every image decoded once before anything is
written (so a truncated JPEG stops the build naming its row instead of killing training in its second epoch), and
the hash of its bytes kept for the leakage report (kitm.data.captions_table, "images")."""

from __future__ import annotations

import concurrent.futures
import hashlib
import io
import os
from collections.abc import Sequence

from PIL import Image, UnidentifiedImageError

from kitm.data.captions_table.grouping import TableImage
from kitm.data.captions_table.reading import _Where
from kitm.errors import KitmDataError, option
from kitm.progress import progress_bar

# PIL's names for the formats tf.io.decode_image reads (MPO: a phone's multi-picture JPEG, decoded as JPEG).
DECODABLE_FORMATS = ("JPEG", "MPO", "PNG", "GIF", "BMP", "WEBP")
LISTED = 100  # unreadable images listed by name in dataset.json (the count is always whole)
SHOWN = 3  # ... and in a message or the summary


def image_problem(data: bytes) -> str | None:
    """Why these bytes are not an image TensorFlow decodes (None when they are): decoded in full, since PIL's
    `verify` reads only the headers and passes a JPEG cut short."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            fmt = image.format
            image.load()  # every pixel: a truncated file raises here ("image file is truncated")
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, Image.DecompressionBombError) as error:
        if "truncated" in str(error).lower():
            return f"does not decode: it is cut short ({error}; an interrupted copy or download?)"
        return f"does not decode ({error})"
    if fmt not in DECODABLE_FORMATS:
        return f"is {fmt}; TensorFlow decodes JPEG, PNG, GIF, BMP and WebP: convert it, or remove its rows"
    return None


def _check(image: TableImage) -> tuple[str | None, str | None]:
    """(sha256 of the file's bytes, why it is unreadable or None)."""
    try:
        data = image.path.read_bytes()
    except OSError as error:
        return None, f"cannot be read ({error.strerror or error})"
    return hashlib.sha256(data).hexdigest(), image_problem(data)


def readable_images(table_images: Sequence[TableImage], missing_images: str, where: _Where, *,
                    progress: bool = False) -> tuple[list[TableImage], int, list[str]]:
    """The images that decode (each with its `sha256`), how many do not, and the first `LISTED` of those as
    "line L: <path> <why>". Every image is decoded before one is refused, so the message counts them all; with
    `missing_images` "stop" any such image stops the build naming its row, with "skip" they are left out."""
    workers = min(8, os.cpu_count() or 1)  # PIL decodes outside the GIL
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        results = list(progress_bar(pool.map(_check, table_images), total=len(table_images),
                                    desc="decoding images", unit="image", disable=not progress))
    kept, bad = [], []
    for image, (digest, problem) in zip(table_images, results):
        if problem is None:
            image.sha256 = digest
            kept.append(image)
        else:
            bad.append((image, problem))
    if bad and missing_images == "stop":
        image, problem = bad[0]
        others = (f" ({len(bad)} of the table's {len(table_images)} images do not decode; rows "
                  + ", ".join(str(other.line) for other, _ in bad[:SHOWN + 1]) + (", ..." if len(bad) > SHOWN + 1
                                                                                    else "") + ")"
                  if len(bad) > 1 else "")
        raise KitmDataError(f"{where(image.line, 'image')}: image {image.path} {problem}{others}. Replace the file "
                            f"or remove its rows, or pass {option('missing_images')}=skip to leave such images out "
                            "(they are listed in the summary and dataset.json). Nothing was written.")
    return kept, len(bad), [f"line {image.line}: {image.path} {problem}" for image, problem in bad[:LISTED]]


def identical_across_splits(table_images: Sequence[TableImage], splits: Sequence[str],
                            examples: int = LISTED) -> dict:
    """Images whose bytes are identical (same sha256) but that sit in different splits: a copy of a training image
    under another name in val or test is test leakage, which R@K then rewards. The counts per split (images of
    val and test with a copy in another split), the groups (one per hash), and the first groups by name."""
    by_hash: dict[str, list[tuple[TableImage, str]]] = {}
    for image, split in zip(table_images, splits):
        if image.sha256 is not None:
            by_hash.setdefault(image.sha256, []).append((image, split))
    groups = [members for members in by_hash.values() if len({split for _, split in members}) > 1]
    counts = {split: sum(1 for members in groups for _, member_split in members if member_split == split)
              for split in ("val", "test")}
    return {"groups": len(groups), "images": counts,
            "examples": [{"sha256": members[0][0].sha256,
                          "images": [f"{image.key} ({split}, line {image.line})" for image, split in members]}
                         for members in groups[:examples]]}

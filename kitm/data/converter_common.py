"""What every dataset converter of `python -m kitm.data.build` shares.

A converter reads its source into a list of `Entry` (one image: key, split, its captions, where its pixels or
features are), applies the same rules to every source, and hands the list to `write_dataset`:

* captions: each image keeps its first C (`CaptionRules.select`); an empty caption stops the build naming the
  image and the caption number, or (``empty="skip"``) is dropped and counted; an image left with fewer than C
  captions stops the build, or (``few="skip"``) is left out and counted. Nothing is dropped silently: every
  count is printed and stored in dataset.json's `source`.
* images on disk: absent files stop the build naming one, or (``missing_images="skip"``) are left out and counted.
* `--limit N`: the first N images of each split, in the source's order (images skipped afterwards are not
  replaced).
* output: `<out>/.cache/build.json` holds the build's parameters (written before anything else), so a resumed
  build made with other flags stops instead of mixing two datasets; the relevance rows
  (`kitm.relevance.rows.compute_relevance_rows`, caption ids image_id * C + k) go into every record; shards are
  written by `kitm.data.records.write_shards` (`.tmp`, then rename; existing shards are kept) and dataset.json last.
"""

from __future__ import annotations

import collections
import dataclasses
import errno
import json
import os
import pathlib
import re
import stat
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from PIL import Image, UnidentifiedImageError
from kitm.progress import progress_bar as tqdm

from kitm.data import schema
from kitm.data.records import make_example, write_shards
from kitm.errors import KitmDataError
from kitm.files import write_text_atomically
from kitm.relevance.image_features import ImageFiles, ImageInput, ImageNeighborOptions
from kitm.relevance.rows import DEFAULT_NEIGHBORS_K, ROW_SOURCES, compute_relevance_rows

BUILD_PARAMETERS_FILE = pathlib.Path(".cache") / "build.json"
POLICIES = ("stop", "skip")


@dataclasses.dataclass
class Entry:
    """One image of a source: `key` (its name in the source), `split` (train/val/test), its captions, and
    `location`, which the converter uses to find its pixels or features (a relative path, a row number...)."""

    key: str
    split: str
    captions: list[str]
    location: Any = None


# Control characters a caption cannot mean (C0 but tab, line feed and carriage return, which a quoted multi-line
# caption holds; DEL; C1): a NUL comes from a file saved as UTF-16 or a binary field pasted in, and would be stored
# and tokenized silently.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def control_character(text: str) -> str | None:
    """The first control character of `text` a caption or path cannot hold, named with its position
    ("U+0000 at character 12"), or None."""
    match = _CONTROL.search(text)
    if match is None:
        return None
    code = ord(match.group())
    name = {0: " (NUL)", 0x1b: " (ESC)", 0x7f: " (DEL)"}.get(code, "")
    return f"U+{code:04X}{name} at character {match.start() + 1}"


def file_problem(path: str | os.PathLike) -> str | None:
    """Why `path` is not a readable regular file, in the words a user needs ("is a folder", "is a symbolic link
    loop"...), or None when it is one. `is_file()` folds all of these into False, and "does not exist" sent users
    looking for a file that is there."""
    path = pathlib.Path(path)
    try:
        status = path.stat()
    except OSError as error:
        if error.errno == errno.ELOOP:
            return "is a symbolic link loop (following its links leads back to a link already followed)"
        if isinstance(error, PermissionError):
            return "cannot be reached (permission denied on it or a folder above it)"
        if path.is_symlink():
            return f"is a symbolic link to {os.readlink(path)}, which does not exist"
        if isinstance(error, FileNotFoundError):
            return "does not exist"
        return f"cannot be reached ({error.strerror or error})"
    if stat.S_ISDIR(status.st_mode):
        return "is a folder, not an image file"
    if not stat.S_ISREG(status.st_mode):
        return "is not a regular file (a pipe, socket or device)"
    return None


def check_policy(name: str, value: str) -> None:
    if value not in POLICIES:
        raise KitmDataError(f"{name} must be one of {POLICIES}; got {value!r}.")


@dataclasses.dataclass
class CaptionRules:
    """How a converter turns an image's source captions into exactly `captions_per_image` captions.

    `counts` gathers what was dropped (printed by `report` and stored in dataset.json):
    ``empty_captions_dropped``, ``images_with_too_few_captions``, ``images_with_extra_captions`` (kept their first C).
    """

    captions_per_image: int = 5
    empty: str = "stop"
    few: str = "stop"
    counts: collections.Counter = dataclasses.field(default_factory=collections.Counter)

    def __post_init__(self):
        check_policy("empty_captions", self.empty)
        check_policy("few_captions", self.few)
        if self.captions_per_image < 1:
            raise KitmDataError(f"captions_per_image must be at least 1; got {self.captions_per_image}.")

    def select(self, origin: str, key: str, numbered: Sequence[tuple[Any, str]]) -> list[str] | None:
        """The first C captions of image `key` (None: leave the image out).

        Args:
            origin: the source file, named in errors.
            numbered: (caption number as the source names it, caption text) in the source's caption order.
        """
        kept = []
        for number, caption in numbered:
            if not isinstance(caption, str):
                raise KitmDataError(f"{origin}: image {key}, caption {number} is not text ({caption!r}).")
            caption = caption.strip()
            control = control_character(caption)
            if control is not None:
                raise KitmDataError(f"{origin}: image {key}, caption {number} holds control character {control} "
                                    f"({caption[:60]!r}); remove it from the source (a NUL often means a file saved "
                                    "as UTF-16, or binary data pasted in).")
            if not caption:
                if self.empty == "stop":
                    raise KitmDataError(f"{origin}: image {key}, caption {number} is empty ({caption!r}); pass "
                                        "--empty_captions=skip to drop empty captions.")
                self.counts["empty_captions_dropped"] += 1
                continue
            kept.append(caption)
        if len(kept) < self.captions_per_image:
            if self.few == "stop":
                dropped = len(numbered) - len(kept)
                note = f" ({dropped} empty one(s) dropped)" if dropped else ""
                raise KitmDataError(f"{origin}: image {key} has {len(kept)} captions{note}; kitm needs "
                                    f"{self.captions_per_image}. Pass --few_captions=skip to leave such images out.")
            self.counts["images_with_too_few_captions"] += 1
            return None
        if len(kept) > self.captions_per_image:
            self.counts["images_with_extra_captions"] += 1
        return kept[:self.captions_per_image]

    def report(self) -> dict[str, int]:
        """Print what was dropped and return the counts (for dataset.json)."""
        if self.counts["empty_captions_dropped"]:
            print(f"Dropped {self.counts['empty_captions_dropped']} empty caption(s) (--empty_captions=skip).")
        if self.counts["images_with_too_few_captions"]:
            print(f"Left out {self.counts['images_with_too_few_captions']} image(s) with fewer than "
                  f"{self.captions_per_image} captions (--few_captions=skip).")
        if self.counts["images_with_extra_captions"]:
            print(f"{self.counts['images_with_extra_captions']} image(s) have more than {self.captions_per_image} "
                  f"captions; they keep their first {self.captions_per_image}.")
        return {name: int(self.counts[name]) for name in
                ("empty_captions_dropped", "images_with_too_few_captions", "images_with_extra_captions")}


def limit_per_split(entries: Sequence[Entry], limit: int | None) -> list[Entry]:
    """The first `limit` entries of each split, in the given order (all of them for None)."""
    if limit is None:
        return list(entries)
    if isinstance(limit, bool) or not isinstance(limit, (int, np.integer)) or limit < 1:
        raise KitmDataError(f"--limit must be a positive number of images per split; got {limit!r}.")
    seen: collections.Counter = collections.Counter()
    kept = []
    for entry in entries:
        if seen[entry.split] < limit:
            seen[entry.split] += 1
            kept.append(entry)
    return kept


def drop_missing_images(entries: Sequence[Entry], images_dir: str | os.PathLike, missing_images: str,
                        origin: str) -> tuple[list[Entry], int]:
    """Entries whose image file `images_dir / entry.location` exists, and how many were left out.

    With ``missing_images="stop"`` an absent file is an error naming the first one and the count.
    """
    check_policy("missing_images", missing_images)
    images_dir = pathlib.Path(images_dir)
    if not images_dir.is_dir():
        raise KitmDataError(f"Image folder {images_dir} does not exist.")
    problems = [(entry, file_problem(images_dir / entry.location)) for entry in entries]
    absent = [entry for entry, problem in problems if problem is not None]
    if absent and missing_images == "stop":
        first = next(problem for _, problem in problems if problem is not None)
        raise KitmDataError(f"{len(absent)} image(s) named in {origin} are missing under {images_dir}, e.g. "
                            f"{images_dir / absent[0].location}, which {first}; pass --missing_images=skip to leave "
                            "them out.")
    if absent:
        print(f"Skipping {len(absent)} image(s) missing under {images_dir} (first: {absent[0].location}).")
        gone = {id(entry) for entry in absent}
        entries = [entry for entry in entries if id(entry) not in gone]
    return list(entries), len(absent)


def read_image_bytes(path: pathlib.Path) -> bytes:
    """The file's bytes, after checking that they decode as an image (naming the file if not)."""
    try:
        with Image.open(path) as image:
            image.verify()
    except (UnidentifiedImageError, OSError, SyntaxError) as error:
        raise KitmDataError(f"Image {path} cannot be read as an image: {error}") from error
    return path.read_bytes()


def image_files(images_dir: str | os.PathLike | None) -> tuple[str, Callable[[Entry], Mapping[str, Any]]]:
    """(image_mode, image_of) for `write_dataset` when images are optional: the encoded files under `images_dir`
    (at each entry's location), or a captions-only dataset (image_mode "none") without it."""
    if images_dir is None:
        return "none", lambda entry: {}
    images = pathlib.Path(images_dir)
    return "encoded", lambda entry: {"image_encoded": read_image_bytes(images / entry.location)}


def image_file_input(images_dir: str | os.PathLike | None) -> Callable[[str, Sequence[Entry]], ImageInput] | None:
    """`write_dataset`'s `image_input` for images stored as files under `images_dir` (None: captions-only)."""
    if images_dir is None:
        return None
    images = pathlib.Path(images_dir)
    return lambda split, entries: ImageFiles([str(images / entry.location) for entry in entries])


def build_parameters(dataset: str, *, num_shards: int, empty_captions: str, few_captions: str, limit: int | None,
                     relevance: Sequence[str] | str, sentence_model: str, neighbors_k: int,
                     image_neighbors: ImageNeighborOptions | None, **source: Any) -> dict[str, Any]:
    """The parameters a converter's build is resumed under (<out>/.cache/build.json): its own `source` entries
    plus those every converter shares."""
    return {"dataset": dataset, **source, "num_shards": num_shards, "empty_captions": empty_captions,
            "few_captions": few_captions, "limit": limit, "relevance": list(relevance_sources(relevance)),
            "sentence_model": sentence_model, "neighbors_k": neighbors_k,
            **image_neighbor_parameters(image_neighbors)}


def image_neighbor_parameters(image_neighbors: ImageNeighborOptions | None) -> dict[str, Any]:
    """The build-parameter entry of the image-space neighbour rows; empty when there are none, so that builds
    made before the option existed resume under the same parameters."""
    if image_neighbors is None or not image_neighbors.enabled:
        return {}
    return {"image_neighbors": image_neighbors.parameters()}


def read_text_lines(path: str | os.PathLike) -> list[str]:
    """A UTF-8 text file's lines (without line ends), naming the file when it is absent or not UTF-8."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise KitmDataError(f"{path} does not exist.")
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as error:
        raise KitmDataError(f"{path} is not UTF-8 text ({error}).") from error


def read_json(path: str | os.PathLike, what: str) -> Any:
    path = pathlib.Path(path)
    if not path.is_file():
        raise KitmDataError(f"{what} {path} does not exist.")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise KitmDataError(f"{what} {path} is not valid JSON: {error}") from error


def relevance_sources(relevance: Sequence[str] | str) -> tuple[str, ...]:
    """Normalise a relevance selection ("cider,sbert", "none", a sequence) to ROW_SOURCES order."""
    names = [name.strip() for name in relevance.split(",")] if isinstance(relevance, str) else list(relevance)
    names = [name for name in names if name]
    if names == ["none"]:
        return ()
    unknown = sorted(set(names) - set(ROW_SOURCES))
    if unknown:
        raise KitmDataError(f"Unknown relevance source(s) {unknown}: choose from {list(ROW_SOURCES)}, "
                            "comma-separated, or 'none'.")
    return tuple(name for name in ROW_SOURCES if name in names)


def _builder_of(out: pathlib.Path) -> str:
    """What built the dataset or shards in `out` (which has no build parameters), read from its dataset.json: the
    synthetic world that `python -m kitm.launch` builds on demand (and `build_synthetic` from Python), a dataset of
    another schema version (an older kitm), or shards of an unfinished build of unknown origin."""
    try:
        info = json.loads((out / schema.INFO_FILE).read_text())
    except (OSError, ValueError):
        return "shards but no readable dataset.json (an unfinished build by another tool or kitm version)"
    source = info.get("source") if isinstance(info, dict) else None
    source = source if isinstance(source, dict) else {}
    if info.get("schema_version") != schema.SCHEMA_VERSION:
        return f"a dataset of schema version {info.get('schema_version')} (built by an older kitm)"
    if source.get("generator") == "kitm.data.synthetic.generate_world":
        return (f"the synthetic world that python -m kitm.launch builds on demand for --dataset=synthetic "
                f"({source.get('num_scenes')} scenes, seed {source.get('seed')}; or build_synthetic called from "
                "Python): the launcher reads it as it is")
    return f"a dataset ({info.get('name')!r}) built without python -m kitm.data.build (from Python?)"


def claim_output(out: str | os.PathLike, parameters: Mapping[str, Any]) -> None:
    """Record the build's parameters in `<out>/.cache/build.json`, or check them against a previous build's.

    Shards and relevance caches already under `out` are reused by a resumed build, so they must come from
    the same parameters: otherwise the dataset would mix two builds. A folder holding shards or dataset.json
    but no build.json (an older build) is refused for the same reason. A previous build that stopped before
    leaving any shard or cache (e.g. on an unavailable sentence model) is simply replaced.
    """
    out = pathlib.Path(out)
    path = out / BUILD_PARAMETERS_FILE
    wanted = json.loads(json.dumps(dict(parameters), sort_keys=True, default=str))
    has_output = ((out / schema.INFO_FILE).exists() or any(out.glob("*.tfrecord"))
                  or any((out / BUILD_PARAMETERS_FILE.parent).glob("*.npz")))
    if path.is_file() and has_output:
        try:
            previous = json.loads(path.read_text())
        except json.JSONDecodeError:
            previous = None
        if previous != wanted:
            previous = previous if isinstance(previous, dict) else {}
            changed = sorted(key for key in set(previous) | set(wanted) if previous.get(key) != wanted.get(key))
            details = "; ".join(f"{key}: before {previous.get(key)!r}, now {wanted.get(key)!r}" for key in changed)
            raise KitmDataError(
                f"{out} holds a build made with other parameters ({details or 'unreadable ' + str(path)}). "
                f"Use a fresh --out, or resume with the same flags as before (stored in {path}).")
        return
    if has_output and not path.is_file():
        raise KitmDataError(f"{out} already holds {_builder_of(out)}, without the {BUILD_PARAMETERS_FILE} a build "
                            "by python -m kitm.data.build records, so this build cannot tell whether it would mix "
                            "two datasets. Use a fresh --out, or delete the folder to rebuild it here.")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(path, json.dumps(wanted, indent=2, sort_keys=True))


def write_dataset(out: str | os.PathLike, entries: Sequence[Entry], *, name: str, parameters: Mapping[str, Any],
                  image_mode: str, image_of: Callable[[Entry], Mapping[str, Any]], captions_per_image: int = 5,
                  feature_dim: int | None = None, relevance: Sequence[str] = ROW_SOURCES,
                  sentence_model: str | None = None, neighbors_k: int = DEFAULT_NEIGHBORS_K, num_shards: int = 16,
                  source: Mapping[str, Any] | None = None, progress: bool = True,
                  image_neighbors: ImageNeighborOptions | None = None,
                  image_input: Callable[[str, Sequence[Entry]], ImageInput] | None = None) -> schema.DatasetInfo:
    """Write `entries` as a kitm dataset under `out`, with relevance rows, resumably; dataset.json last.

    Image ids are the entries' positions (0..N-1), caption ids image_id * C + k; each split's records follow
    the entries' order. `image_of(entry)` gives the image part of `make_example`'s arguments (e.g.
    ``{"image_encoded": bytes}``; ``{}`` for image_mode "none"). The training split gets `num_shards`
    shards, the others a quarter (at least one). With `image_neighbors` (a space other than "none") the records
    also get the `image_neighbors` slot, from `image_input(split, entries)` (the split's images in record order).
    """
    if image_mode not in schema.IMAGE_MODES:
        raise KitmDataError(f"Unknown image_mode {image_mode!r}; expected one of {schema.IMAGE_MODES}.")
    if not entries:
        raise KitmDataError(f"No images left to write to {out}.")
    if num_shards < 1:
        raise KitmDataError(f"--num_shards must be at least 1; got {num_shards}.")
    sources = relevance_sources(relevance)
    out = pathlib.Path(out)
    claim_output(out, parameters)
    members_of = {split: [(image_id, entry) for image_id, entry in enumerate(entries) if entry.split == split]
                  for split in schema.SPLITS}
    members_of = {split: members for split, members in members_of.items() if members}
    images = None
    if image_neighbors is not None and image_neighbors.enabled:
        if image_input is None:
            raise KitmDataError(f"--image_neighbors={image_neighbors.space} finds neighbours among the images, but "
                                f"this build of {name} has none (image_mode '{image_mode}', captions only): add "
                                "--images=<image folder>, or drop --image_neighbors.")
        images = {split: image_input(split, [entry for _, entry in members]) for split, members in members_of.items()}
    rows = compute_relevance_rows(
        out, {split: [entry.captions for _, entry in members] for split, members in members_of.items()},
        {split: np.array([image_id for image_id, _ in members])[:, None] * captions_per_image
         + np.arange(captions_per_image) for split, members in members_of.items()},
        captions_per_image=captions_per_image, sources=sources, sentence_model=sentence_model,
        neighbors_k=neighbors_k, progress=progress, image_neighbors=image_neighbors, images=images)
    splits = {}
    bar = tqdm(total=len(entries), desc=f"writing {out}", unit="image", disable=not progress)
    for split, members in members_of.items():

        def records(index_range, members=members, split=split):
            for position in index_range:
                image_id, entry = members[position]
                yield make_example(
                    image_id=image_id, image_key=entry.key, split=split, captions=entry.captions,
                    caption_ids=[image_id * captions_per_image + k for k in range(captions_per_image)],
                    extra=rows.features(split, position), **image_of(entry))

        shards = num_shards if split == "train" else max(1, num_shards // 4)
        names, sizes = write_shards(out, split, len(members), shards, records, progress=bar.update)
        splits[split] = {"num_images": len(members), "shards": names, "bytes": sizes}
    bar.close()
    info = schema.DatasetInfo(
        name=name, captions_per_image=captions_per_image, image_mode=image_mode, splits=splits,
        feature_dim=feature_dim, relevance=rows.meta,
        source={**(source or {}), "relevance_rows": list(sources), "build_parameters": str(BUILD_PARAMETERS_FILE)})
    schema.save_info(out, info)
    return info

"""Captions grouped by image, from the sources `python -m kitm.data.world_stats` compares.

- a built kitm dataset (``dataset.json`` and shards): one split's captions, in record order;
- a synthetic world generated in memory (no records, no pixels: only its captions are needed);
- a reference: Flickr8K's own text files (a folder with ``Flickr8k.token.txt`` and the split lists: one split's
  images in list order), your own caption table (CSV / JSON Lines, as `python -m kitm.data.build
  --dataset=captions_table` reads it: captions grouped by image in order of first appearance), or a built dataset.
"""

from __future__ import annotations

import os
import pathlib

import numpy as np

from kitm.errors import KitmDataError


def dataset_groups(data_dir: str | os.PathLike, split: str = "test") -> list[list[str]]:
    """A built dataset's captions of ``split`` by image, in record order (only the captions are parsed)."""
    import tensorflow as tf

    from kitm.data import schema
    from kitm.data.records import read_records

    info = schema.load_info(data_dir)
    if split not in info.splits:
        raise KitmDataError(f"The dataset at {data_dir} has no split '{split}'; it has {sorted(info.splits)}.")
    spec = {"captions": tf.io.FixedLenFeature([info.captions_per_image], tf.string)}
    parse = tf.autograph.experimental.do_not_convert(
        lambda path, record: tf.io.parse_single_example(record, spec)["captions"])
    records = read_records(info.shard_paths(data_dir, split), deterministic=True).map(parse).batch(4096)
    return [[caption.decode("utf-8") for caption in row] for batch in records for row in batch.numpy()]


def world_groups(world: str, *, num_scenes: int = 3000, seed: int = 0, image_size: int = 64,
                 caption_style: str = "literal", split: str = "test") -> list[list[str]]:
    """The captions of ``split`` of a synthetic world generated in memory (the launcher's world for these
    arguments), in scene order."""
    from kitm.data.synthetic import generate_world

    generated = generate_world(num_scenes, seed=seed, image_size=image_size, caption_style=caption_style,
                               world=world, render=False)
    return [generated.captions[i] for i in generated.split_indices(split)]


def world_examples(world: str, count: int, *, num_scenes: int = 3000, seed: int = 0, image_size: int = 64,
                   caption_style: str = "literal", split: str = "test") -> tuple[np.ndarray, list[list[str]]]:
    """The first ``count`` images of ``split`` of a synthetic world and their captions (rendered: for a picture)."""
    from kitm.data.synthetic import generate_world

    generated = generate_world(num_scenes, seed=seed, image_size=image_size, caption_style=caption_style,
                               world=world)
    chosen = generated.split_indices(split)[:count]
    return generated.images[chosen], [generated.captions[i] for i in chosen]


def dataset_examples(data_dir: str | os.PathLike, count: int, split: str = "test"
                     ) -> tuple[np.ndarray | None, list[list[str]]]:
    """The first ``count`` records of a built dataset's ``split``: decoded images (None for a dataset without
    pixels) and their captions."""
    import tensorflow as tf

    from kitm.data import schema
    from kitm.data.split_reading import read_split

    with_pixels = schema.load_info(data_dir).image_mode == "encoded"
    data = read_split(data_dir, split, limit=count, with_images=with_pixels)
    cpi = data.info.captions_per_image
    groups = [data.captions[i * cpi:(i + 1) * cpi] for i in range(len(data.image_ids))]
    if not with_pixels:
        return None, groups
    return np.stack([tf.io.decode_image(encoded, channels=3).numpy() for encoded in data.images]), groups


def _flickr8k_groups(folder: pathlib.Path, split: str) -> list[list[str]]:
    from kitm.data.flickr8k import SPLIT_FILES, TOKEN_FILE, read_token_file

    captions = read_token_file(folder / TOKEN_FILE)
    names = [line.strip() for line in (folder / SPLIT_FILES[split]).read_text().splitlines() if line.strip()]
    missing = [name for name in names if name not in captions]
    if missing:
        raise KitmDataError(f"{folder / SPLIT_FILES[split]} names {len(missing)} images without captions in "
                            f"{folder / TOKEN_FILE}, e.g. {missing[0]}.")
    return [[caption for _, caption in captions[name]] for name in names]


def _table_groups(path: pathlib.Path) -> list[list[str]]:
    from kitm.data.captions_table.reading import read_table

    rows, _ = read_table(path)
    by_image: dict[str, list[str]] = {}
    for row in rows:
        by_image.setdefault(row.image, []).append(row.caption)
    return list(by_image.values())


def reference_groups(path: str | os.PathLike, split: str = "test") -> list[list[str]]:
    """Captions by image of a reference (module docstring), told apart by what ``path`` is."""
    from kitm.data import schema
    from kitm.data.flickr8k import TOKEN_FILE

    path = pathlib.Path(path)
    if path.is_dir() and (path / TOKEN_FILE).is_file():
        return _flickr8k_groups(path, split)
    if path.is_dir() and (path / schema.INFO_FILE).is_file():
        return dataset_groups(path, split)
    if path.is_file():
        return _table_groups(path)
    raise KitmDataError(f"--reference={path}: expected Flickr8K's text folder (with {TOKEN_FILE}), a built kitm "
                        f"dataset (with {schema.INFO_FILE}) or a caption table (.csv / .jsonl); found "
                        f"{'a folder with neither' if path.is_dir() else 'nothing there'}.")


def first_images(groups: list[list[str]], limit: int | None) -> list[list[str]]:
    """The first ``limit`` images (all for None): the pairs' cost grows with the square of the count."""
    return groups if limit is None else groups[:int(np.clip(limit, 2, None))]

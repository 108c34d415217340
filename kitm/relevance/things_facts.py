"""The things world's fact format: vocabularies, field layouts and the rules of its relations and counts.

The things world (`kitm.data.synthetic.things`) is kitm's default synthetic world: everyday objects (COCO-like
categories) with colours, sizes and patterns, in a setting (a park, a kitchen, a beach...). It writes these facts for
every scene and caption, and its exact relevance (`kitm.relevance.things_truth`) reads them; the records store them
(`relevance/truth/*`). The format lives in kitm.relevance because data flows from kitm.data into kitm.relevance.

Scene facts
-----------
``scene_facts[n, o]`` (int32, ``SCENE_FACT_FIELDS``): setting, category, colour, size, pattern, centre_x, centre_y of
object o of scene n, as indices into ``SETTINGS``, ``CATEGORIES``, ``COLOURS``, ``SIZES``, ``PATTERNS`` and pixels.
Every present object of a scene carries the scene's setting (one value per scene, repeated so that every row has one
layout); an absent (padding) object is all -1; object 0 is always present.

Caption facts
-------------
``caption_facts[n, c]`` (int32, width ``CAPTION_FACT_WIDTH`` = 12): the setting stated (-1: none), mention 0 (5 ints,
``MENTION_FIELDS``), mention 1 (5 ints), the relation (index into ``RELATIONS``, -1: none). A mention is
(noun, count, colour, size, pattern): the noun is a category (0 .. C-1) or a supercategory (C + s, "an animal",
"people"); -1 in another field means "not stated". Mention 0 always states its noun; mention 1 is absent when its
noun is -1 (then all of it is -1). A relation reads "mention 0 REL mention 1" whatever the word order of the text.

Counts: ``count`` is 1 .. ``MAX_OBJECTS`` (exactly that many objects fit the noun) or ``COUNT_SEVERAL`` (three or
more: "several", "a group of"). A singular "a dog" states no count (an image with two dogs has a dog).

Relations, from the centres, with ``gap = image_size / 8`` (``relation_gap``) and ``reach = image_size * 3 / 8``
(``near_reach``)::

    A left of B  iff  x_A < x_B - gap        A right of B  iff  x_A > x_B + gap
    A above B    iff  y_A < y_B - gap        A below B     iff  y_A > y_B + gap
    A next to B  iff  max(|x_A - x_B|, |y_A - y_B|) <= reach

(y grows downwards, as in the image array). Captions state only relations that hold.
"""

from __future__ import annotations

import numpy as np

# The categories, each with its supercategory (an index into SUPERCATEGORIES): COCO's most common things that a
# 64-pixel drawing can show apart.
CATEGORY_SUPERCATEGORY = (
    ("man", "person"), ("woman", "person"), ("child", "person"),
    ("dog", "animal"), ("cat", "animal"), ("horse", "animal"), ("cow", "animal"), ("sheep", "animal"),
    ("bird", "animal"), ("duck", "animal"), ("elephant", "animal"), ("giraffe", "animal"), ("zebra", "animal"),
    ("bear", "animal"),
    ("car", "vehicle"), ("bus", "vehicle"), ("truck", "vehicle"), ("bicycle", "vehicle"), ("motorcycle", "vehicle"),
    ("airplane", "vehicle"), ("boat", "vehicle"), ("train", "vehicle"),
    ("pizza", "food"), ("banana", "food"), ("apple", "food"), ("cake", "food"), ("donut", "food"),
    ("sandwich", "food"), ("carrot", "food"),
    ("chair", "furniture"), ("couch", "furniture"), ("bed", "furniture"), ("bench", "furniture"),
    ("television", "household"), ("laptop", "household"), ("clock", "household"), ("vase", "household"),
    ("cup", "household"), ("bottle", "household"), ("bowl", "household"),
    ("kite", "outdoor"), ("umbrella", "outdoor"), ("ball", "outdoor"), ("surfboard", "outdoor"),
    ("traffic light", "outdoor"),
)
CATEGORIES = tuple(name for name, _ in CATEGORY_SUPERCATEGORY)
SUPERCATEGORIES = ("person", "animal", "vehicle", "food", "furniture", "household", "outdoor")
CATEGORY_SUPER_INDEX = np.array([SUPERCATEGORIES.index(s) for _, s in CATEGORY_SUPERCATEGORY], dtype=np.int64)
COLOURS = ("red", "orange", "yellow", "green", "blue", "purple", "pink", "brown", "black", "white", "grey")
SIZES = ("small", "large")
PATTERNS = ("plain", "striped", "spotted", "checked")
SETTINGS = ("park", "beach", "street", "snow", "kitchen", "living room", "bedroom", "lake", "farm", "savanna",
            "forest", "sky")
RELATIONS = ("left of", "right of", "above", "below", "next to")
MAX_OBJECTS = 6
COUNT_SEVERAL = MAX_OBJECTS + 1

SCENE_FACT_FIELDS = ("setting", "category", "colour", "size", "pattern", "center_x", "center_y")
MENTION_FIELDS = ("noun", "count", "colour", "size", "pattern")
MENTION_WIDTH = len(MENTION_FIELDS)
CAPTION_FACT_WIDTH = 1 + 2 * MENTION_WIDTH + 1
NUM_NOUNS = len(CATEGORIES) + len(SUPERCATEGORIES)
# The mention attributes compared with an object's, and their vocabulary sizes (the one-hot code widths).
ATTRIBUTE_VOCAB_SIZES = (len(COLOURS), len(SIZES), len(PATTERNS))


def relation_gap(image_size: int = 64) -> float:
    """Minimum centre offset, ``image_size / 8`` pixels, for "left of", "right of", "above" or "below"."""
    return image_size / 8.0


def near_reach(image_size: int = 64) -> float:
    """Largest centre distance (Chebyshev), ``image_size * 3 / 8`` pixels, for "next to"."""
    return image_size * 3.0 / 8.0


def _as_int_array(value, name: str, ndim: int, last: int, expected: str) -> np.ndarray:
    array = np.asarray(value)
    if array.ndim != ndim or array.shape[-1] != last:
        raise ValueError(f"`{name}` must have shape {expected}; got shape {array.shape}.")
    if array.size and not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"`{name}` must hold integers; got dtype {array.dtype}.")
    return array.astype(np.int64, copy=False)


def _first_bad(bad: np.ndarray, values: np.ndarray, name: str, message: str) -> None:
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"`{name}` at index {where} is {values[where].tolist()}: {message}.")


def validate_scene_facts(scene_facts) -> np.ndarray:
    """``scene_facts`` as int64 [M, O, 7] after checking vocabulary indices, padding and the one setting a scene."""
    scene = _as_int_array(scene_facts, "scene_facts", 3, len(SCENE_FACT_FIELDS), "[M, num_objects, 7]")
    if scene.shape[1] < 1:
        raise ValueError(f"`scene_facts` needs at least one object slot; got shape {scene.shape}.")
    present = scene[..., 1] >= 0
    sizes = (len(SETTINGS), len(CATEGORIES), len(COLOURS), len(SIZES), len(PATTERNS))
    for field, size in enumerate(sizes):
        column = scene[..., field]
        _first_bad(present & ((column < 0) | (column >= size)), scene, "scene_facts",
                   f"its {SCENE_FACT_FIELDS[field]} must be 0..{size - 1}")
    _first_bad(present & (scene[..., 5:] < 0).any(-1), scene, "scene_facts", "a present object needs its centre")
    _first_bad(~present & (scene != -1).any(-1), scene, "scene_facts", "an absent object must be all -1")
    _first_bad(~present[:, :1], scene[:, :1], "scene_facts", "object 0 of every scene must be present")
    other_setting = present & (scene[..., 0] != scene[:, :1, 0])
    _first_bad(other_setting, scene, "scene_facts", "every object of a scene carries the scene's one setting")
    return scene


def validate_caption_facts(caption_facts) -> np.ndarray:
    """``caption_facts`` as int64 [K, 12] after checking indices and the mention and relation rules above."""
    caption = _as_int_array(caption_facts, "caption_facts", 2, CAPTION_FACT_WIDTH, f"[K, {CAPTION_FACT_WIDTH}]")
    mentions = caption[:, 1:1 + 2 * MENTION_WIDTH].reshape(-1, 2, MENTION_WIDTH)
    setting, relation = caption[:, 0], caption[:, -1]
    count = mentions[..., 1]
    checks = (
        ((setting < -1) | (setting >= len(SETTINGS)), f"the setting must be -1 or 0..{len(SETTINGS) - 1}"),
        (((mentions[..., 0] < -1) | (mentions[..., 0] >= NUM_NOUNS)).any(1),
         f"a noun must be -1 or 0..{NUM_NOUNS - 1}"),
        (((count < -1) | (count == 0) | (count > COUNT_SEVERAL)).any(1),
         f"a count must be -1 or 1..{COUNT_SEVERAL}"),
        *[(((mentions[..., 2 + a] < -1) | (mentions[..., 2 + a] >= size)).any(1),
            f"a {MENTION_FIELDS[2 + a]} must be -1 or 0..{size - 1}") for a, size in enumerate(ATTRIBUTE_VOCAB_SIZES)],
        (mentions[:, 0, 0] < 0, "mention 0 must state its noun"),
        ((mentions[:, 1, 0] < 0) & (mentions[:, 1] != -1).any(1), "an absent mention 1 must be all -1"),
        ((relation < -1) | (relation >= len(RELATIONS)), f"the relation must be -1 or 0..{len(RELATIONS) - 1}"),
        ((relation >= 0) & (mentions[:, 1, 0] < 0), "a relation needs mention 1"),
    )
    for bad, message in checks:
        if bad.any():
            k = int(np.argmax(bad))
            raise ValueError(f"`caption_facts[{k}]` = {caption[k].tolist()}: {message}.")
    return caption

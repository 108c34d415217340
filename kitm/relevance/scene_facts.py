"""The synthetic world's fact format: vocabularies, field layouts and the rule that decides a spatial relation.

The synthetic world (`kitm.data.synthetic`) writes these facts for every scene and caption, and the truth relevance
(`kitm.relevance.truth`) reads them; the records store them (`relevance/truth/*`). The format lives here, in
kitm.relevance, because data flows from kitm.data into kitm.relevance: the world generator imports it, and truth
relevance needs nothing from kitm.data.

Facts
-----
``scene_facts[n, o]`` (int32, ``SCENE_FACT_FIELDS``): shape, colour, size, column, row, centre_x, centre_y of object
o of scene n, as indices into ``SHAPES``, ``COLOURS``, ``SIZES``, ``COLUMNS``, ``ROWS`` and pixels; an absent
(padding) object is all -1. Column and row are the thirds of the image containing the centre.

``caption_facts[n, c]`` (int32, width ``CAPTION_FACT_WIDTH`` = 11): mention 0 (5 ints, ``MENTION_FIELDS``),
mention 1 (5 ints), relation index into ``RELATIONS`` (-1: none). In a mention -1 means "not stated"; mention 0
always states its shape; mention 1 is absent when its shape is -1 (then all of it is -1). A relation always reads
"mention 0 REL mention 1" whatever the word order of the text, and needs mention 1.

Relations are evaluated from the centres with ``gap = image_size / 8`` (``relation_gap``)::

    A left of B  iff  x_A < x_B - gap        A right of B  iff  x_A > x_B + gap
    A above B    iff  y_A < y_B - gap        A below B     iff  y_A > y_B + gap

(y grows downwards, as in the image array). Captions state only relations that hold with that gap.
"""

from __future__ import annotations

import numpy as np

SHAPES = ("circle", "square", "triangle", "diamond", "cross")
COLOURS = ("red", "green", "blue", "yellow", "purple", "white")
SIZES = ("small", "large")
COLUMNS = ("left", "center", "right")
ROWS = ("top", "middle", "bottom")
RELATIONS = ("left of", "right of", "above", "below")
MAX_OBJECTS = 3
SCENE_FACT_FIELDS = ("shape", "colour", "size", "column", "row", "center_x", "center_y")
MENTION_FIELDS = ("shape", "colour", "size", "column", "row")
CAPTION_FACT_WIDTH = 11

VOCAB_SIZES = (len(SHAPES), len(COLOURS), len(SIZES), len(COLUMNS), len(ROWS))
MENTION_WIDTH = len(MENTION_FIELDS)

assert CAPTION_FACT_WIDTH == 2 * MENTION_WIDTH + 1


def relation_gap(image_size: int = 64) -> float:
    """Minimum centre offset, ``image_size / 8`` pixels, for a relation such as "left of" to hold."""
    return image_size / 8.0


def _check_int_array(value, name: str, ndim: int, last: int) -> np.ndarray:
    array = np.asarray(value)
    if array.ndim != ndim or array.shape[-1] != last:
        expected = "[M, num_objects, 7]" if ndim == 3 else f"[K, {CAPTION_FACT_WIDTH}]"
        raise ValueError(f"`{name}` must have shape {expected}; got shape {array.shape}.")
    if array.size and not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"`{name}` must hold integers; got dtype {array.dtype}.")
    return array.astype(np.int64, copy=False)


def _check_codes(values: np.ndarray, name: str, what: str) -> None:
    """Each of the 5 attribute columns of ``values`` [..., 5] must be -1 or a valid vocabulary index."""
    for field, (label, size) in enumerate(zip(MENTION_FIELDS, VOCAB_SIZES)):
        column = values[..., field]
        bad = (column < -1) | (column >= size)
        if bad.any():
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            raise ValueError(
                f"`{name}` {what} {label} at index {where} is {int(column[where])}; expected -1 or 0..{size - 1}."
            )


def validate_scene_facts(scene_facts) -> np.ndarray:
    """``scene_facts`` as int64 [M, O, 7] after checking shape, vocabulary indices and absent-object padding."""
    scene = _check_int_array(scene_facts, "scene_facts", 3, len(SCENE_FACT_FIELDS))
    if scene.shape[1] < 1:
        raise ValueError(f"`scene_facts` needs at least one object slot; got shape {scene.shape}.")
    _check_codes(scene[..., :MENTION_WIDTH], "scene_facts", "object")
    present = scene[..., 0] >= 0
    inconsistent = np.where(present[..., None], scene < 0, scene != -1)
    if inconsistent.any():
        m, o, _ = (int(i) for i in np.argwhere(inconsistent)[0])
        raise ValueError(
            f"`scene_facts[{m}, {o}]` = {scene[m, o].tolist()}: a present object needs every field >= 0 and an "
            "absent object must be all -1."
        )
    return scene


def validate_caption_facts(caption_facts) -> np.ndarray:
    """``caption_facts`` as int64 [K, 11] after checking indices and the mention and relation rules above."""
    caption = _check_int_array(caption_facts, "caption_facts", 2, CAPTION_FACT_WIDTH)
    mentions = caption[:, : 2 * MENTION_WIDTH].reshape(-1, 2, MENTION_WIDTH)
    _check_codes(mentions, "caption_facts", "mention")
    relation = caption[:, -1]
    checks = (
        (mentions[:, 0, 0] < 0, "mention 0 must state its shape"),
        ((mentions[:, 1, 0] < 0) & (mentions[:, 1] != -1).any(axis=1), "an absent mention 1 must be all -1"),
        ((relation < -1) | (relation >= len(RELATIONS)), f"the relation must be -1 or 0..{len(RELATIONS) - 1}"),
        ((relation >= 0) & (mentions[:, 1, 0] < 0), "a relation needs mention 1"),
    )
    for bad, message in checks:
        if bad.any():
            k = int(np.argmax(bad))
            raise ValueError(f"`caption_facts[{k}]` = {caption[k].tolist()}: {message}.")
    return caption

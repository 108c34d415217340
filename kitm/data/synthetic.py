"""The synthetic world: rendered shapes, their captions, and the exact relevance of any caption to any image.

kitm's embedded default dataset. Each scene holds 1 to ``MAX_OBJECTS`` flat-coloured shapes on a dim, noisy,
slightly tinted background; the generator keeps every scene's facts, so the relevance of *any* caption to *any*
image is known exactly ("Truth" in METHODS.md). It is small enough to train the whole pipeline on a laptop CPU and
is the yardstick the other relevance sources (CIDEr-D, SBERT) and the losses are judged against.

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

Truth relevance (implemented exactly by ``truth_relevance`` and ``truth_relevance_tf``)
------------------------------------------------------------------------------------------
For a caption with mentions m (1 or 2) and an optional relation, and an image with objects o (absent objects
excluded):

- attribute match ``s(m, o) = |{a stated in m : m_a = o_a}| / |{a stated in m}|`` over (shape, colour, size, column,
  row); shape is always stated;
- mention term ``t(m) = max_o s(m, o)`` (0 for an image without objects);
- relation term, when relation REL is stated:
  ``r = max_{o1 != o2, REL(o1, o2)} s(m0, o1) * s(m1, o2)``, 0 when no ordered pair of distinct objects has REL;
- ``relevance = (sum_m t(m) + r) / (number of mentions + [relation stated])``, in [0, 1].

Every caption has relevance exactly 1.0 to its own image. The relevance of caption k to image m is
``result[m, k]`` (images by captions, the orientation of the batch matrices in ARCHITECTURE.md).

Captions
--------
``captions_per_image`` captions per scene from varied templates and synonyms ("circle" / "disc" / "round shape",
"large" / "big", ...). A caption names one object (shape always; colour, size, column, row optional), or two
objects, either joined by "and" (no relation) or with a relation ("a red circle to the left of a blue square",
also written "a blue square with a red circle to the left of it"). The stated facts are exactly what the text
asserts, with one deliberate exception: a few captions mention the object count ("two shapes: ..."), true of
their own scene; counts are decoration and are not facts, so truth relevance ignores them. Captions of one scene
state different fact rows (a bounded number of redraws; in practice always). Text is plain ASCII, sometimes
capitalised and ended by a full stop, like crowd-sourced captions.

Near-duplicates
---------------
With probability ``near_duplicate_rate`` a scene is derived from a uniformly drawn earlier scene by exactly one
change: one object's colour, shape or size class, one object moved, or one object added or removed (the change is
drawn among those that fit; a fresh scene is drawn if none does). Derived scenes get their own background noise
and their own captions. Many captions therefore describe several images perfectly (relevance 1.0), as in COCO,
where a caption fits many images. ``SyntheticWorld.derived_from`` records each scene's parent (-1: fresh). Splits
are drawn independently of derivation, so near-duplicates straddle splits, as similar photographs do in COCO.

Determinism
-----------
Every random draw comes from ``np.random.default_rng`` streams spawned from ``SeedSequence(seed)`` (scenes,
captions, rendering, splits), never from global state: equal arguments give byte-identical worlds.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple, Sequence

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

# RGB of each colour, chosen far apart so that a small CNN (and the nearest-colour check in the tests) separates
# them under the brightness jitter and noise added at rendering.
COLOUR_RGB = np.array(
    [(225, 40, 40), (40, 200, 60), (50, 90, 245), (240, 220, 40), (165, 60, 205), (240, 240, 240)],
    dtype=np.float32,
)

# Object extent (bounding-box side) in pixels at 64x64, per size class; scaled by image_size / 64.
_SIZE_EXTENTS = ((10.0, 14.0), (18.0, 24.0))
_NUM_OBJECTS_PROBS = (0.25, 0.4, 0.35)
_MIN_IMAGE_SIZE = 32
_PLACEMENT_TRIES = 100
_CAPTION_TRIES = 40

_VOCAB_SIZES = (len(SHAPES), len(COLOURS), len(SIZES), len(COLUMNS), len(ROWS))
# Offsets of each mention field in the concatenated one-hot attribute code used by the relevance kernels.
_VOCAB_OFFSETS = tuple(int(v) for v in np.cumsum((0,) + _VOCAB_SIZES[:-1]))
_CODE_WIDTH = sum(_VOCAB_SIZES)
_MENTION_WIDTH = len(MENTION_FIELDS)

assert len(_SIZE_EXTENTS) == len(SIZES) and len(_NUM_OBJECTS_PROBS) == MAX_OBJECTS
assert CAPTION_FACT_WIDTH == 2 * _MENTION_WIDTH + 1 and len(COLOUR_RGB) == len(COLOURS)


def relation_gap(image_size: int = 64) -> float:
    """Minimum centre offset, ``image_size / 8`` pixels, for a relation such as "left of" to hold."""
    return image_size / 8.0


# ---------------------------------------------------------------------------------------------------------------
# Truth relevance


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
    for field, (label, size) in enumerate(zip(MENTION_FIELDS, _VOCAB_SIZES)):
        column = values[..., field]
        bad = (column < -1) | (column >= size)
        if bad.any():
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            raise ValueError(
                f"`{name}` {what} {label} at index {where} is {int(column[where])}; expected -1 or 0..{size - 1}."
            )


def _validate_scene_facts(scene_facts) -> np.ndarray:
    scene = _check_int_array(scene_facts, "scene_facts", 3, len(SCENE_FACT_FIELDS))
    if scene.shape[1] < 1:
        raise ValueError(f"`scene_facts` needs at least one object slot; got shape {scene.shape}.")
    _check_codes(scene[..., :_MENTION_WIDTH], "scene_facts", "object")
    present = scene[..., 0] >= 0
    inconsistent = np.where(present[..., None], scene < 0, scene != -1)
    if inconsistent.any():
        m, o, _ = (int(i) for i in np.argwhere(inconsistent)[0])
        raise ValueError(
            f"`scene_facts[{m}, {o}]` = {scene[m, o].tolist()}: a present object needs every field >= 0 and an "
            "absent object must be all -1."
        )
    return scene


def _validate_caption_facts(caption_facts) -> np.ndarray:
    caption = _check_int_array(caption_facts, "caption_facts", 2, CAPTION_FACT_WIDTH)
    mentions = caption[:, : 2 * _MENTION_WIDTH].reshape(-1, 2, _MENTION_WIDTH)
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


def _one_hot_codes_np(values: np.ndarray) -> np.ndarray:
    """[..., 5] attribute indices (-1 = unknown) -> [..., 19] concatenated one-hot codes (unknown -> zeros).

    float32 is exact here: the codes are 0/1 and their dot products count at most 5 matches.
    """
    code = np.zeros(values.shape[:-1] + (_CODE_WIDTH,), dtype=np.float32)
    for field, (offset, size) in enumerate(zip(_VOCAB_OFFSETS, _VOCAB_SIZES)):
        code[..., offset : offset + size] = values[..., field, None] == np.arange(size)
    return code


def _relations_hold_np(scene: np.ndarray, gap: float) -> np.ndarray:
    """bool [M, O, O, len(RELATIONS) + 1]: object a REL object b; False when either is absent or a == b.

    The extra last relation is never true, so indexing it with a caption's relation -1 selects False.
    """
    x = scene[:, :, 5].astype(np.float64)
    y = scene[:, :, 6].astype(np.float64)
    xa, xb, ya, yb = x[:, :, None], x[:, None, :], y[:, :, None], y[:, None, :]
    never = np.zeros_like(xa < xb)
    holds = np.stack([xa < xb - gap, xa > xb + gap, ya < yb - gap, ya > yb + gap, never], axis=-1)
    present = scene[:, :, 0] >= 0
    valid = present[:, :, None] & present[:, None, :] & ~np.eye(scene.shape[1], dtype=bool)
    return holds & valid[..., None]


def _best_matches_np(object_codes: np.ndarray, mention_codes: np.ndarray) -> np.ndarray:
    """max over objects o of the match count of each mention: float32 [M, K] from [M, O, 19] and [K, 19]."""
    best = object_codes[:, 0] @ mention_codes.T
    for o in range(1, object_codes.shape[1]):
        np.maximum(best, object_codes[:, o] @ mention_codes.T, out=best)
    return best


def truth_relevance(scene_facts, caption_facts, *, image_size: int = 64) -> np.ndarray:
    """Exact relevance of every caption to every image of the synthetic world (module docstring, "Truth").

    ``relevance = (sum_m max_o s(m, o) + r) / (num_mentions + [relation])`` with the attribute match
    ``s(m, o)`` = share of m's stated attributes that o has, and ``r`` the best ``s(m0, o1) * s(m1, o2)`` over
    ordered pairs of distinct objects with ``REL(o1, o2)`` (METHODS.md "Truth"; defined in the module docstring).

    Match counts come from matrix products of one-hot attribute codes, one per object (and per ordered object
    pair for the relation term, over the captions that state one), so memory stays a few [M, K] arrays.

    Args:
        scene_facts: int [M, num_objects, 7] (``SCENE_FACT_FIELDS``); absent objects all -1.
        caption_facts: int [K, 11] (``CAPTION_FACT_WIDTH``).
        image_size: the rendered image side, which sets the relation gap ``image_size / 8``. Pass the world's
            ``image_size`` when it is not 64.

    Returns:
        float64 [M, K]; ``result[m, k]`` is the relevance of caption k to image m.

    Example: caption "a small red circle" (shape, colour, size stated) against an image holding only a large red
    circle gives 2/3.
    """
    scene = _validate_scene_facts(scene_facts)
    caption = _validate_caption_facts(caption_facts)
    num_objects = scene.shape[1]
    mentions = caption[:, : 2 * _MENTION_WIDTH].reshape(-1, 2, _MENTION_WIDTH)
    first_codes = _one_hot_codes_np(mentions[:, 0])  # [K, 19]
    second_codes = _one_hot_codes_np(mentions[:, 1])
    object_codes = _one_hot_codes_np(scene[..., :_MENTION_WIDTH])  # [M, O, 19]; absent -> zeros, never match
    stated = (mentions != -1).sum(axis=-1).astype(np.float64)  # [K, 2]
    relation = caption[:, -1]

    relevance = _best_matches_np(object_codes, first_codes) / stated[:, 0]
    second = np.flatnonzero(mentions[:, 1, 0] >= 0)
    if second.size:
        relevance[:, second] += _best_matches_np(object_codes, second_codes[second]) / stated[second, 1]
    related = np.flatnonzero(relation >= 0)
    if related.size:
        holds = _relations_hold_np(scene, relation_gap(image_size))
        first = [object_codes[:, o] @ first_codes[related].T for o in range(num_objects)]
        second_matches = [object_codes[:, o] @ second_codes[related].T for o in range(num_objects)]
        best_pair = np.zeros((scene.shape[0], related.size), dtype=np.float32)
        for a in range(num_objects):
            for b in range(num_objects):
                if a != b:
                    pair = first[a] * second_matches[b]
                    pair[~holds[:, a, b][:, relation[related]]] = 0.0
                    np.maximum(best_pair, pair, out=best_pair)
        relevance[:, related] += best_pair / (stated[related, 0] * stated[related, 1])
    mention_count = 1.0 + (mentions[:, 1, 0] >= 0) + (relation >= 0)
    return relevance / mention_count


def _one_hot_codes_tf(values):
    import tensorflow as tf

    return tf.concat(
        [tf.one_hot(values[..., field], size, dtype=tf.float32) for field, size in enumerate(_VOCAB_SIZES)],
        axis=-1,
    )


def truth_relevance_tf(scene_facts, caption_facts, *, image_size: int = 64):
    """``truth_relevance`` in TensorFlow ops: float32 [M, K], for tf.data map functions and ``tf.function``.

    Same definition and same algorithm as ``truth_relevance`` (see there and the module docstring). M and K may be
    dynamic; the object axis must be known statically or is taken to be ``MAX_OBJECTS``. Inputs are not
    validated beyond their rank and last dimension (graph mode), so feed facts produced by this module.
    """
    import tensorflow as tf

    scene = tf.cast(tf.convert_to_tensor(scene_facts), tf.int32)
    caption = tf.cast(tf.convert_to_tensor(caption_facts), tf.int32)
    if scene.shape.rank is not None and scene.shape[1] is not None:
        scene = tf.ensure_shape(scene, [None, scene.shape[1], len(SCENE_FACT_FIELDS)])
    else:
        scene = tf.ensure_shape(scene, [None, MAX_OBJECTS, len(SCENE_FACT_FIELDS)])
    caption = tf.ensure_shape(caption, [None, CAPTION_FACT_WIDTH])
    num_objects = scene.shape[1]
    gap = tf.constant(relation_gap(image_size), tf.float32)

    mentions = tf.reshape(caption[:, : 2 * _MENTION_WIDTH], [-1, 2, _MENTION_WIDTH])
    mention_codes = _one_hot_codes_tf(mentions)  # [K, 2, 19]
    object_codes = _one_hot_codes_tf(scene[..., :_MENTION_WIDTH])  # [M, O, 19]
    stated = tf.reduce_sum(tf.cast(mentions != -1, tf.float32), axis=-1)  # [K, 2]
    has_second = tf.cast(mentions[:, 1, 0] >= 0, tf.float32)
    has_relation = tf.cast(caption[:, -1] >= 0, tf.float32)

    # matches[j][o][m, k] = number of stated attributes of mention j of caption k that object o of image m has.
    matches = [
        [tf.matmul(object_codes[:, o], mention_codes[:, j], transpose_b=True) for o in range(num_objects)]
        for j in range(2)
    ]
    best0 = tf.math.reduce_max(tf.stack(matches[0]), axis=0)
    best1 = tf.math.reduce_max(tf.stack(matches[1]), axis=0)

    relation_code = tf.one_hot(caption[:, -1], len(RELATIONS), dtype=tf.float32)  # [K, 4]; -1 -> zeros
    present = scene[:, :, 0] >= 0
    x = tf.cast(scene[:, :, 5], tf.float32)
    y = tf.cast(scene[:, :, 6], tf.float32)
    best_pair = tf.zeros_like(best0)
    for a in range(num_objects):
        for b in range(num_objects):
            if a == b:
                continue
            holds = tf.stack(
                [x[:, a] < x[:, b] - gap, x[:, a] > x[:, b] + gap, y[:, a] < y[:, b] - gap, y[:, a] > y[:, b] + gap],
                axis=1,
            )
            holds = tf.logical_and(holds, tf.logical_and(present[:, a], present[:, b])[:, None])
            # [M, 4] x [4, K]: 1 where caption k's relation holds for (a, b) in image m; 0 for captions without one.
            holds = tf.matmul(tf.cast(holds, tf.float32), relation_code, transpose_b=True)
            best_pair = tf.maximum(best_pair, matches[0][a] * matches[1][b] * holds)

    n0, n1 = stated[:, 0], tf.maximum(stated[:, 1], 1.0)
    total = best0 / n0 + has_second * (best1 / n1) + has_relation * (best_pair / (n0 * n1))
    return total / (1.0 + has_second + has_relation)


# ---------------------------------------------------------------------------------------------------------------
# The world


@dataclasses.dataclass(frozen=True, eq=False)
class SyntheticWorld:
    """A generated world (see the module docstring). Scene n's image, captions and facts share index n.

    ``derived_from[n]`` is the scene that scene n was derived from as a near-duplicate, -1 for a fresh scene.
    """

    images: np.ndarray  # uint8 [N, image_size, image_size, 3]
    captions: list[list[str]]  # N lists of captions_per_image strings
    scene_facts: np.ndarray  # int32 [N, MAX_OBJECTS, 7]
    caption_facts: np.ndarray  # int32 [N, captions_per_image, CAPTION_FACT_WIDTH]
    splits: np.ndarray  # '<U5' [N]: "train" / "val" / "test"
    seed: int
    derived_from: np.ndarray | None = None  # int32 [N]

    @property
    def num_scenes(self) -> int:
        return int(self.images.shape[0])

    @property
    def image_size(self) -> int:
        return int(self.images.shape[1])

    @property
    def captions_per_image(self) -> int:
        return int(self.caption_facts.shape[1])

    def split_indices(self, split: str) -> np.ndarray:
        """Indices of the scenes in ``split`` ("train", "val" or "test"), ascending."""
        if split not in ("train", "val", "test"):
            raise ValueError(f"`split` must be 'train', 'val' or 'test'; got {split!r}.")
        return np.flatnonzero(self.splits == split)

    def relevance(self, indices: Sequence[int] | np.ndarray | None = None) -> np.ndarray:
        """Truth relevance [n, n * captions_per_image] among the scenes ``indices`` (default all).

        Captions are flattened scene-major: caption c of the i-th selected scene is column
        ``i * captions_per_image + c``, as in the usual 5-captions-per-image evaluation layout. Images are rows;
        ``kitm.eval.evaluate`` takes the transpose (captions by images).
        """
        selected = np.arange(self.num_scenes) if indices is None else np.asarray(indices)
        return truth_relevance(
            self.scene_facts[selected],
            self.caption_facts[selected].reshape(-1, CAPTION_FACT_WIDTH),
            image_size=self.image_size,
        )


class _Object(NamedTuple):
    shape: int
    colour: int
    size: int
    extent: float  # bounding-box side in pixels
    x: int  # centre column, pixels
    y: int  # centre row, pixels


def _third(coordinate: int, image_size: int) -> int:
    return min(coordinate * 3 // image_size, 2)


def _relations_between(a: _Object, b: _Object, gap: float) -> list[int]:
    """Indices of RELATIONS that hold for "a REL b"; the same inequalities as the relevance kernels."""
    holds = (a.x < b.x - gap, a.x > b.x + gap, a.y < b.y - gap, a.y > b.y + gap)
    return [r for r, h in enumerate(holds) if h]


def _fits(x: int, y: int, half: float, others: Sequence[_Object], image_size: int) -> bool:
    """Inside the image, and (Chebyshev distance) clear of every other object, so no object hides another's centre."""
    margin = math.ceil(half)
    if not (margin <= x <= image_size - 1 - margin and margin <= y <= image_size - 1 - margin):
        return False
    for other in others:
        other_half = other.extent / 2
        distance = max(abs(x - other.x), abs(y - other.y))
        if distance < 0.9 * (half + other_half) or distance <= max(half, other_half) + 1:
            return False
    return True


def _place(rng: np.random.Generator, extent: float, others: Sequence[_Object], image_size: int):
    margin = math.ceil(extent / 2)
    for _ in range(_PLACEMENT_TRIES):
        x, y = (int(v) for v in rng.integers(margin, image_size - margin, size=2))
        if _fits(x, y, extent / 2, others, image_size):
            return x, y
    return None


def _random_extent(rng: np.random.Generator, size: int, scale: float) -> float:
    low, high = _SIZE_EXTENTS[size]
    return float(rng.uniform(low, high)) * scale


def _random_object(rng: np.random.Generator, others: Sequence[_Object], image_size: int):
    shape, colour, size = int(rng.integers(len(SHAPES))), int(rng.integers(len(COLOURS))), int(rng.integers(len(SIZES)))
    extent = _random_extent(rng, size, image_size / 64)
    where = _place(rng, extent, others, image_size)
    return None if where is None else _Object(shape, colour, size, extent, *where)


def _fresh_scene(rng: np.random.Generator, image_size: int) -> list[_Object]:
    count = int(rng.choice(np.arange(1, MAX_OBJECTS + 1), p=_NUM_OBJECTS_PROBS))
    objects: list[_Object] = []
    for _ in range(count):
        # A crowded canvas can refuse an object; the scene then simply holds fewer (the first always fits).
        new = _random_object(rng, objects, image_size)
        if new is not None:
            objects.append(new)
    return objects


def _derive_scene(rng: np.random.Generator, parent: list[_Object], image_size: int) -> list[_Object] | None:
    """``parent`` with exactly one change, or None when no drawn change fits."""
    changes = ["colour", "shape", "size", "move"]
    if len(parent) < MAX_OBJECTS:
        changes.append("add")
    if len(parent) > 1:
        changes.append("remove")
    gap = relation_gap(image_size)
    for change in rng.permutation(changes):
        index = int(rng.integers(len(parent)))
        target = parent[index]
        others = parent[:index] + parent[index + 1 :]
        if change == "colour":
            colour = int(rng.choice([c for c in range(len(COLOURS)) if c != target.colour]))
            return parent[:index] + [target._replace(colour=colour)] + parent[index + 1 :]
        if change == "shape":
            shape = int(rng.choice([s for s in range(len(SHAPES)) if s != target.shape]))
            return parent[:index] + [target._replace(shape=shape)] + parent[index + 1 :]
        if change == "size":
            size = int(rng.choice([s for s in range(len(SIZES)) if s != target.size]))
            extent = _random_extent(rng, size, image_size / 64)
            if _fits(target.x, target.y, extent / 2, others, image_size):
                return parent[:index] + [target._replace(size=size, extent=extent)] + parent[index + 1 :]
        elif change == "move":
            where = _place(rng, target.extent, others, image_size)
            if where is not None and max(abs(where[0] - target.x), abs(where[1] - target.y)) > gap:
                return parent[:index] + [target._replace(x=where[0], y=where[1])] + parent[index + 1 :]
        elif change == "add":
            new = _random_object(rng, parent, image_size)
            if new is not None:
                return parent + [new]
        elif change == "remove":
            return others
    return None


def _scene_fact_rows(objects: Sequence[_Object], image_size: int) -> np.ndarray:
    rows = np.full((MAX_OBJECTS, len(SCENE_FACT_FIELDS)), -1, dtype=np.int32)
    for i, o in enumerate(objects):
        rows[i] = (o.shape, o.colour, o.size, _third(o.x, image_size), _third(o.y, image_size), o.x, o.y)
    return rows


# ---------------------------------------------------------------------------------------------------------------
# Rendering


def _shape_mask(shape: int, dx: np.ndarray, dy: np.ndarray, half: float) -> np.ndarray:
    """Pixels of a shape centred at (0, 0) with bounding half-side ``half``; every shape covers its centre."""
    name = SHAPES[shape]
    if name == "circle":
        return dx * dx + dy * dy <= half * half
    if name == "square":
        return (np.abs(dx) <= 0.85 * half) & (np.abs(dy) <= 0.85 * half)
    if name == "triangle":  # apex up; half-width (dy + half) / 2, so it is half/2 wide at the centre row
        return (dy >= -half) & (dy <= half) & (np.abs(dx) <= (dy + half) / 2)
    if name == "diamond":
        return np.abs(dx) + np.abs(dy) <= half
    if name == "cross":  # an upright plus sign
        arm = 0.3 * half
        return ((np.abs(dx) <= arm) & (np.abs(dy) <= half)) | ((np.abs(dy) <= arm) & (np.abs(dx) <= half))
    raise AssertionError(f"no mask for shape {name!r}")


def _render(objects: Sequence[_Object], image_size: int, rng: np.random.Generator) -> np.ndarray:
    tint = rng.uniform(10.0, 45.0, size=3).astype(np.float32)
    canvas = np.broadcast_to(tint, (image_size, image_size, 3)).copy()
    for o in objects:
        half = o.extent / 2
        reach = math.ceil(half)
        y0, y1 = max(o.y - reach, 0), min(o.y + reach + 1, image_size)
        x0, x1 = max(o.x - reach, 0), min(o.x + reach + 1, image_size)
        dy = np.arange(y0, y1, dtype=np.float32)[:, None] - o.y
        dx = np.arange(x0, x1, dtype=np.float32)[None, :] - o.x
        mask = _shape_mask(o.shape, dx, dy, half)
        # Brightness jitter keeps colour recognisable yet not a single exact RGB value.
        canvas[y0:y1, x0:x1][mask] = COLOUR_RGB[o.colour] * np.float32(rng.uniform(0.85, 1.0))
    canvas += np.float32(7.0) * rng.standard_normal(size=canvas.shape, dtype=np.float32)
    return np.clip(np.rint(canvas), 0, 255).astype(np.uint8)


# ---------------------------------------------------------------------------------------------------------------
# Captions

_SHAPE_WORDS = {
    "circle": ("circle", "circle", "disc", "round shape"),
    "square": ("square", "square", "box", "square shape"),
    "triangle": ("triangle", "triangle", "triangular shape"),
    "diamond": ("diamond", "diamond", "rhombus", "diamond shape"),
    "cross": ("cross", "cross", "plus sign", "plus shape"),
}
_COLOUR_WORDS = {
    "red": ("red",),
    "green": ("green",),
    "blue": ("blue",),
    "yellow": ("yellow",),
    "purple": ("purple", "purple", "violet"),
    "white": ("white",),
}
_SIZE_WORDS = {"small": ("small", "small", "little", "tiny"), "large": ("large", "large", "big")}
_COLUMN_PHRASES = {
    "left": ("on the left", "on the left side", "at the left"),
    "center": ("in the middle column", "in the central column", "horizontally centered"),
    "right": ("on the right", "on the right side", "at the right"),
}
_ROW_PHRASES = {
    "top": ("at the top", "near the top", "in the upper part"),
    "middle": ("in the middle row", "at mid height", "halfway down"),
    "bottom": ("at the bottom", "near the bottom", "in the lower part"),
}
_ROW_ADJECTIVES = {"top": ("top", "upper"), "middle": ("middle",), "bottom": ("bottom", "lower")}
_COLUMN_ADJECTIVES = {"left": ("left",), "center": ("center",), "right": ("right",)}
_CENTER_PHRASES = ("in the center", "in the middle of the picture", "in the very center")
_RELATION_PHRASES = {
    "left of": ("to the left of", "left of", "on the left of"),
    "right of": ("to the right of", "right of", "on the right of"),
    "above": ("above", "over", "higher up than"),
    "below": ("below", "under", "beneath", "lower than"),
}
_COUNT_WORDS = ("one", "two", "three", "four", "five", "six")

_SINGLE_TEMPLATES = (
    "{m0}",
    "a picture of {m0}",
    "an image of {m0}",
    "there is {m0}",
    "there is {m0} in the picture",
    "{m0} on a dark background",
    "a picture with {m0}",
    "this image shows {m0}",
    "you can see {m0}",
    "{m0} is visible",
    "a dark image containing {m0}",
)
_RELATION_TEMPLATES = (
    "{m0} {rel} {m1}",
    "there is {m0} {rel} {m1}",
    "{m0} is {rel} {m1}",
    "a picture with {m0} {rel} {m1}",
    "an image showing {m0} {rel} {m1}",
    "we see {m0} {rel} {m1}",
    "{m0} placed {rel} {m1}",
    "{m1} with {m0} {rel} it",
)
_PAIR_TEMPLATES = (
    "{m0} and {m1}",
    "a picture with {m0} and {m1}",
    "{m0} together with {m1}",
    "there is {m0} and {m1}",
    "an image of {m0} as well as {m1}",
)
# Count decorations, used only when true of the scene (never stored as facts).
_COUNTED_SINGLE = ("a single shape: {m0}", "{count} shapes, including {m0}")
_COUNTED_TWO = ("{count} shapes: {m0} {rel} {m1}", "{count} shapes: {m0} and {m1}")

_P_KIND = {"single": 0.2, "relation": 0.5, "pair": 0.3}
_KINDS = tuple(_P_KIND)
_KIND_CUMULATIVE = np.cumsum(list(_P_KIND.values()))
_P_COUNTED = 0.08
# Chance that a mention states each optional attribute (column and row drawn independently). The world has only
# 540 distinct objects, so vague captions ("a red circle") fit many images; these rates keep exact ties with
# unrelated images under 1% of pairs (0.7% in the 3000-scene demo world; about 2.6 other images of a 300-image
# test split fit a caption exactly) while still mixing vague and precise captions.
_P_STATE_COLOUR = 0.95
_P_STATE_SIZE = 0.8
_P_STATE_POSITION = {"single": 0.8, "pair": 0.5, "relation": 0.3}


def _pick(rng: np.random.Generator, options: Sequence[str]) -> str:
    return options[int(rng.integers(len(options)))]


def _position_phrase(rng: np.random.Generator, column: int, row: int) -> str:
    if column < 0:
        return _pick(rng, _ROW_PHRASES[ROWS[row]])
    if row < 0:
        return _pick(rng, _COLUMN_PHRASES[COLUMNS[column]])
    column_name, row_name = COLUMNS[column], ROWS[row]
    if column_name == "center" and row_name == "middle":
        return _pick(rng, _CENTER_PHRASES)
    phrase = f"in the {_pick(rng, _ROW_ADJECTIVES[row_name])} {_pick(rng, _COLUMN_ADJECTIVES[column_name])}"
    options = [phrase, f"{_pick(rng, _ROW_PHRASES[row_name])} {_pick(rng, _COLUMN_PHRASES[column_name])}"]
    if column_name != "center" and row_name != "middle":
        options.append(phrase + " corner")
    return _pick(rng, options)


def _mention_text(rng: np.random.Generator, mention: np.ndarray) -> str:
    """Noun phrase stating exactly the attributes of ``mention`` (5 ints, -1 = not stated)."""
    shape, colour, size, column, row = (int(v) for v in mention)
    noun = _pick(rng, _SHAPE_WORDS[SHAPES[shape]])
    size_word = _pick(rng, _SIZE_WORDS[SIZES[size]]) if size >= 0 else ""
    colour_word = _pick(rng, _COLOUR_WORDS[COLOURS[colour]]) if colour >= 0 else ""
    if colour_word and rng.random() < 0.15:
        words = ["a", size_word, noun, _pick(rng, ("that is", "coloured")), colour_word]
    else:
        words = ["a", size_word, colour_word, noun]
    if column >= 0 or row >= 0:
        words.append(_position_phrase(rng, column, row))
    return " ".join(w for w in words if w)


def _choose_mention(rng: np.random.Generator, o: _Object, image_size: int, p_position: float) -> np.ndarray:
    mention = np.full(_MENTION_WIDTH, -1, dtype=np.int32)
    mention[0] = o.shape
    if rng.random() < _P_STATE_COLOUR:
        mention[1] = o.colour
    if rng.random() < _P_STATE_SIZE:
        mention[2] = o.size
    if rng.random() < p_position:
        mention[3] = _third(o.x, image_size)
    if rng.random() < p_position:
        mention[4] = _third(o.y, image_size)
    return mention


def _draw_caption(rng: np.random.Generator, objects: Sequence[_Object], image_size: int):
    """One (facts row, text) true of ``objects``."""
    facts = np.full(CAPTION_FACT_WIDTH, -1, dtype=np.int32)
    count = len(objects)
    kind = "single"
    if count > 1:
        kind = _KINDS[min(int(np.searchsorted(_KIND_CUMULATIVE, rng.random(), side="right")), len(_KINDS) - 1)]
    counted = rng.random() < _P_COUNTED
    if kind == "single":
        described = objects[int(rng.integers(count))]
        facts[:_MENTION_WIDTH] = _choose_mention(rng, described, image_size, _P_STATE_POSITION["single"])
        m0 = _mention_text(rng, facts[:_MENTION_WIDTH])
        if counted:
            template = _COUNTED_SINGLE[0] if count == 1 else _COUNTED_SINGLE[1]
        else:
            template = _pick(rng, _SINGLE_TEMPLATES)
        return facts, template.format(m0=m0, count=_COUNT_WORDS[count - 1])

    a = int(rng.integers(count))
    b = (a + 1 + int(rng.integers(count - 1))) % count  # uniform over the other objects
    holding = _relations_between(objects[a], objects[b], relation_gap(image_size))
    if kind == "relation" and holding:
        facts[-1] = holding[int(rng.integers(len(holding)))]
    p_position = _P_STATE_POSITION["relation" if facts[-1] >= 0 else "pair"]
    facts[:_MENTION_WIDTH] = _choose_mention(rng, objects[a], image_size, p_position)
    facts[_MENTION_WIDTH : 2 * _MENTION_WIDTH] = _choose_mention(rng, objects[b], image_size, p_position)
    m0 = _mention_text(rng, facts[:_MENTION_WIDTH])
    m1 = _mention_text(rng, facts[_MENTION_WIDTH : 2 * _MENTION_WIDTH])
    rel = ""
    if facts[-1] >= 0:
        phrases = _RELATION_PHRASES[RELATIONS[facts[-1]]]
        # After a position ("a disc on the left") only the explicit form reads well ("... to the left of").
        rel = phrases[0] if (facts[3:5] >= 0).any() else _pick(rng, phrases)
    if counted and count == 2:
        template = _COUNTED_TWO[0] if rel else _COUNTED_TWO[1]
    else:
        template = _pick(rng, _RELATION_TEMPLATES if rel else _PAIR_TEMPLATES)
    return facts, template.format(m0=m0, m1=m1, rel=rel, count=_COUNT_WORDS[count - 1])


def _finish_text(rng: np.random.Generator, text: str) -> str:
    # Crowd-sourced captions vary in case and final punctuation; kitm's text pipelines must not care.
    if rng.random() < 0.5:
        text = text[0].upper() + text[1:]
    if rng.random() < 0.3:
        text += "."
    return text


def _scene_captions(rng: np.random.Generator, objects: Sequence[_Object], image_size: int, count: int):
    facts_rows: list[np.ndarray] = []
    texts: list[str] = []
    seen: set[bytes] = set()
    for _ in range(count):
        for _ in range(_CAPTION_TRIES):
            facts, text = _draw_caption(rng, objects, image_size)
            if facts.tobytes() not in seen:
                break
        seen.add(facts.tobytes())
        facts_rows.append(facts)
        texts.append(_finish_text(rng, text))
    return texts, np.stack(facts_rows)


# ---------------------------------------------------------------------------------------------------------------
# Splits and the generator


def _split_labels(num_scenes: int, fractions: Sequence[float], rng: np.random.Generator) -> np.ndarray:
    names = ("train", "val", "test")
    fractions = np.asarray(fractions, dtype=np.float64)
    if fractions.shape != (3,) or (fractions < 0).any() or not np.isclose(fractions.sum(), 1.0):
        raise ValueError(
            f"`split_fractions` must be three non-negative numbers summing to 1; got {fractions.tolist()}."
        )
    nonzero = fractions > 0
    if num_scenes < nonzero.sum():
        raise ValueError(
            f"`num_scenes`={num_scenes} cannot give a scene to each of the {int(nonzero.sum())} nonzero splits."
        )
    counts = np.floor(fractions * num_scenes + 0.5).astype(np.int64)
    counts[nonzero & (counts == 0)] = 1
    # Settle rounding on the largest split, which can best absorb it.
    largest = int(np.argmax(fractions))
    counts[largest] += num_scenes - counts.sum()
    while counts[largest] < 1:  # tiny worlds: take back from the others
        donor = int(np.argmax(np.where(np.arange(3) == largest, -1, counts)))
        counts[donor] -= 1
        counts[largest] += 1
    labels = np.repeat(np.array(names, dtype="<U5"), counts)
    return labels[rng.permutation(num_scenes)]


def generate_world(
    num_scenes: int = 3000,
    *,
    seed: int = 0,
    image_size: int = 64,
    captions_per_image: int = 5,
    near_duplicate_rate: float = 0.35,
    split_fractions: Sequence[float] = (0.8, 0.1, 0.1),
    progress: bool = False,
) -> SyntheticWorld:
    """Generate a deterministic synthetic world (module docstring): scenes, images, captions, facts and splits.

    Args:
        num_scenes: number of scenes (images), >= 1.
        seed: non-negative integer; equal arguments give byte-identical worlds.
        image_size: side of the square RGB images, >= 32; object sizes scale with it.
        captions_per_image: captions per scene, >= 1.
        near_duplicate_rate: probability that a scene (after the first) is an earlier scene with one change.
        split_fractions: fractions of train / val / test scenes; every nonzero split gets at least one scene.
        progress: show a tqdm progress bar.
    """
    if isinstance(num_scenes, bool) or not isinstance(num_scenes, (int, np.integer)) or num_scenes < 1:
        raise ValueError(f"`num_scenes` must be a positive integer; got {num_scenes!r}.")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"`seed` must be a non-negative integer; got {seed!r}.")
    if not isinstance(image_size, (int, np.integer)) or image_size < _MIN_IMAGE_SIZE:
        raise ValueError(f"`image_size` must be an integer >= {_MIN_IMAGE_SIZE}; got {image_size!r}.")
    if not isinstance(captions_per_image, (int, np.integer)) or captions_per_image < 1:
        raise ValueError(f"`captions_per_image` must be a positive integer; got {captions_per_image!r}.")
    if not 0.0 <= float(near_duplicate_rate) <= 1.0:
        raise ValueError(f"`near_duplicate_rate` must be in [0, 1]; got {near_duplicate_rate!r}.")
    num_scenes, image_size, captions_per_image = int(num_scenes), int(image_size), int(captions_per_image)

    # Independent streams: changing the caption templates, say, leaves the scenes and images unchanged.
    scene_rng, caption_rng, render_rng, split_rng = (
        np.random.default_rng(s) for s in np.random.SeedSequence(int(seed)).spawn(4)
    )
    splits = _split_labels(num_scenes, split_fractions, split_rng)

    images = np.empty((num_scenes, image_size, image_size, 3), dtype=np.uint8)
    scene_facts = np.empty((num_scenes, MAX_OBJECTS, len(SCENE_FACT_FIELDS)), dtype=np.int32)
    caption_facts = np.empty((num_scenes, captions_per_image, CAPTION_FACT_WIDTH), dtype=np.int32)
    derived_from = np.full(num_scenes, -1, dtype=np.int32)
    captions: list[list[str]] = []
    scenes: list[list[_Object]] = []

    indices = range(num_scenes)
    if progress:
        from tqdm.auto import tqdm

        indices = tqdm(indices, desc="synthetic world", unit="scene")
    for n in indices:
        objects = None
        if n > 0 and scene_rng.random() < near_duplicate_rate:
            parent = int(scene_rng.integers(n))
            objects = _derive_scene(scene_rng, scenes[parent], image_size)
            if objects is not None:
                derived_from[n] = parent
        if objects is None:
            objects = _fresh_scene(scene_rng, image_size)
        scenes.append(objects)
        scene_facts[n] = _scene_fact_rows(objects, image_size)
        images[n] = _render(objects, image_size, render_rng)
        texts, facts = _scene_captions(caption_rng, objects, image_size, captions_per_image)
        captions.append(texts)
        caption_facts[n] = facts

    return SyntheticWorld(
        images=images,
        captions=captions,
        scene_facts=scene_facts,
        caption_facts=caption_facts,
        splits=splits,
        seed=int(seed),
        derived_from=derived_from,
    )

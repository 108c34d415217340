"""Scene sampling for the synthetic world: objects placed on the canvas, near-duplicate derivation, fact rows.

A scene is a list of ``SceneObject`` (shape, colour, size class, extent and centre in pixels). A fresh scene holds
1 to ``MAX_OBJECTS`` objects placed so that none hides another's centre; a crowded canvas may refuse one, and the
scene then holds fewer.

Near-duplicates
---------------
With probability ``near_duplicate_rate`` a scene is derived from a uniformly drawn earlier scene by exactly one
change: one object's colour, shape or size class, one object moved, or one object added or removed (the change is
drawn among those that fit; a fresh scene is drawn if none does). Derived scenes get their own background noise
and their own captions. Many captions therefore describe several images perfectly (relevance 1.0), as in COCO,
where a caption fits many images. ``SyntheticWorld.derived_from`` records each scene's parent (-1: fresh). Splits
are drawn independently of derivation, so near-duplicates straddle splits, as similar photographs do in COCO.

``scene_fact_rows`` turns a scene into its ``scene_facts`` rows (`kitm.relevance.scene_facts` defines the format).
Every draw comes from the ``rng`` passed in (`kitm.data.synthetic.world` spawns the streams).
"""

from __future__ import annotations

import math
from typing import NamedTuple, Sequence

import numpy as np

from kitm.relevance.scene_facts import COLOURS, MAX_OBJECTS, SCENE_FACT_FIELDS, SHAPES, SIZES, relation_gap

# Object extent (bounding-box side) in pixels at 64x64, per size class; scaled by image_size / 64.
_SIZE_EXTENTS = ((10.0, 14.0), (18.0, 24.0))
_NUM_OBJECTS_PROBS = (0.25, 0.4, 0.35)
_PLACEMENT_TRIES = 100

assert len(_SIZE_EXTENTS) == len(SIZES) and len(_NUM_OBJECTS_PROBS) == MAX_OBJECTS


class SceneObject(NamedTuple):
    """One object of a scene, as drawn: vocabulary indices, pixel extent and pixel centre."""

    shape: int
    colour: int
    size: int
    extent: float  # bounding-box side in pixels
    x: int  # centre column, pixels
    y: int  # centre row, pixels


def third(coordinate: int, image_size: int) -> int:
    """The third (0, 1, 2) of the image side containing pixel ``coordinate``: the fact's column or row."""
    return min(coordinate * 3 // image_size, 2)


def relations_between(a: SceneObject, b: SceneObject, gap: float) -> list[int]:
    """Indices of RELATIONS that hold for "a REL b"; the same inequalities as the relevance kernels."""
    holds = (a.x < b.x - gap, a.x > b.x + gap, a.y < b.y - gap, a.y > b.y + gap)
    return [r for r, h in enumerate(holds) if h]


def _fits(x: int, y: int, half: float, others: Sequence[SceneObject], image_size: int) -> bool:
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


def _place(rng: np.random.Generator, extent: float, others: Sequence[SceneObject], image_size: int):
    margin = math.ceil(extent / 2)
    for _ in range(_PLACEMENT_TRIES):
        x, y = (int(v) for v in rng.integers(margin, image_size - margin, size=2))
        if _fits(x, y, extent / 2, others, image_size):
            return x, y
    return None


def _random_extent(rng: np.random.Generator, size: int, scale: float) -> float:
    low, high = _SIZE_EXTENTS[size]
    return float(rng.uniform(low, high)) * scale


def _random_object(rng: np.random.Generator, others: Sequence[SceneObject], image_size: int):
    shape, colour, size = int(rng.integers(len(SHAPES))), int(rng.integers(len(COLOURS))), int(rng.integers(len(SIZES)))
    extent = _random_extent(rng, size, image_size / 64)
    where = _place(rng, extent, others, image_size)
    return None if where is None else SceneObject(shape, colour, size, extent, *where)


def fresh_scene(rng: np.random.Generator, image_size: int) -> list[SceneObject]:
    """A new scene of 1 to ``MAX_OBJECTS`` random objects (fewer when the canvas refuses one)."""
    count = int(rng.choice(np.arange(1, MAX_OBJECTS + 1), p=_NUM_OBJECTS_PROBS))
    objects: list[SceneObject] = []
    for _ in range(count):
        # A crowded canvas can refuse an object; the scene then simply holds fewer (the first always fits).
        new = _random_object(rng, objects, image_size)
        if new is not None:
            objects.append(new)
    return objects


def derive_scene(rng: np.random.Generator, parent: list[SceneObject], image_size: int) -> list[SceneObject] | None:
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


def scene_fact_rows(objects: Sequence[SceneObject], image_size: int) -> np.ndarray:
    """int32 [MAX_OBJECTS, 7] ``scene_facts`` rows of ``objects``, absent slots all -1."""
    rows = np.full((MAX_OBJECTS, len(SCENE_FACT_FIELDS)), -1, dtype=np.int32)
    for i, o in enumerate(objects):
        rows[i] = (o.shape, o.colour, o.size, third(o.x, image_size), third(o.y, image_size), o.x, o.y)
    return rows

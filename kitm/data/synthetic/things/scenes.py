"""Scene sampling for the things world: a setting, objects placed in it, near-duplicate derivation, fact rows.

A scene is a setting (`kitm.relevance.things_facts.SETTINGS`) and a list of ``ThingObject``. A fresh scene draws its
setting, then 1 to ``MAX_OBJECTS`` objects of categories that live there (the lexicon's ``settings``, weighted); an
object repeats a category already in the scene with probability ``P_REPEAT`` (herds, rows of cars), usually in the
same colour. The first object is usually large, the others usually small, as photographs have a subject. Objects are
placed so that no centre is hidden; a crowded canvas may refuse one, and the scene then holds fewer.

Near-duplicates
---------------
With probability ``near_duplicate_rate`` a scene is an earlier scene with exactly one change: one object's colour,
category, size or pattern, one object moved, or one added or removed (among the changes that fit). The rate is
small by default (``NEAR_DUPLICATE_RATE``), like the bursts of similar photographs in COCO and Flickr, so that
captions fit their own image better than any other, as in the real data sets.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Sequence

import numpy as np

from kitm.data.synthetic.things.lexicon import THINGS
from kitm.relevance.things_facts import (CATEGORIES, COLOURS, MAX_OBJECTS, PATTERNS, SCENE_FACT_FIELDS, SETTINGS,
                                         SIZES, near_reach, relation_gap)

NEAR_DUPLICATE_RATE = 0.05
P_REPEAT = 0.3
_P_SAME_COLOUR = 0.6
_P_EXTRA = 0.5
_NUM_OBJECTS_PROBS = (0.2, 0.28, 0.22, 0.14, 0.09, 0.07)
# How common each setting is (COCO and Flickr photograph streets, parks and homes most).
_SETTING_WEIGHTS = {"park": 1.4, "beach": 1.2, "street": 1.5, "snow": 0.7, "kitchen": 1.2, "living room": 1.1,
                    "bedroom": 0.6, "lake": 0.8, "farm": 0.8, "savanna": 0.6, "forest": 0.6, "sky": 0.5}
# Bounding-box side as a share of the image side, per size class.
_EXTENTS = ((0.2, 0.27), (0.34, 0.44))
_P_LARGE = (0.8, 0.3)  # the first object, the others
_PLACEMENT_TRIES = 60

assert len(_NUM_OBJECTS_PROBS) == MAX_OBJECTS and set(_SETTING_WEIGHTS) == set(SETTINGS)


class ThingObject(NamedTuple):
    """One object as drawn: vocabulary indices, pixel extent and pixel centre."""

    category: int
    colour: int
    size: int
    pattern: int
    extent: float
    x: int
    y: int
    action: str = ""  # what it is doing, one of its lexicon entry's actions (decoration: not drawn, no fact)
    extra: str = ""  # a detail people mention ("with a red collar"), one of its entry's extras, or none


class ThingScene(NamedTuple):
    setting: int
    objects: tuple[ThingObject, ...]


def _category_weights() -> np.ndarray:
    """[settings, categories]: how often each category is drawn in each setting (the lexicon's weighted lists)."""
    weights = np.zeros((len(SETTINGS), len(CATEGORIES)))
    for c, thing in enumerate(THINGS):
        for setting in thing.settings:
            weights[SETTINGS.index(setting), c] += 1.0
    return weights / weights.sum(axis=1, keepdims=True)


_CATEGORY_WEIGHTS = _category_weights()
_SETTING_PROBS = np.array([_SETTING_WEIGHTS[s] for s in SETTINGS]) / sum(_SETTING_WEIGHTS.values())


def relations_between(a: ThingObject, b: ThingObject, image_size: int) -> list[int]:
    """Indices of RELATIONS that hold for "a REL b"; the same inequalities as the relevance kernels."""
    gap, reach = relation_gap(image_size), near_reach(image_size)
    near = max(abs(a.x - b.x), abs(a.y - b.y)) <= reach
    holds = (a.x < b.x - gap, a.x > b.x + gap, a.y < b.y - gap, a.y > b.y + gap, near)
    return [r for r, h in enumerate(holds) if h]


def _fits(x: int, y: int, half: float, others: Sequence[ThingObject], image_size: int) -> bool:
    """Inside the image, and clear enough of every other object that no object hides another's centre."""
    margin = math.ceil(half * 0.9)
    if not (margin <= x <= image_size - 1 - margin and margin <= y <= image_size - 1 - margin):
        return False
    for other in others:
        distance = max(abs(x - other.x), abs(y - other.y))
        if distance < 0.75 * (half + other.extent / 2) or distance <= max(half, other.extent / 2) * 0.8 + 1:
            return False
    return True


def _place(rng: np.random.Generator, extent: float, others: Sequence[ThingObject], image_size: int):
    margin = math.ceil(extent / 2 * 0.9)
    for _ in range(_PLACEMENT_TRIES):
        x, y = (int(v) for v in rng.integers(margin, image_size - margin, size=2))
        if _fits(x, y, extent / 2, others, image_size):
            return x, y
    return None


def _extent(rng: np.random.Generator, size: int, image_size: int) -> float:
    low, high = _EXTENTS[size]
    return float(rng.uniform(low, high)) * image_size


def _draw_attributes(rng: np.random.Generator, category: int) -> tuple[int, int]:
    thing = THINGS[category]
    colour = COLOURS.index(thing.colours[int(rng.integers(len(thing.colours)))])
    pattern = PATTERNS.index(thing.patterns[int(rng.integers(len(thing.patterns)))])
    return colour, pattern


def _decoration(rng: np.random.Generator, category: int, setting: int) -> tuple[str, str]:
    """(action, extra) of a new object of ``category`` in ``setting``, from its lexicon entry (extra "": none)."""
    thing = THINGS[category]
    actions = thing.actions + thing.actions_in.get(SETTINGS[setting], ())
    action = actions[int(rng.integers(len(actions)))]
    extra = thing.extras[int(rng.integers(len(thing.extras)))] if thing.extras and rng.random() < _P_EXTRA else ""
    return action, extra


def _new_object(rng: np.random.Generator, setting: int, others: Sequence[ThingObject], image_size: int):
    """A random object for `setting` placed among `others`, or None when the canvas refuses it."""
    if others and rng.random() < P_REPEAT:
        model = others[int(rng.integers(len(others)))]
        category = model.category
        colour, pattern = _draw_attributes(rng, category)
        if rng.random() < _P_SAME_COLOUR:
            colour, pattern = model.colour, model.pattern
    else:
        category = int(rng.choice(len(CATEGORIES), p=_CATEGORY_WEIGHTS[setting]))
        colour, pattern = _draw_attributes(rng, category)
    size = int(rng.random() < _P_LARGE[1 if others else 0])
    extent = _extent(rng, size, image_size)
    where = _place(rng, extent, others, image_size)
    action, extra = _decoration(rng, category, setting)
    return None if where is None else ThingObject(category, colour, size, pattern, extent, *where, action, extra)


def fresh_scene(rng: np.random.Generator, image_size: int) -> ThingScene:
    """A new scene: a setting and 1 to ``MAX_OBJECTS`` objects (fewer when the canvas refuses one)."""
    setting = int(rng.choice(len(SETTINGS), p=_SETTING_PROBS))
    count = int(rng.choice(np.arange(1, MAX_OBJECTS + 1), p=_NUM_OBJECTS_PROBS))
    objects: list[ThingObject] = []
    while not objects:  # the first object always fits an empty canvas; the loop only guards the draw
        objects = [o for o in [_new_object(rng, setting, (), image_size)] if o is not None]
    for _ in range(count - 1):
        new = _new_object(rng, setting, objects, image_size)
        if new is not None:
            objects.append(new)
    return ThingScene(setting, tuple(objects))


def _changed(rng: np.random.Generator, scene: ThingScene, index: int, change: str, image_size: int):
    """``scene`` with object ``index`` changed by ``change``, or None when the change does not fit."""
    objects = list(scene.objects)
    target, others = objects[index], objects[:index] + objects[index + 1:]
    if change in ("colour", "pattern", "category"):
        category = target.category
        if change == "category":
            weights = _CATEGORY_WEIGHTS[scene.setting].copy()
            weights[category] = 0.0
            category = int(rng.choice(len(CATEGORIES), p=weights / weights.sum()))
        colour, pattern = _draw_attributes(rng, category)
        keep = {"colour": (colour, target.pattern), "pattern": (target.colour, pattern)}.get(change, (colour, pattern))
        action, extra = ((target.action, target.extra) if change != "category"
                         else _decoration(rng, category, scene.setting))
        new = target._replace(category=category, colour=keep[0], pattern=keep[1], action=action, extra=extra)
        return None if new == target else objects[:index] + [new] + objects[index + 1:]
    if change == "size":
        size = 1 - target.size
        extent = _extent(rng, size, image_size)
        fits = _fits(target.x, target.y, extent / 2, others, image_size)
        return objects[:index] + [target._replace(size=size, extent=extent)] + objects[index + 1:] if fits else None
    if change == "move":
        where = _place(rng, target.extent, others, image_size)
        if where is None or max(abs(where[0] - target.x), abs(where[1] - target.y)) <= relation_gap(image_size):
            return None
        return objects[:index] + [target._replace(x=where[0], y=where[1])] + objects[index + 1:]
    if change == "add":
        new = _new_object(rng, scene.setting, objects, image_size)
        return None if new is None else objects + [new]
    return others  # "remove"


def derive_scene(rng: np.random.Generator, parent: ThingScene, image_size: int) -> ThingScene | None:
    """``parent`` with exactly one change (module docstring), or None when no drawn change fits."""
    changes = ["colour", "pattern", "category", "size", "move"]
    if len(parent.objects) < MAX_OBJECTS:
        changes.append("add")
    if len(parent.objects) > 1:
        changes.append("remove")
    for change in rng.permutation(changes):
        objects = _changed(rng, parent, int(rng.integers(len(parent.objects))), str(change), image_size)
        if objects is not None:
            return ThingScene(parent.setting, tuple(objects))
    return None


def scene_fact_rows(scene: ThingScene) -> np.ndarray:
    """int32 [MAX_OBJECTS, 7] ``scene_facts`` rows of ``scene``, absent slots all -1."""
    rows = np.full((MAX_OBJECTS, len(SCENE_FACT_FIELDS)), -1, dtype=np.int32)
    for i, o in enumerate(scene.objects):
        rows[i] = (scene.setting, o.category, o.colour, o.size, o.pattern, o.x, o.y)
    return rows


assert len(SIZES) == len(_EXTENTS) == len(_P_LARGE)

"""The synthetic worlds' exact relevance, by the world's name: one entry point for every reader of truth facts.

kitm has two synthetic worlds, each with its own fact format and its own truth relevance:

- ``things`` (the default since 2026-11-28): everyday objects in settings, with captions like people's
  (`kitm.relevance.things_facts`, `kitm.relevance.things_truth`);
- ``shapes``: coloured shapes on a dark canvas, the world of kitm's first two claims studies, kept to reproduce
  them (`kitm.relevance.scene_facts`, `kitm.relevance.truth`).

A dataset records its world in ``dataset.json`` (``relevance.truth.world``) and an index in ``truth.npz``; what was
written before the things world existed records none and is a shapes world (``LEGACY_WORLD``). The relevance
depends on the world and on the image side the facts were drawn at (it sets the relation distances).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from kitm.relevance import scene_facts as shapes_facts
from kitm.relevance import things_facts
from kitm.relevance.things_truth import things_relevance, things_relevance_tf
from kitm.relevance.truth import truth_relevance, truth_relevance_tf

WORLDS = ("things", "shapes")
DEFAULT_WORLD = "things"
LEGACY_WORLD = "shapes"


class _Truth(NamedTuple):
    relevance: Callable[..., np.ndarray]
    relevance_tf: Callable
    scene_fact_width: int
    caption_fact_width: int
    max_objects: int


_TRUTHS = {
    "things": _Truth(things_relevance, things_relevance_tf, len(things_facts.SCENE_FACT_FIELDS),
                     things_facts.CAPTION_FACT_WIDTH, things_facts.MAX_OBJECTS),
    "shapes": _Truth(truth_relevance, truth_relevance_tf, len(shapes_facts.SCENE_FACT_FIELDS),
                     shapes_facts.CAPTION_FACT_WIDTH, shapes_facts.MAX_OBJECTS),
}
assert set(_TRUTHS) == set(WORLDS)


def check_world(world: str) -> str:
    """``world`` if kitm knows it, else a ValueError naming the worlds."""
    if world not in _TRUTHS:
        raise ValueError(f"Unknown synthetic world {world!r}; kitm has {', '.join(WORLDS)}.")
    return world


def scene_fact_width(world: str) -> int:
    """Fields per object row of ``world``'s scene facts."""
    return _TRUTHS[check_world(world)].scene_fact_width


def caption_fact_width(world: str) -> int:
    """Width of one caption's facts row in ``world``."""
    return _TRUTHS[check_world(world)].caption_fact_width


def max_objects(world: str) -> int:
    """Object slots per scene in ``world``'s facts."""
    return _TRUTHS[check_world(world)].max_objects


def world_relevance(scene_facts, caption_facts, *, world: str, image_size: int) -> np.ndarray:
    """float64 [images, captions]: the exact relevance of each caption to each image of ``world``.

    ``scene_facts`` is [images, objects, fields] (or flat [images, objects * fields], as the records store it),
    ``caption_facts`` [captions, width]; ``image_size`` is the side the world was drawn at.
    """
    truth = _TRUTHS[check_world(world)]
    scene = np.asarray(scene_facts)
    if scene.ndim == 2:
        scene = scene.reshape(scene.shape[0], -1, truth.scene_fact_width)
    return truth.relevance(scene, caption_facts, image_size=image_size)


def world_relevance_tf(scene_facts, caption_facts, *, world: str, image_size: int):
    """``world_relevance`` in TensorFlow ops (float32 [M, K]) for tf.data maps; flat scene rows are reshaped."""
    import tensorflow as tf

    truth = _TRUTHS[check_world(world)]
    scene = tf.reshape(scene_facts, [tf.shape(scene_facts)[0], truth.max_objects, truth.scene_fact_width])
    return truth.relevance_tf(scene, caption_facts, image_size=image_size)

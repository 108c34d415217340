"""Complementary captions: text that adds to the scene instead of describing it (the non-literal world).

Thomas & Kovashka's gains are on news data (Politics, GoodNews), whose captions complement the image: they name the
event, the place, what cannot be seen, and mention only part of what is shown; on COCO, whose captions describe the
image literally, their method loses R@1. The literal world (`kitm.data.synthetic.captions`) is COCO-like. This
module writes the other kind, ``caption_style="complementary"``:

- **Context.** Every scene has a story, one of :data:`TOPICS` (an event or place that is not drawn). It is hinted
  by the image: with probability :data:`P_TOPIC_FROM_IMAGE` it is the topic of the scene's largest object's shape and
  colour (a fixed map), otherwise uniform; near-duplicate scenes draw their own, as two similar photographs can
  illustrate two stories. Most captions name the story (:data:`P_STATES_TOPIC`), so captions of one story are close
  in a sentence-embedding space whatever they show: the text-space neighbourhoods the neighbourhood loss preserves
  carry information the pixels carry only partly.
- **Attributes not visible.** Objects have a material (wood, metal, ...) that is not rendered; captions mention it.
- **Parts of the scene only.** A caption mentions one object, vaguely: its shape, its colour about half the time,
  rarely its size or position.

Facts. A caption's facts row holds only what can be checked on the pixels: its one mention (shape and the
attributes it states). The story and the material are decoration, like the literal world's object counts, so the
world's exact relevance (`kitm.relevance.truth`) scores the visible claims; what a complementary caption adds is in
its words, where the sentence-embedding neighbourhoods see it. Every draw comes from the generators passed in.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from kitm.data.synthetic.caption_draws import distinct_captions
from kitm.data.synthetic.captions import _SHAPE_WORDS, _finish_text, _mention_text, _pick
from kitm.data.synthetic.scenes import SceneObject, third
from kitm.relevance.scene_facts import CAPTION_FACT_WIDTH, COLOURS, MENTION_WIDTH, SHAPES

CAPTION_STYLES = ("literal", "complementary")

# Stories a scene can illustrate, each with the phrases captions use for it.
TOPICS = (
    ("a birthday party", "the birthday party", "a party for her birthday"),
    ("the harvest festival", "the autumn fair", "the harvest fair"),
    ("a storm warning", "the storm last night", "the storm damage"),
    ("the city election", "the election campaign", "election day"),
    ("a football match", "the cup final", "the match on Sunday"),
    ("a school science project", "the science fair", "a class experiment"),
    ("a museum exhibition", "the new exhibition", "the gallery opening"),
    ("a wedding", "the wedding reception", "the wedding day"),
    ("the flea market", "a street market", "the Saturday market"),
    ("a moving day", "the move to the new flat", "moving house"),
    ("a toy shop sale", "the toy shop", "the holiday sale"),
    ("a board game night", "game night", "the board game club"),
)
MATERIALS = ("wooden", "metal", "paper", "glass", "plastic", "stone", "felt", "clay")
P_TOPIC_FROM_IMAGE = 0.7
P_STATES_TOPIC = 0.85
P_STATES_MATERIAL = 0.5
_P_STATE = {"colour": 0.5, "size": 0.2, "position": 0.15}

_TOPIC_TEMPLATES = (
    "{m0} from {topic}",
    "{topic}: {m0}",
    "taken at {topic}, {m0}",
    "a souvenir of {topic}, {m0}",
    "{m0}, left over after {topic}",
    "remembering {topic} with {m0}",
    "what was left of {topic}: {m0}",
)
_PLAIN_TEMPLATES = ("{m0}, nothing else to say", "just {m0}", "someone kept {m0}", "{m0} we found")


def scene_topic(rng: np.random.Generator, objects: Sequence[SceneObject]) -> int:
    """The story of a scene: hinted by its largest object's shape and colour (module docstring)."""
    if rng.random() < P_TOPIC_FROM_IMAGE:
        largest = max(objects, key=lambda o: o.extent)
        return (largest.shape * len(COLOURS) + largest.colour) % len(TOPICS)
    return int(rng.integers(len(TOPICS)))


def object_materials(rng: np.random.Generator, objects: Sequence[SceneObject]) -> list[int]:
    """Each object's material (not rendered), an index into :data:`MATERIALS`."""
    return [int(rng.integers(len(MATERIALS))) for _ in objects]


def _draw(rng: np.random.Generator, objects: Sequence[SceneObject], image_size: int, topic: int,
          materials: Sequence[int]) -> tuple[np.ndarray, str]:
    facts = np.full(CAPTION_FACT_WIDTH, -1, dtype=np.int32)
    index = int(rng.integers(len(objects)))
    o = objects[index]
    facts[0] = o.shape
    if rng.random() < _P_STATE["colour"]:
        facts[1] = o.colour
    if rng.random() < _P_STATE["size"]:
        facts[2] = o.size
    if rng.random() < _P_STATE["position"]:
        facts[3] = third(o.x, image_size)
    mention = _mention_text(rng, facts[:MENTION_WIDTH])
    if rng.random() < P_STATES_MATERIAL:
        # "a red disc" -> "a red wooden disc": the material sits just before the noun, as in English.
        noun_words = sorted(_SHAPE_WORDS[SHAPES[o.shape]], key=len, reverse=True)
        material = MATERIALS[materials[index]]
        for noun in noun_words:
            if f" {noun}" in mention:
                mention = mention.replace(f" {noun}", f" {material} {noun}", 1)
                break
    if rng.random() < P_STATES_TOPIC:
        text = _pick(rng, _TOPIC_TEMPLATES).format(m0=mention, topic=_pick(rng, TOPICS[topic]))
    else:
        text = _pick(rng, _PLAIN_TEMPLATES).format(m0=mention)
    return facts, text


def complementary_captions(rng: np.random.Generator, objects: Sequence[SceneObject], image_size: int, count: int,
                           topic: int, materials: Sequence[int]) -> tuple[list[str], np.ndarray]:
    """(``count`` texts, int32 [count, 11] facts): complementary captions of a scene with its story and materials;
    the captions of one scene state different facts rows where a few redraws allow (as the literal ones do)."""
    return distinct_captions(lambda: _draw(rng, objects, image_size, topic, materials),
                             lambda text: _finish_text(rng, text), count)

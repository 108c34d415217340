"""Captions of synthetic scenes: text from templates and synonyms, with the facts row each text states.

``captions_per_image`` captions per scene from varied templates and synonyms ("circle" / "disc" / "round shape",
"large" / "big", ...). A caption names one object (shape always; colour, size, column, row optional), or two
objects, either joined by "and" (no relation) or with a relation ("a red circle to the left of a blue square",
also written "a blue square with a red circle to the left of it"). The stated facts are exactly what the text
asserts, with one deliberate exception: a few captions mention the object count ("two shapes: ..."), true of
their own scene; counts are decoration and are not facts, so truth relevance ignores them. Captions of one scene
state different fact rows (a bounded number of redraws; in practice always). Text is plain ASCII, sometimes
capitalised and ended by a full stop, like crowd-sourced captions.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from kitm.data.synthetic.caption_draws import distinct_captions, finish_text
from kitm.data.synthetic.scenes import SceneObject, relations_between, third
from kitm.relevance.scene_facts import (CAPTION_FACT_WIDTH, COLOURS, COLUMNS, MENTION_WIDTH, RELATIONS, ROWS, SHAPES,
                                        SIZES, relation_gap)

_CAPTION_TRIES = 40

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


def _choose_mention(rng: np.random.Generator, o: SceneObject, image_size: int, p_position: float) -> np.ndarray:
    mention = np.full(MENTION_WIDTH, -1, dtype=np.int32)
    mention[0] = o.shape
    if rng.random() < _P_STATE_COLOUR:
        mention[1] = o.colour
    if rng.random() < _P_STATE_SIZE:
        mention[2] = o.size
    if rng.random() < p_position:
        mention[3] = third(o.x, image_size)
    if rng.random() < p_position:
        mention[4] = third(o.y, image_size)
    return mention


def _draw_caption(rng: np.random.Generator, objects: Sequence[SceneObject], image_size: int):
    """One (facts row, text) true of ``objects``."""
    facts = np.full(CAPTION_FACT_WIDTH, -1, dtype=np.int32)
    count = len(objects)
    kind = "single"
    if count > 1:
        kind = _KINDS[min(int(np.searchsorted(_KIND_CUMULATIVE, rng.random(), side="right")), len(_KINDS) - 1)]
    counted = rng.random() < _P_COUNTED
    if kind == "single":
        described = objects[int(rng.integers(count))]
        facts[:MENTION_WIDTH] = _choose_mention(rng, described, image_size, _P_STATE_POSITION["single"])
        m0 = _mention_text(rng, facts[:MENTION_WIDTH])
        if counted:
            template = _COUNTED_SINGLE[0] if count == 1 else _COUNTED_SINGLE[1]
        else:
            template = _pick(rng, _SINGLE_TEMPLATES)
        return facts, template.format(m0=m0, count=_COUNT_WORDS[count - 1])

    a = int(rng.integers(count))
    b = (a + 1 + int(rng.integers(count - 1))) % count  # uniform over the other objects
    holding = relations_between(objects[a], objects[b], relation_gap(image_size))
    if kind == "relation" and holding:
        facts[-1] = holding[int(rng.integers(len(holding)))]
    p_position = _P_STATE_POSITION["relation" if facts[-1] >= 0 else "pair"]
    facts[:MENTION_WIDTH] = _choose_mention(rng, objects[a], image_size, p_position)
    facts[MENTION_WIDTH : 2 * MENTION_WIDTH] = _choose_mention(rng, objects[b], image_size, p_position)
    m0 = _mention_text(rng, facts[:MENTION_WIDTH])
    m1 = _mention_text(rng, facts[MENTION_WIDTH : 2 * MENTION_WIDTH])
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
    return finish_text(rng, text, p_capital=0.5, p_full_stop=0.3)


def scene_captions(rng: np.random.Generator, objects: Sequence[SceneObject], image_size: int, count: int):
    """(``count`` texts, int32 [count, 11] facts) true of ``objects``, stating different facts where it can."""
    return distinct_captions(lambda: _draw_caption(rng, objects, image_size), lambda text: _finish_text(rng, text),
                             count, _CAPTION_TRIES)

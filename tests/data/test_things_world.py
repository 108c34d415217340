"""The things world (kitm.data.synthetic.things): captions that say what their facts say, exact relevance 1.0 on the
own image, near-duplicates at the stated rate, drawings that differ by category, colour and setting, the
complementary style, determinism; and the shapes world still byte-identical to the generator of kitm's first studies.
"""

from __future__ import annotations

import hashlib
import re

import numpy as np
import pytest

import kitm  # noqa: F401  (selects the TensorFlow backend before anything imports keras)
from kitm.data.synthetic import generate_world
from kitm.data.synthetic.things.lexicon import (COUNT_WORDS, RELATION_PHRASES, SETTING_NAMES, SETTING_PLACES,
                                                THINGS, VAGUE_NOUNS)
from kitm.data.synthetic.things.rendering import object_layer, render_scene
from kitm.data.synthetic.things.scenes import NEAR_DUPLICATE_RATE, ThingObject, ThingScene
from kitm.relevance.things_facts import (CATEGORIES, COLOURS, MAX_OBJECTS, RELATIONS, SETTINGS, SUPERCATEGORIES,
                                         validate_caption_facts, validate_scene_facts)


@pytest.fixture(scope="module")
def world():
    return generate_world(400, seed=5, image_size=64)


def _digest(w) -> str:
    h = hashlib.sha256()
    for array in (w.images, w.scene_facts, w.caption_facts, w.splits, w.derived_from):
        h.update(array.tobytes())
    h.update("\n".join("\t".join(c) for c in w.captions).encode())
    return h.hexdigest()


def test_every_caption_is_exactly_true_of_its_own_image(world):
    relevance = world.relevance()
    cpi = world.captions_per_image
    own = relevance[np.arange(world.num_scenes)[:, None], np.arange(world.num_scenes)[:, None] * cpi + np.arange(cpi)]
    np.testing.assert_array_equal(own, 1.0)
    assert world.world == "things" and world.scene_facts.shape[1:] == (MAX_OBJECTS, 7)
    validate_scene_facts(world.scene_facts)
    validate_caption_facts(world.caption_facts.reshape(-1, world.caption_facts.shape[-1]))
    # graded, and mostly low for unrelated pairs, as in COCO
    assert 0.02 < relevance.mean() < 0.2 and (relevance == 0).mean() > 0.6


def _says_noun(text: str, noun: int) -> bool:
    if noun < len(CATEGORIES):
        thing = THINGS[noun]
        words = set(thing.nouns) | set(thing.plurals.values())
    else:
        words = {w for pair in VAGUE_NOUNS[SUPERCATEGORIES[noun - len(CATEGORIES)]] for w in pair}
    return any(re.search(rf"\b{re.escape(w.lower())}\b", text) for w in words)


def test_captions_state_their_facts_in_words(world):
    """Every stated noun, count, setting and relation has its words in the text."""
    for texts, rows in zip(world.captions, world.caption_facts):
        for text, row in zip(texts, rows):
            lower = text.lower()
            for m in (row[1:6], row[6:11]):
                if m[0] < 0:
                    continue
                assert _says_noun(lower, int(m[0])), (text, row)
                if 1 <= m[1] <= MAX_OBJECTS:
                    assert any(word in lower for word in COUNT_WORDS[int(m[1])]), (text, row)
            if row[0] >= 0:
                setting = SETTINGS[row[0]]
                assert any(p.lower() in lower for p in SETTING_PLACES[setting] + SETTING_NAMES[setting]), (text, row)
            if row[-1] >= 0:
                assert any(p in lower for p in RELATION_PHRASES[RELATIONS[row[-1]]]), (text, row)


def test_captions_read_like_people_write_them(world):
    texts = [t for group in world.captions for t in group]
    lengths = np.array([len(re.findall(r"[a-z0-9']+", t.lower())) for t in texts])
    assert 8.5 < lengths.mean() < 12.5 and lengths.min() >= 2
    assert np.mean([t[0].isupper() for t in texts]) > 0.8
    assert len(set(texts)) / len(texts) > 0.99  # hardly any caption twice
    assert not any("  " in t or "{" in t for t in texts)


def test_near_duplicates_at_the_stated_rate_and_deterministic():
    w = generate_world(1500, seed=2, image_size=48, render=False)
    share = float((w.derived_from >= 0).mean())
    assert abs(share - NEAR_DUPLICATE_RATE) < 0.02
    again = generate_world(1500, seed=2, image_size=48, render=False)
    assert _digest(w) == _digest(again)
    assert not w.images.any()  # render=False leaves the pixels black and nothing else changes
    rendered = generate_world(60, seed=2, image_size=48)
    assert rendered.captions == [c for c in w.captions[:60]] and (rendered.scene_facts == w.scene_facts[:60]).all()


def _scene(category: str, colour: str, setting: str = "snow") -> ThingScene:
    return ThingScene(SETTINGS.index(setting), (ThingObject(CATEGORIES.index(category), COLOURS.index(colour), 1, 0,
                                                            38.0, 32, 32),))


def test_drawings_differ_by_category_colour_and_setting():
    rng = np.random.default_rng(0)

    def mean_image(scene):
        return np.mean([render_scene(scene, 64, np.random.default_rng(s)).astype(np.float32) for s in range(4)], 0)

    dog, cat, red_car, blue_car = (mean_image(_scene("dog", "brown")), mean_image(_scene("cat", "brown")),
                                   mean_image(_scene("car", "red")), mean_image(_scene("car", "blue")))
    assert np.abs(dog - cat).mean() > 3 and np.abs(red_car - blue_car).mean() > 3
    beach, street = mean_image(_scene("dog", "brown", "beach")), mean_image(_scene("dog", "brown", "street"))
    assert np.abs(beach - street).mean() > 20
    layer, left, top = object_layer(_scene("car", "red").objects[0], rng)
    assert layer.shape[0] == layer.shape[1] >= 38 and 0 < layer[..., 3].mean() < 1 and left < 32 < left + 40
    # every icon draws something at its size
    for c in range(len(CATEGORIES)):
        drawn = object_layer(ThingObject(c, 0, 1, 0, 30.0, 32, 32), rng)[0][..., 3]
        assert drawn.mean() > 0.08, CATEGORIES[c]


def test_complementary_captions_state_one_visible_mention():
    w = generate_world(120, seed=1, image_size=64, caption_style="complementary", render=False)
    rows = w.caption_facts.reshape(-1, w.caption_facts.shape[-1])
    assert (rows[:, 0] == -1).all() and (rows[:, 6:] == -1).all() and (rows[:, 1] >= 0).all()
    assert (w.topics >= 0).all()
    texts = " ".join(t for group in w.captions for t in group).lower()
    assert texts.count("wedding") + texts.count("party") + texts.count("market") > 10
    relevance = w.relevance()
    own = relevance[np.repeat(np.arange(120), 5), np.arange(600)]
    np.testing.assert_array_equal(own, 1.0)


def test_the_shapes_world_is_unchanged():
    """The world of kitm's first two claims studies, by name, byte for byte as its generator made it (digests
    recorded from the generator before the things world existed)."""
    literal = generate_world(200, seed=3, image_size=48, world="shapes")
    complementary = generate_world(200, seed=3, image_size=48, caption_style="complementary", world="shapes")
    assert _digest(literal) == "7e22918ef4993ea3be3b903ecea0d08da63f9c6b0f487fb7318c5f6ffa9484e7"
    assert _digest(complementary) == "3cf17819ebd00ff9a888552e3ea717f9cca928705c1a5988067401b92abcbc78"
    assert literal.world == "shapes" and literal.caption_facts.shape[-1] == 11


def test_unknown_world_is_refused():
    with pytest.raises(ValueError, match="`world`.*moon.*things, shapes"):
        generate_world(10, world="moon")

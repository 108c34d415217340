"""kitm.relevance.things_truth against an oracle written from its definition (docs/methods.md#truth), hand-computed
values, edge cases (counts, vague nouns, relations needing two distinct objects, absent mentions), the TensorFlow
kernel against the NumPy one, and the dispatch of kitm.relevance.world_truth."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from kitm.relevance.things_facts import (CATEGORIES, CATEGORY_SUPER_INDEX, COLOURS, COUNT_SEVERAL, MAX_OBJECTS,
                                         PATTERNS, RELATIONS, SETTINGS, SIZES, SUPERCATEGORIES,
                                         validate_caption_facts, validate_scene_facts)
from kitm.relevance.things_truth import things_relevance, things_relevance_tf
from kitm.relevance.world_truth import world_relevance

ABSENT = [-1] * 7


def obj(setting, category, colour, size, pattern, x, y):
    return [SETTINGS.index(setting), CATEGORIES.index(category), COLOURS.index(colour), SIZES.index(size),
            PATTERNS.index(pattern), x, y]


def scenes(*object_lists):
    return np.array([objs + [ABSENT] * (MAX_OBJECTS - len(objs)) for objs in object_lists], dtype=np.int32)


def noun(name):
    return CATEGORIES.index(name) if name in CATEGORIES else len(CATEGORIES) + SUPERCATEGORIES.index(name)


def mention(name, count=None, colour=None, size=None, pattern=None):
    return [noun(name), -1 if count is None else count, -1 if colour is None else COLOURS.index(colour),
            -1 if size is None else SIZES.index(size), -1 if pattern is None else PATTERNS.index(pattern)]


def caption(m0, m1=None, relation=None, setting=None):
    return ([-1 if setting is None else SETTINGS.index(setting)] + m0 + (m1 or [-1] * 5)
            + [-1 if relation is None else RELATIONS.index(relation)])


def oracle(scene_facts, caption_facts, image_size=64):
    """The definition, transcribed with loops over objects and pairs."""
    gap, reach = image_size / 8, image_size * 3 / 8

    def fits(m, o):
        return m[0] == o[1] or m[0] == len(CATEGORIES) + CATEGORY_SUPER_INDEX[o[1]]

    def holds(rel, a, b):
        return {"left of": a[5] < b[5] - gap, "right of": a[5] > b[5] + gap, "above": a[6] < b[6] - gap,
                "below": a[6] > b[6] + gap, "next to": max(abs(a[5] - b[5]), abs(a[6] - b[6])) <= reach}[rel]

    def match(m, o, objects):
        if not fits(m, o):
            return 0.0
        n = sum(fits(m, other) for other in objects)
        stated = [a for a in (2, 3, 4) if m[a] != -1]
        agree = sum(m[a] == o[a] for a in stated)
        if m[1] != -1:
            stated.append("count")
            agree += (n >= 3) if m[1] == COUNT_SEVERAL else (n == m[1])
        return (1 + agree) / (1 + len(stated))

    out = np.zeros((len(scene_facts), len(caption_facts)))
    for i, scene in enumerate(scene_facts):
        objects = [list(o) for o in scene if o[1] != -1]
        for k, row in enumerate(caption_facts):
            mentions = [row[1:6]] + ([row[6:11]] if row[6] != -1 else [])
            terms = [max(match(m, o, objects) for o in objects) for m in mentions]
            if row[11] != -1:
                pairs = [match(mentions[0], a, objects) * match(mentions[1], b, objects)
                         for (p, a), (q, b) in itertools.permutations(enumerate(objects), 2)
                         if holds(RELATIONS[row[11]], a, b)]
                terms.append(max(pairs, default=0.0))
            if row[0] != -1:
                terms.append(float(row[0] == objects[0][0]))
            out[i, k] = sum(terms) / len(terms)
    return out


def both(scene_facts, caption_facts, image_size=64):
    caption_facts = np.array(caption_facts, dtype=np.int32)
    return (things_relevance(scene_facts, caption_facts, image_size=image_size),
            things_relevance_tf(scene_facts, caption_facts, image_size=image_size).numpy())


STREET = scenes([obj("street", "car", "blue", "large", "plain", 20, 40), obj("street", "man", "red", "small",
                                                                             "striped", 40, 40)])


def test_red_car_on_a_street_against_a_blue_car_on_a_street_is_three_quarters():
    np_value, tf_value = both(STREET, [caption(mention("car", colour="red"), setting="street")])
    assert np_value[0, 0] == pytest.approx((1 / 2 + 1) / 2, abs=1e-15)
    assert tf_value[0, 0] == pytest.approx(0.75, abs=1e-6)


def test_the_noun_gates_the_attributes():
    """A blue dog scores nothing on a blue car: the colour agrees, the noun does not."""
    np_value, _ = both(STREET, [caption(mention("dog", colour="blue"))])
    assert np_value[0, 0] == 0.0


def test_a_supercategory_fits_every_member_and_counts_them():
    rows = [caption(mention("person")), caption(mention("vehicle", count=1)), caption(mention("animal")),
            caption(mention("vehicle", count=2))]
    np_value, tf_value = both(STREET, rows)
    np.testing.assert_allclose(np_value[0], [1.0, 1.0, 0.0, 0.5], atol=1e-15)
    np.testing.assert_allclose(tf_value[0], np_value[0], atol=1e-6)


def test_counts_exact_and_several():
    herd = scenes([obj("farm", "sheep", "white", "small", "plain", x, 40) for x in (8, 24, 40, 56)])
    rows = [caption(mention("sheep", count=4)), caption(mention("sheep", count=3)),
            caption(mention("sheep", count=COUNT_SEVERAL)), caption(mention("sheep", count=2, colour="white"))]
    np_value, tf_value = both(herd, rows)
    np.testing.assert_allclose(np_value[0], [1.0, 0.5, 1.0, 2 / 3], atol=1e-15)
    np.testing.assert_allclose(tf_value, np_value, atol=1e-6)
    two = scenes([obj("farm", "sheep", "white", "small", "plain", x, 40) for x in (8, 40)])
    assert both(two, [caption(mention("sheep", count=COUNT_SEVERAL))])[0][0, 0] == 0.5


def test_a_relation_needs_two_distinct_objects():
    """One car cannot be next to itself: "a car next to a vehicle" on a street with one car scores its mentions but
    not the relation."""
    lone = scenes([obj("street", "car", "blue", "large", "plain", 32, 32)])
    np_value, tf_value = both(lone, [caption(mention("car"), mention("vehicle"), relation="next to")])
    assert np_value[0, 0] == pytest.approx(2 / 3, abs=1e-15)
    assert tf_value[0, 0] == pytest.approx(2 / 3, abs=1e-6)


def test_relations_and_their_reverse():
    rows = [caption(mention("car"), mention("man"), relation=r) for r in RELATIONS]
    np_value, tf_value = both(STREET, rows)
    # car at x=20, man at x=40, same height, 20 px apart (gap 8, reach 24): left of and next to hold, no other
    np.testing.assert_allclose(np_value[0], [1.0, 2 / 3, 2 / 3, 2 / 3, 1.0], atol=1e-15)
    np.testing.assert_allclose(tf_value[0], np_value[0], atol=1e-6)


def test_random_facts_against_the_oracle_and_tensorflow():
    rng = np.random.default_rng(0)
    scene_rows, caption_rows = [], []
    for _ in range(40):
        setting = int(rng.integers(len(SETTINGS)))
        count = int(rng.integers(1, MAX_OBJECTS + 1))
        categories = rng.integers(0, 8, size=count)  # few categories, so that nouns, counts and groups repeat
        scene_rows.append([[setting, int(c), int(rng.integers(len(COLOURS))), int(rng.integers(2)),
                            int(rng.integers(len(PATTERNS))), int(rng.integers(4, 60)), int(rng.integers(4, 60))]
                           for c in categories])
    for _ in range(120):
        def random_mention():
            name = int(rng.integers(0, 8)) if rng.random() < 0.8 else len(CATEGORIES) + int(rng.integers(0, 2))
            return [name, int(rng.choice([-1, 1, 2, 3, COUNT_SEVERAL])), int(rng.choice([-1, 0, 1, 2])),
                    int(rng.choice([-1, 0, 1])), int(rng.choice([-1, 0, 1]))]
        second = random_mention() if rng.random() < 0.6 else [-1] * 5
        relation = int(rng.integers(len(RELATIONS))) if second[0] >= 0 and rng.random() < 0.7 else -1
        caption_rows.append([int(rng.choice([-1, 0, 1, 2]))] + random_mention() + second + [relation])
    scene_facts, caption_facts = scenes(*scene_rows), np.array(caption_rows, dtype=np.int32)
    expected = oracle(scene_facts, caption_facts)
    np_value, tf_value = both(scene_facts, caption_facts)
    np.testing.assert_allclose(np_value, expected, atol=1e-12)
    np.testing.assert_allclose(tf_value, expected, atol=1e-6)
    assert 0.0 < expected.mean() < 1.0 and (expected == 0).any() and (expected == 1).any()


def test_world_relevance_dispatches_and_accepts_flat_scene_rows():
    rows = np.array([caption(mention("car", colour="red"), setting="street")], dtype=np.int32)
    flat = STREET.reshape(1, -1)
    assert world_relevance(flat, rows, world="things", image_size=64)[0, 0] == pytest.approx(0.75)
    with pytest.raises(ValueError, match="Unknown synthetic world 'moon'"):
        world_relevance(flat, rows, world="moon", image_size=64)


@pytest.mark.parametrize("bad, message", [
    (scenes([obj("street", "car", "blue", "large", "plain", 20, 40)[:1] + [99, 0, 0, 0, 1, 1]]),
     "its category must be"),
    (np.array([[ABSENT, obj("street", "car", "blue", "large", "plain", 20, 40)] + [ABSENT] * 4]),
     "object 0 of every scene must be present"),
    (scenes([obj("street", "car", "blue", "large", "plain", 20, 40), obj("beach", "man", "red", "small",
                                                                         "plain", 4, 4)]),
     "the scene's one setting"),
])
def test_bad_scene_facts_are_named(bad, message):
    with pytest.raises(ValueError, match=message):
        validate_scene_facts(bad)


@pytest.mark.parametrize("row, message", [
    (caption([-1, -1, -1, -1, -1]), "mention 0 must state its noun"),
    (caption(mention("car"), relation="next to"), "a relation needs mention 1"),
    (caption(mention("car", count=0)), "a count must be"),
    (caption(mention("car")) [:-1] + [9], "the relation must be"),
])
def test_bad_caption_facts_are_named(row, message):
    with pytest.raises(ValueError, match=message):
        validate_caption_facts(np.array([row]))

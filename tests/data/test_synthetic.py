"""Tests for kitm.data.synthetic's shapes world (``world="shapes"``, the world of kitm's first claims studies), written
from the relevance definition in the task brief / module docstring (the things world: tests/data/test_things_world.py).

The oracle below is a plain Python transcription of the definition (loops over objects, pairs and mentions);
hand-made fact arrays give exact values; generated worlds are checked against their own geometry and pixels.
"""

from __future__ import annotations

import collections
import re

import numpy as np
import pytest

import kitm  # noqa: F401  (selects the TensorFlow backend before anything imports keras)
from kitm.data import synthetic as syn
from kitm.data.synthetic import generate_world
from kitm.data.synthetic.rendering import COLOUR_RGB
from kitm.relevance.scene_facts import (
    CAPTION_FACT_WIDTH,
    COLOURS,
    COLUMNS,
    MAX_OBJECTS,
    RELATIONS,
    ROWS,
    SHAPES,
    SIZES,
)
from kitm.relevance.truth import truth_relevance, truth_relevance_tf

ABSENT = [-1] * 7


# ----------------------------------------------------------------------------------------------------------------
# Hand-built facts and the oracle


def obj(shape: str, colour: str, size: str, x: int, y: int, image_size: int = 64) -> list[int]:
    """A present object; column / row are the thirds containing the centre."""
    column, row = 3 * x // image_size, 3 * y // image_size
    return [SHAPES.index(shape), COLOURS.index(colour), SIZES.index(size), column, row, x, y]


def mention(shape: str, colour=None, size=None, column=None, row=None) -> list[int]:
    return [
        SHAPES.index(shape),
        -1 if colour is None else COLOURS.index(colour),
        -1 if size is None else SIZES.index(size),
        -1 if column is None else COLUMNS.index(column),
        -1 if row is None else ROWS.index(row),
    ]


def caption(m0: list[int], m1: list[int] | None = None, relation: str | None = None) -> list[int]:
    return m0 + (m1 if m1 is not None else [-1] * 5) + [-1 if relation is None else RELATIONS.index(relation)]


def scenes(*object_lists: list[list[int]]) -> np.ndarray:
    return np.array([objs + [ABSENT] * (MAX_OBJECTS - len(objs)) for objs in object_lists], dtype=np.int32)


def captions(*rows: list[int]) -> np.ndarray:
    return np.array(rows, dtype=np.int32)


def oracle(scene_facts: np.ndarray, caption_facts: np.ndarray, image_size: int = 64) -> np.ndarray:
    gap = image_size / 8

    def share(m, o) -> float:  # s(m, o): stated attributes of m equal to o's, over stated ones
        stated = [i for i in range(5) if m[i] != -1]
        return sum(m[i] == o[i] for i in stated) / len(stated)

    def holds(rel: str, o1, o2) -> bool:
        x1, y1, x2, y2 = o1[5], o1[6], o2[5], o2[6]
        return {
            "left of": x1 < x2 - gap,
            "right of": x1 > x2 + gap,
            "above": y1 < y2 - gap,
            "below": y1 > y2 + gap,
        }[rel]

    out = np.zeros((len(scene_facts), len(caption_facts)))
    for i, scene in enumerate(scene_facts):
        objects = [list(o) for o in scene if o[0] != -1]
        for k, row in enumerate(caption_facts):
            mentions = [row[0:5]] + ([row[5:10]] if row[5] != -1 else [])
            terms = [max((share(m, o) for o in objects), default=0.0) for m in mentions]
            if row[10] != -1:
                rel = RELATIONS[row[10]]
                pairs = [
                    share(mentions[0], o1) * share(mentions[1], o2)
                    for a, o1 in enumerate(objects)
                    for b, o2 in enumerate(objects)
                    if a != b and holds(rel, o1, o2)
                ]
                terms.append(max(pairs, default=0.0))
            out[i, k] = sum(terms) / len(terms)
    return out


def both(scene_facts, caption_facts, image_size: int = 64) -> tuple[np.ndarray, np.ndarray]:
    return (
        truth_relevance(scene_facts, caption_facts, image_size=image_size),
        truth_relevance_tf(scene_facts, caption_facts, image_size=image_size).numpy(),
    )


# ----------------------------------------------------------------------------------------------------------------
# Exact hand-computed values


def test_small_red_circle_against_large_red_circle_is_two_thirds():
    scene = scenes([obj("circle", "red", "large", 32, 32)])
    np_value, tf_value = both(scene, captions(caption(mention("circle", "red", "small"))))
    assert np_value.dtype == np.float64 and np_value.shape == (1, 1)
    assert np_value[0, 0] == pytest.approx(2 / 3, abs=1e-15)
    assert tf_value[0, 0] == pytest.approx(2 / 3, abs=1e-6)


def test_relation_reversed_loses_only_the_relation_term():
    rows = captions(caption(mention("circle", "red"), mention("square", "blue"), "left of"))
    reversed_scene = [obj("circle", "red", "small", 50, 32), obj("square", "blue", "small", 10, 32)]
    right_scene = [obj("circle", "red", "small", 10, 32), obj("square", "blue", "small", 50, 32)]
    np_value, tf_value = both(scenes(reversed_scene, right_scene), rows)
    np.testing.assert_allclose(np_value[:, 0], [(1 + 1 + 0) / 3, 1.0], atol=1e-15)
    np.testing.assert_allclose(tf_value[:, 0], [2 / 3, 1.0], atol=1e-6)


def test_vertical_relations_use_image_rows_growing_downwards():
    scene = scenes([obj("triangle", "green", "large", 32, 10), obj("cross", "white", "small", 32, 50)])
    rows = captions(
        caption(mention("triangle"), mention("cross"), "above"),
        caption(mention("triangle"), mention("cross"), "below"),
        caption(mention("cross"), mention("triangle"), "below"),
        caption(mention("triangle"), mention("cross"), "left of"),
    )
    np_value, tf_value = both(scene, rows)
    np.testing.assert_allclose(np_value[0], [1.0, 2 / 3, 1.0, 2 / 3], atol=1e-15)
    np.testing.assert_allclose(tf_value[0], np_value[0], atol=1e-6)


def test_no_matching_shape_and_partial_matches():
    scene = scenes([obj("triangle", "red", "small", 10, 32), obj("diamond", "blue", "small", 50, 32)])
    rows = captions(
        caption(mention("circle")),  # shape only, not there: 0
        caption(mention("circle", "red")),  # colour right, shape wrong: 1/2
        caption(mention("circle", "red"), mention("square", "blue"), "left of"),  # (1/2 + 1/2 + 1/4) / 3
        caption(mention("circle", "red"), mention("square", "blue")),  # no relation: (1/2 + 1/2) / 2
    )
    np_value, tf_value = both(scene, rows)
    np.testing.assert_allclose(np_value[0], [0.0, 0.5, 1.25 / 3, 0.5], atol=1e-15)
    np.testing.assert_allclose(tf_value[0], np_value[0], atol=1e-6)


def test_absent_objects_never_match():
    # An implementation that compared unstated -1 with absent -1, or kept padding in the pairs, would score > 0.
    only_square = scenes([obj("square", "red", "small", 50, 50)])
    no_objects = np.full((1, MAX_OBJECTS, 7), -1, dtype=np.int32)
    rows = captions(
        caption(mention("circle")),
        caption(mention("square", "red"), mention("circle"), "right of"),
        caption(mention("square", "red"), mention("square", "red"), "right of"),
    )
    np_value, tf_value = both(np.concatenate([only_square, no_objects]), rows)
    np.testing.assert_allclose(np_value, [[0.0, 1 / 3, 2 / 3], [0.0, 0.0, 0.0]], atol=1e-15)
    np.testing.assert_allclose(tf_value, np_value, atol=1e-6)


def test_relation_needs_two_distinct_objects():
    # Both mentions fit the single red circle, but "circle left of circle" needs a second object (an object is
    # never left of itself, as the gap is positive).
    np_value, tf_value = both(
        scenes([obj("circle", "red", "small", 20, 20)]),
        captions(caption(mention("circle", "red"), mention("circle", "red"), "left of")),
    )
    assert np_value[0, 0] == pytest.approx(2 / 3, abs=1e-15)
    assert tf_value[0, 0] == pytest.approx(2 / 3, abs=1e-6)


def test_relation_term_takes_the_best_qualifying_pair():
    # Mention terms come from A and B, but only (A, C) is "above": r = s(m0, A) * s(m1, C) = 1 * 1/2.
    scene = scenes(
        [
            obj("circle", "red", "small", 10, 50),  # A
            obj("square", "blue", "small", 30, 10),  # B
            obj("square", "red", "small", 50, 60),  # C
        ]
    )
    np_value, tf_value = both(scene, captions(caption(mention("circle", "red"), mention("square", "blue"), "above")))
    assert np_value[0, 0] == pytest.approx(2.5 / 3, abs=1e-15)
    assert tf_value[0, 0] == pytest.approx(2.5 / 3, abs=1e-6)


def test_position_attributes_and_ties():
    # Two equally good objects (a tie) and stated column / row.
    scene = scenes([obj("diamond", "yellow", "large", 10, 10), obj("diamond", "yellow", "large", 54, 54)])
    rows = captions(
        caption(mention("diamond", column="left", row="bottom")),  # each object matches 2 of 3
        caption(mention("diamond", "yellow", "large", "right", "bottom")),
        caption(mention("diamond", "purple", "small", "center", "middle")),  # 1 of 5
    )
    np_value, tf_value = both(scene, rows)
    np.testing.assert_allclose(np_value[0], [2 / 3, 1.0, 0.2], atol=1e-15)
    np.testing.assert_allclose(tf_value[0], np_value[0], atol=1e-6)


@pytest.mark.parametrize(
    "image_size, offset, expected", [(64, 8, 2 / 3), (64, 9, 1.0), (128, 16, 2 / 3), (128, 17, 1.0)]
)
def test_relation_gap_is_strict_and_scales_with_image_size(image_size, offset, expected):
    scene = scenes(
        [obj("circle", "red", "small", 20, 20, image_size), obj("cross", "red", "small", 20 + offset, 20, image_size)]
    )
    rows = captions(caption(mention("circle"), mention("cross"), "left of"))
    np_value, tf_value = both(scene, rows, image_size)
    assert np_value[0, 0] == pytest.approx(expected, abs=1e-15)
    assert tf_value[0, 0] == pytest.approx(expected, abs=1e-6)


def random_facts(rng: np.random.Generator, num_scenes: int, num_captions: int) -> tuple[np.ndarray, np.ndarray]:
    scene = np.full((num_scenes, MAX_OBJECTS, 7), -1, dtype=np.int32)
    for i in range(num_scenes):
        for o in range(rng.integers(0, MAX_OBJECTS + 1)):
            x, y = rng.integers(0, 64, size=2)
            names = (SHAPES[rng.integers(len(SHAPES))], COLOURS[rng.integers(len(COLOURS))])
            scene[i, o] = obj(*names, SIZES[rng.integers(len(SIZES))], x, y)
    # Few shapes and colours so that partial and full matches are common.
    scene[..., 0] = np.where(scene[..., 0] >= 0, scene[..., 0] % 2, -1)

    def random_mention():
        values = [int(rng.integers(2))] + [int(rng.integers(n)) for n in (len(COLOURS), len(SIZES), 3, 3)]
        return [v if (f == 0 or rng.random() < 0.5) else -1 for f, v in enumerate(values)]

    rows = []
    for _ in range(num_captions):
        first = random_mention()
        second = random_mention() if rng.random() < 0.7 else None
        relation = RELATIONS[rng.integers(len(RELATIONS))] if second is not None and rng.random() < 0.7 else None
        rows.append(caption(first, second, relation))
    return scene, np.array(rows, dtype=np.int32)


@pytest.mark.parametrize("image_size", [64, 96])
def test_matches_the_oracle_on_random_facts(image_size):
    scene, rows = random_facts(np.random.default_rng(7), 40, 60)
    expected = oracle(scene, rows, image_size)
    np_value, tf_value = both(scene, rows, image_size)
    np.testing.assert_allclose(np_value, expected, atol=1e-12)
    np.testing.assert_allclose(tf_value, expected, atol=1e-6)
    assert (expected > 0).mean() > 0.3 and (expected == 1).any() and ((expected > 0) & (expected < 1)).any()


def test_empty_image_or_caption_sets_give_empty_matrices():
    scene = scenes([obj("circle", "red", "small", 5, 5)])
    rows = captions(caption(mention("circle")))
    for m, k in ((0, 1), (1, 0), (0, 0)):
        np_value, tf_value = both(scene[:m], rows[:k])
        assert np_value.shape == tf_value.shape == (m, k)


@pytest.mark.parametrize(
    "scene, rows, message",
    [
        (np.zeros((2, 7), np.int32), captions(caption(mention("circle"))), "scene_facts"),
        (np.zeros((2, 3, 6), np.int32), captions(caption(mention("circle"))), "scene_facts"),
        (scenes([obj("circle", "red", "small", 5, 5)]).astype(np.float32), captions([0] + [-1] * 10), "scene_facts"),
        (scenes([[0, 0, 0, 0, 0, -1, 5]]), captions(caption(mention("circle"))), r"scene_facts\[0, 0\]"),
        (scenes([[0, 9, 0, 0, 0, 5, 5]]), captions(caption(mention("circle"))), "scene_facts.*colour"),
        (scenes([obj("circle", "red", "small", 5, 5)]), np.zeros((2, 10), np.int32), "caption_facts"),
        (scenes([obj("circle", "red", "small", 5, 5)]), captions([-1, 0] + [-1] * 9), r"caption_facts\[0\].*shape"),
        (scenes([obj("circle", "red", "small", 5, 5)]), captions([0] + [-1] * 9 + [2]), "needs mention 1"),
        (scenes([obj("circle", "red", "small", 5, 5)]), captions([0] + [-1] * 9 + [4]), "relation"),
        (scenes([obj("circle", "red", "small", 5, 5)]), captions([0] + [-1] * 5 + [0] + [-1] * 4), "mention 1"),
    ],
)
def test_bad_facts_raise_clear_errors(scene, rows, message):
    with pytest.raises(ValueError, match=message):
        truth_relevance(scene, rows)


# ----------------------------------------------------------------------------------------------------------------
# Generated worlds


@pytest.fixture(scope="module")
def world() -> syn.SyntheticWorld:
    return generate_world(500, seed=11, world="shapes")


def test_world_arrays_have_the_documented_layout(world):
    assert world.images.shape == (500, 64, 64, 3) and world.images.dtype == np.uint8
    assert world.scene_facts.shape == (500, MAX_OBJECTS, 7) and world.scene_facts.dtype == np.int32
    assert world.caption_facts.shape == (500, 5, CAPTION_FACT_WIDTH) and world.caption_facts.dtype == np.int32
    assert world.splits.dtype == np.dtype("<U5") and set(world.splits) == {"train", "val", "test"}
    assert len(world.captions) == 500 and all(len(c) == 5 for c in world.captions)
    assert world.seed == 11 and world.image_size == 64 and world.captions_per_image == 5
    counts = (world.scene_facts[..., 0] >= 0).sum(axis=1)
    assert counts.min() >= 1 and counts.max() == MAX_OBJECTS
    present = world.scene_facts[..., 0] >= 0
    assert (world.scene_facts[~present] == -1).all() and (world.scene_facts[present] >= 0).all()
    # Objects fill the slots from the front, so padding is always at the end.
    assert (np.diff(present.astype(int), axis=1) <= 0).all()


def test_own_image_relevance_is_one_and_values_are_in_unit_interval(world):
    relevance = world.relevance()  # [500, 2500]
    own = relevance.reshape(500, 500, 5)[np.arange(500), np.arange(500)]
    assert (own == 1.0).all()
    assert relevance.min() >= 0.0 and relevance.max() <= 1.0


def test_own_image_relevance_is_one_at_another_image_size():
    world = generate_world(40, seed=2, image_size=96, captions_per_image=3, world="shapes")
    assert world.images.shape == (40, 96, 96, 3) and world.caption_facts.shape == (40, 3, CAPTION_FACT_WIDTH)
    own = world.relevance().reshape(40, 40, 3)[np.arange(40), np.arange(40)]
    assert (own == 1.0).all()


def test_numpy_and_tf_agree_on_a_world_and_tf_runs_in_graph_mode(world):
    import tensorflow as tf

    rng = np.random.default_rng(0)
    image_index = rng.choice(500, 300, replace=False)
    flat_captions = world.caption_facts.reshape(-1, CAPTION_FACT_WIDTH)
    caption_index = rng.choice(len(flat_captions), 300, replace=False)
    scene, rows = world.scene_facts[image_index], flat_captions[caption_index]
    expected = truth_relevance(scene, rows)
    np.testing.assert_allclose(oracle(scene[:30], rows[:40]), expected[:30, :40], atol=1e-12)

    eager = truth_relevance_tf(scene, rows)
    assert eager.dtype == tf.float32 and eager.shape == (300, 300)
    np.testing.assert_allclose(eager.numpy(), expected, atol=1e-6)

    graph = tf.function(
        truth_relevance_tf,
        input_signature=[tf.TensorSpec([None, None, 7], tf.int32), tf.TensorSpec([None, None], tf.int32)],
    )
    np.testing.assert_allclose(graph(scene, rows).numpy(), expected, atol=1e-6)
    np.testing.assert_allclose(graph(scene[:7], rows[:3]).numpy(), expected[:7, :3], atol=1e-6)

    # As the input pipeline uses it: each batch's image-by-caption matrix inside a tf.data map.
    dataset = tf.data.Dataset.from_tensor_slices((scene[:64], rows[:64])).batch(16)
    batches = list(dataset.map(truth_relevance_tf).as_numpy_iterator())
    assert len(batches) == 4
    for b, batch in enumerate(batches):
        np.testing.assert_allclose(batch, expected[16 * b : 16 * b + 16, 16 * b : 16 * b + 16], atol=1e-6)


def test_same_seed_same_world_other_seed_other_world():
    first, second, other = (generate_world(60, seed=s, world="shapes") for s in (5, 5, 6))
    assert first.images.tobytes() == second.images.tobytes()
    np.testing.assert_array_equal(first.scene_facts, second.scene_facts)
    np.testing.assert_array_equal(first.caption_facts, second.caption_facts)
    np.testing.assert_array_equal(first.splits, second.splits)
    np.testing.assert_array_equal(first.derived_from, second.derived_from)
    assert first.captions == second.captions
    assert first.images.tobytes() != other.images.tobytes()
    assert first.captions != other.captions
    assert not np.array_equal(first.scene_facts, other.scene_facts)


def test_splits_follow_the_fractions(world):
    counts = collections.Counter(world.splits.tolist())
    assert counts == {"train": 400, "val": 50, "test": 50}
    assert not (world.splits[:50] == "train").all()  # a permutation, not blocks
    odd = generate_world(97, seed=1, split_fractions=(0.7, 0.2, 0.1), world="shapes").splits
    for name, fraction in zip(("train", "val", "test"), (0.7, 0.2, 0.1)):
        assert abs((odd == name).sum() - fraction * 97) <= 1
    tiny = generate_world(3, seed=0, split_fractions=(0.98, 0.01, 0.01), world="shapes").splits
    assert sorted(tiny.tolist()) == ["test", "train", "val"]
    assert set(generate_world(5, seed=0, split_fractions=(1.0, 0.0, 0.0), world="shapes").splits) == {"train"}
    no_test = generate_world(10, seed=0, split_fractions=(0.5, 0.5, 0.0), world="shapes")
    assert collections.Counter(no_test.splits.tolist()) == {"train": 5, "val": 5}
    np.testing.assert_array_equal(no_test.split_indices("val"), np.flatnonzero(no_test.splits == "val"))


def test_split_counts_give_exact_splits_and_match_the_fractions_that_round_to_them():
    world = generate_world(60, seed=3, split_counts=(20, 15, 25), world="shapes")
    assert collections.Counter(world.splits.tolist()) == {"train": 20, "val": 15, "test": 25}
    # 48 / 6 / 6 is what 0.8 / 0.1 / 0.1 of 60 rounds to: the same world, split for split.
    by_counts = generate_world(60, seed=3, split_counts=(48, 6, 6), world="shapes")
    np.testing.assert_array_equal(by_counts.splits, generate_world(60, seed=3, world="shapes").splits)
    # The scenes do not depend on how they are split.
    assert world.images.tobytes() == by_counts.images.tobytes()


@pytest.mark.parametrize("counts", [(20, 15), (20, 15, 24), (0, 30, 30), (30, -1, 31), (20.0, 20.0, 20.0)])
def test_bad_split_counts_are_refused(counts):
    with pytest.raises(ValueError, match="split_counts"):
        generate_world(60, seed=0, split_counts=counts, world="shapes")


def test_near_duplicate_rate_moves_how_many_scenes_are_derived():
    rates = [float((generate_world(300, seed=2, near_duplicate_rate=r, world="shapes").derived_from >= 0).mean())
             for r in (0.0, 0.35, 0.7)]
    assert rates[0] == 0.0 and rates[0] < rates[1] < rates[2]


def test_near_duplicates_make_captions_fit_other_images(world):
    relevance = world.relevance()
    own_image = np.repeat(np.arange(500), 5)
    relevance[own_image, np.arange(2500)] = 0.0
    share = (relevance == 1.0).any(axis=0).mean()
    print(f"share of captions with relevance 1.0 to another image (500 scenes, rate 0.35): {share:.3f}")
    assert share > 0.2
    derived = world.derived_from >= 0
    assert 0.25 < derived.mean() < 0.45
    assert (world.derived_from[derived] < np.flatnonzero(derived)).all()


def test_derived_scenes_differ_from_their_parent_by_one_change(world):
    for child in np.flatnonzero(world.derived_from >= 0):
        parent = world.derived_from[child]
        a = [tuple(o) for o in world.scene_facts[parent] if o[0] >= 0]
        b = [tuple(o) for o in world.scene_facts[child] if o[0] >= 0]
        if len(a) != len(b):  # one object added or removed, the others untouched and in order
            small, large = (a, b) if len(a) < len(b) else (b, a)
            assert len(large) == len(small) + 1
            assert any(large[:i] + large[i + 1 :] == small for i in range(len(large))), (parent, child)
            continue
        changed = [i for i in range(len(a)) if a[i] != b[i]]
        assert len(changed) == 1, (parent, child)
        old, new = np.array(a[changed[0]]), np.array(b[changed[0]])
        differing = set(np.flatnonzero(old != new).tolist())
        # colour, shape, size (extent re-drawn, centre kept), or a move (centre and maybe column / row)
        assert differing in ({0}, {1}, {2}) or (differing >= {5} or differing >= {6}) and differing <= {3, 4, 5, 6}


def test_columns_rows_and_stated_relations_match_the_geometry(world):
    facts = world.scene_facts
    present = facts[..., 0] >= 0
    np.testing.assert_array_equal(facts[..., 3][present], 3 * facts[..., 5][present] // 64)
    np.testing.assert_array_equal(facts[..., 4][present], 3 * facts[..., 6][present] // 64)
    gap = 64 / 8
    relation_rows = 0
    for n in range(200):
        objects = [o for o in facts[n] if o[0] >= 0]
        for row in world.caption_facts[n]:
            if row[10] < 0:
                continue
            relation_rows += 1
            m0, m1, rel = row[0:5], row[5:10], RELATIONS[row[10]]

            def fits(m, o):
                return all(m[i] == -1 or m[i] == o[i] for i in range(5))

            def holds(o1, o2):
                dx, dy = o2[5] - o1[5], o2[6] - o1[6]
                return {"left of": dx > gap, "right of": -dx > gap, "above": dy > gap, "below": -dy > gap}[rel]

            assert any(
                fits(m0, o1) and fits(m1, o2) and holds(o1, o2)
                for i, o1 in enumerate(objects)
                for j, o2 in enumerate(objects)
                if i != j
            ), (n, row)
    assert relation_rows > 50


def test_rendered_pixels_show_each_object_colour_at_its_center(world):
    present = world.scene_facts[..., 0] >= 0
    scene_index, _ = np.nonzero(present)
    objects = world.scene_facts[present]
    center_pixels = world.images[scene_index, objects[:, 6], objects[:, 5]].astype(np.float64)
    distances = np.linalg.norm(center_pixels[:, None, :] - COLOUR_RGB[None].astype(np.float64), axis=-1)
    np.testing.assert_array_equal(distances.argmin(axis=1), objects[:, 1])
    # And the background stays dim: image corners far from any object are dark.
    assert np.median(world.images[:, 0, 0].max(axis=-1)) < 70


def test_large_objects_cover_more_pixels_than_small_ones_of_the_same_shape(world):
    single = np.flatnonzero((world.scene_facts[:, :, 0] >= 0).sum(axis=1) == 1)
    area = (world.images[single].max(axis=-1) > 110).sum(axis=(1, 2))
    shape, size = world.scene_facts[single, 0, 0], world.scene_facts[single, 0, 2]
    for s in range(len(SHAPES)):
        small, large = area[(shape == s) & (size == 0)], area[(shape == s) & (size == 1)]
        assert small.size and large.size, SHAPES[s]
        assert small.max() < large.min(), (SHAPES[s], small.max(), large.min())
        assert small.min() > 20, SHAPES[s]


# Words a caption uses for each fact value (the generator's synonyms; multi-word synonyms by their key word).
SHAPE_TOKENS = {
    "circle": "circle", "disc": "circle", "round": "circle",
    "square": "square", "box": "square",
    "triangle": "triangle", "triangular": "triangle",
    "diamond": "diamond", "rhombus": "diamond",
    "cross": "cross", "plus": "cross",
}  # fmt: skip
COLOUR_TOKENS = {c: c for c in COLOURS} | {"violet": "purple"}
SIZE_TOKENS = {"small": "small", "little": "small", "tiny": "small", "large": "large", "big": "large"}
RELATION_WORDS = {
    "left of": ("left of",),
    "right of": ("right of",),
    "above": ("above", "over", "higher up than"),
    "below": ("below", "under", "beneath", "lower than"),
}


def test_caption_text_states_exactly_the_stored_facts(world):
    for n in range(500):
        assert len(set(map(bytes, world.caption_facts[n]))) == 5, n  # each caption states different facts
        for text, row in zip(world.captions[n], world.caption_facts[n]):
            assert text and text == text.strip() and "  " not in text and text.isascii(), text
            tokens = re.findall(r"[a-z]+", text.lower())
            mentions = [row[0:5]] + ([row[5:10]] if row[5] >= 0 else [])
            vocabularies = ((SHAPE_TOKENS, 0, SHAPES), (COLOUR_TOKENS, 1, COLOURS), (SIZE_TOKENS, 2, SIZES))
            for table, field, names in vocabularies:
                said = collections.Counter(table[t] for t in tokens if t in table)
                stated = collections.Counter(names[m[field]] for m in mentions if m[field] >= 0)
                assert said == stated, (text, row.tolist())
            lowered = " ".join(tokens)
            for rel, words in RELATION_WORDS.items():
                mentioned = any(re.search(rf"\b{w}\b", lowered) for w in words)
                assert mentioned == (row[10] >= 0 and RELATIONS[row[10]] == rel), (text, row.tolist())


def test_generate_world_rejects_bad_arguments():
    for kwargs, name in (
        ({"num_scenes": 0}, "num_scenes"),
        ({"seed": -1}, "seed"),
        ({"image_size": 16}, "image_size"),
        ({"captions_per_image": 0}, "captions_per_image"),
        ({"near_duplicate_rate": 1.5}, "near_duplicate_rate"),
        ({"split_fractions": (0.5, 0.2, 0.2)}, "split_fractions"),
        ({"num_scenes": 2, "split_fractions": (0.4, 0.3, 0.3)}, "num_scenes"),
    ):
        with pytest.raises(ValueError, match=name):
            generate_world(**({"num_scenes": 4, "world": "shapes"} | kwargs))


def test_progress_bar_and_rate_extremes(capsys):
    fresh = generate_world(30, seed=3, near_duplicate_rate=0.0, progress=True, world="shapes")
    assert (fresh.derived_from == -1).all()
    assert "synthetic world" in capsys.readouterr().err
    chained = generate_world(30, seed=3, near_duplicate_rate=1.0, world="shapes")
    assert (chained.derived_from[1:] >= 0).all() and chained.derived_from[0] == -1


# ---- the non-literal world (caption_style="complementary", kitm.data.synthetic.complementary) ----------------------

def test_complementary_world_shares_scenes_and_states_only_visible_facts():
    from kitm.data.synthetic.complementary import MATERIALS, TOPICS

    literal = generate_world(300, seed=5, world="shapes")
    world = generate_world(300, seed=5, caption_style="complementary", world="shapes")
    # the same scenes, pixels and splits; only the captions differ
    assert (world.images == literal.images).all() and (world.splits == literal.splits).all()
    assert (world.scene_facts == literal.scene_facts).all() and world.caption_style == "complementary"
    assert literal.topics is None and world.topics.shape == (300,) and world.topics.min() >= 0
    assert world.topics.max() < len(TOPICS) and len(set(world.topics.tolist())) == len(TOPICS)
    # each caption's facts are one mention, true of its own scene (relevance 1), as its words say
    relevance = world.relevance()
    own = relevance.reshape(300, 300, 5)[np.arange(300), np.arange(300)]
    np.testing.assert_array_equal(own, 1.0)
    named_topic, named_material = 0, 0
    for n in range(300):
        for text, row in zip(world.captions[n], world.caption_facts[n]):
            assert row[5:].tolist() == [-1] * 6 and row[0] >= 0, (text, row.tolist())
            tokens = re.findall(r"[a-z]+", text.lower())
            for table, field, names in ((SHAPE_TOKENS, 0, SHAPES), (COLOUR_TOKENS, 1, COLOURS),
                                        (SIZE_TOKENS, 2, SIZES)):
                said = collections.Counter(table[t] for t in tokens if t in table)
                stated = collections.Counter([names[row[field]]] if row[field] >= 0 else [])
                assert said == stated, (text, row.tolist())
            named_topic += any(phrase.lower() in text.lower() for phrase in TOPICS[world.topics[n]])
            named_material += any(material in tokens for material in MATERIALS)
    # most captions name the scene's story; about half a material; vaguer than literal captions
    assert 0.75 < named_topic / 1500 < 0.95 and 0.35 < named_material / 1500 < 0.65
    assert (world.caption_facts[..., 1] >= 0).mean() < 0.65 < (literal.caption_facts[..., 1] >= 0).mean()
    # the story is hinted by the image: scenes whose largest object has the same shape and colour share it often
    again = generate_world(300, seed=5, caption_style="complementary", world="shapes")
    assert again.captions == world.captions and (again.topics == world.topics).all()
    with pytest.raises(ValueError, match="caption_style"):
        generate_world(4, caption_style="poetic", world="shapes")


def test_complementary_captions_cluster_by_story_in_sentence_space():
    """What the text adds is in its words: captions of scenes with the same story are nearer in a sentence-embedding
    space (the offline MiniLM) than captions of other stories showing the same shape."""
    from kitm.relevance import sentence_embeddings

    world = generate_world(120, seed=2, caption_style="complementary", world="shapes")
    texts = [text for captions in world.captions for text in captions]
    topics = np.repeat(world.topics, 5)
    shapes = world.caption_facts[..., 0].reshape(-1)
    embeddings = sentence_embeddings(texts)
    similarity = embeddings @ embeddings.T
    off_diagonal = ~np.eye(len(texts), dtype=bool)
    same_story = (topics[:, None] == topics[None, :]) & off_diagonal
    same_shape_other_story = (shapes[:, None] == shapes[None, :]) & (topics[:, None] != topics[None, :])
    assert similarity[same_story].mean() > similarity[same_shape_other_story].mean() + 0.1

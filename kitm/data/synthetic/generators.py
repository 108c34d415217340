"""The synthetic worlds' generators behind one interface, by name: ``things`` (the default) and ``shapes``.

`kitm.data.synthetic.world.generate_world` draws every world the same way (scenes, near-duplicates, pixels,
captions, splits, each from its own random stream); what a scene is, how it is drawn and captioned is the world's
own, and this module adapts each world's modules to the same six calls. The names and the truth relevance of each
world are `kitm.relevance.world_truth`'s.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from kitm.relevance.world_truth import WORLDS


class Generator(NamedTuple):
    """One world's generator. ``fresh(rng, image_size)``, ``derive(rng, parent, image_size)`` (None when no change
    fits), ``facts(scene, image_size)`` (int32 [objects, fields]), ``render(scene, image_size, rng)`` (uint8
    pixels), ``captions(rng, scene, image_size, count)`` ((texts, facts)), ``complementary(caption_rng, story_rng,
    scene, image_size, count)`` ((texts, facts, story)); ``near_duplicate_rate``: the world's default."""

    fresh: Any
    derive: Any
    facts: Any
    render: Any
    captions: Any
    complementary: Any
    near_duplicate_rate: float


def _shapes() -> Generator:
    from kitm.data.synthetic import captions, complementary, rendering, scenes

    def story(caption_rng, story_rng, objects, image_size: int, count: int):
        topic = complementary.scene_topic(story_rng, objects)
        texts, facts = complementary.complementary_captions(caption_rng, objects, image_size, count, topic,
                                                            complementary.object_materials(story_rng, objects))
        return texts, facts, topic

    return Generator(scenes.fresh_scene, scenes.derive_scene, scenes.scene_fact_rows, rendering.render_scene,
                     captions.scene_captions, story, near_duplicate_rate=0.35)


def _things() -> Generator:
    from kitm.data.synthetic.things import captions, complementary, rendering, scenes

    def story(caption_rng, story_rng, scene, image_size: int, count: int):
        topic = complementary.scene_topic(story_rng, scene)
        texts, facts = complementary.complementary_captions(caption_rng, scene, count, topic)
        return texts, facts, topic

    return Generator(scenes.fresh_scene, scenes.derive_scene, lambda scene, image_size: scenes.scene_fact_rows(scene),
                     rendering.render_scene, captions.scene_captions, story,
                     near_duplicate_rate=scenes.NEAR_DUPLICATE_RATE)


_FACTORIES = {"things": _things, "shapes": _shapes}
assert set(_FACTORIES) == set(WORLDS)


def generator(world: str) -> Generator:
    """The generator of ``world`` (one of `kitm.relevance.world_truth.WORLDS`)."""
    if world not in _FACTORIES:
        raise ValueError(f"`world` must be one of {', '.join(WORLDS)}; got {world!r}.")
    return _FACTORIES[world]()


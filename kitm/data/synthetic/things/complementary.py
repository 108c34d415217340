"""Complementary captions of the things world: text that adds to the picture (the non-literal world, news-like).

The shapes world's complementary style (`kitm.data.synthetic.complementary`) carried over to everyday things: every
scene illustrates a story (one of ``TOPICS``, an event that is not drawn), hinted by the picture: with probability
``P_TOPIC_FROM_IMAGE`` the story of its setting and its largest object's category (a fixed map), otherwise uniform.
Most captions name the story; they mention one object vaguely (its noun, its colour about half the time) and say
what cannot be seen (a material, a mood). The facts row holds only what the pixels can check: the one mention.
"""

from __future__ import annotations

import numpy as np

from kitm.data.synthetic.complementary import TOPICS
from kitm.data.synthetic.caption_draws import distinct_captions
from kitm.data.synthetic.things.captions import finish
from kitm.data.synthetic.things.lexicon import THINGS
from kitm.data.synthetic.things.mentions import article, colour_word, entities, pick
from kitm.data.synthetic.things.scenes import ThingScene
from kitm.relevance.things_facts import CAPTION_FACT_WIDTH, CATEGORIES, CATEGORY_SUPER_INDEX, MENTION_WIDTH

P_TOPIC_FROM_IMAGE = 0.7
P_STATES_TOPIC = 0.85
_P_COLOUR = 0.5
# What cannot be seen: a material for things, a mood for the living (people and animals).
_MATERIALS = ("wooden", "metal", "plastic", "handmade", "borrowed", "brand new", "old", "second hand")
_MOODS = ("tired", "happy", "nervous", "proud", "sleepy", "excited", "patient", "curious")
_TEMPLATES = ("{m0} from {topic}", "{topic}: {m0}", "taken at {topic}, {m0}", "a souvenir of {topic}, {m0}",
              "{m0}, left over after {topic}", "remembering {topic} with {m0}", "what was left of {topic}: {m0}")
_PLAIN = ("{m0}, nothing else to say", "just {m0}", "someone kept {m0}", "{m0} we found")


def scene_topic(rng: np.random.Generator, scene: ThingScene) -> int:
    """The story of a scene: hinted by its setting and largest object (module docstring)."""
    if rng.random() < P_TOPIC_FROM_IMAGE:
        largest = max(scene.objects, key=lambda o: o.extent)
        return (scene.setting * len(CATEGORIES) + largest.category) % len(TOPICS)
    return int(rng.integers(len(TOPICS)))


def _unseen(rng: np.random.Generator, category: int) -> str:
    living = int(CATEGORY_SUPER_INDEX[category]) <= 1  # person or animal
    return pick(rng, _MOODS if living else _MATERIALS)


def _draw(rng: np.random.Generator, scene: ThingScene, topic: int) -> tuple[np.ndarray, str]:
    entity = pick(rng, entities(scene.objects))
    lead = entity.lead
    facts = np.full(CAPTION_FACT_WIDTH, -1, dtype=np.int32)
    mention = facts[1:1 + MENTION_WIDTH]
    mention[0] = entity.noun
    if rng.random() < _P_COLOUR:
        mention[2] = lead.colour
    thing = THINGS[lead.category]
    colour = colour_word(rng, thing, lead.colour) if mention[2] >= 0 else ""
    unseen = _unseen(rng, lead.category)
    if thing.worn:  # "a tired man in red"
        text = f"{article(unseen)} {unseen} {pick(rng, thing.nouns)}" + (f" in {colour}" if colour else "")
    else:  # "a wooden red chair"
        text = " ".join(w for w in (article(unseen), unseen, colour, pick(rng, thing.nouns)) if w)
    if rng.random() < P_STATES_TOPIC:
        return facts, pick(rng, _TEMPLATES).format(m0=text, topic=pick(rng, TOPICS[topic]))
    return facts, pick(rng, _PLAIN).format(m0=text)


def complementary_captions(rng: np.random.Generator, scene: ThingScene, count: int,
                           topic: int) -> tuple[list[str], np.ndarray]:
    """(``count`` texts, int32 [count, 12] facts): complementary captions of a scene with its story; the captions
    of one scene state different facts rows where a few redraws allow."""
    return distinct_captions(lambda: _draw(rng, scene, topic), lambda text: finish(rng, text), count)


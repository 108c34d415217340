"""Noun phrases of the things world: which objects a caption mentions, what it states of them, and the words.

A mention is drawn for an *entity*, the objects of one category in a scene (or, for a vague noun such as "people",
of one supercategory). It states the noun, and sometimes a count, a colour, a size or a pattern, each true of the
scene; ``Mention.facts`` is its row of `kitm.relevance.things_facts` (noun, count, colour, size, pattern). Salient
entities (large objects, groups) are mentioned most, as people describe a photograph's subject first.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

from kitm.data.synthetic.things.lexicon import (COLOUR_WORDS, COUNT_WORDS, PATTERN_ADJECTIVES, PATTERN_PHRASES,
                                                SEVERAL_BY_SUPERCATEGORY, SEVERAL_WORDS, SIZE_WORDS, THINGS,
                                                VAGUE_NOUNS)
from kitm.data.synthetic.things.scenes import ThingObject
from kitm.relevance.things_facts import (CATEGORIES, CATEGORY_SUPER_INDEX, COLOURS, COUNT_SEVERAL, MAX_OBJECTS,
                                         MENTION_WIDTH, PATTERNS, SIZES, SUPERCATEGORIES)

_P_VAGUE = {"person": 0.2, "animal": 0.06, "vehicle": 0.05, "food": 0.06, "furniture": 0.04}
_P_PLURAL = 0.8  # a group of two or more is mentioned as a group
_P_COUNT_EXACT, _P_COUNT_SEVERAL = 0.6, 0.2
_P_SINGLE_COUNTED = 0.04  # "a lone sheep", "one dog": count 1 stated
_P_COLOUR = 0.6
_P_FIXED_COLOUR = 0.15  # things of one colour ("a grey elephant") seldom get it said
_P_SIZE = 0.14
_P_PATTERN, _P_PLAIN = 0.65, 0.03
_P_EXTRA = 0.5
_P_THE = 0.04


def pick(rng: np.random.Generator, options: Sequence):
    """A uniform draw from ``options`` (repeated entries are weights)."""
    return options[int(rng.integers(len(options)))]


class Entity(NamedTuple):
    """Objects a mention can name together: one category's (``vague`` False) or one supercategory's."""

    noun: int  # the facts' noun: a category, or len(CATEGORIES) + supercategory
    members: tuple[ThingObject, ...]
    vague: bool

    @property
    def salience(self) -> float:
        largest = max(o.extent for o in self.members)
        return largest * largest * (1.0 + 0.3 * (len(self.members) - 1))

    @property
    def lead(self) -> ThingObject:
        """The member a caption looks at first (the largest)."""
        return max(self.members, key=lambda o: o.extent)


def entities(objects: Sequence[ThingObject]) -> list[Entity]:
    """The scene's category entities, largest first (ties in the scene's order)."""
    by_category: dict[int, list[ThingObject]] = {}
    for o in objects:
        by_category.setdefault(o.category, []).append(o)
    found = [Entity(c, tuple(members), False) for c, members in by_category.items()]
    return sorted(found, key=lambda e: -e.salience)


def vague_entity(rng: np.random.Generator, entity: Entity, objects: Sequence[ThingObject],
                 taken: Sequence[ThingObject] = ()) -> Entity:
    """Sometimes the entity named by its supercategory ("people", "an animal"), with every object of it; never
    when that would take in an object another mention of the caption names (``taken``)."""
    supercategory = SUPERCATEGORIES[int(CATEGORY_SUPER_INDEX[entity.noun])]
    if supercategory not in VAGUE_NOUNS or rng.random() >= _P_VAGUE[supercategory]:
        return entity
    members = tuple(o for o in objects if CATEGORY_SUPER_INDEX[o.category] == CATEGORY_SUPER_INDEX[entity.noun])
    if set(members) & set(taken):
        return entity
    return Entity(len(CATEGORIES) + SUPERCATEGORIES.index(supercategory), members, True)


def pick_entity(rng: np.random.Generator, candidates: Sequence[Entity], power: float) -> Entity:
    """An entity drawn with probability proportional to salience ** power."""
    weights = np.array([e.salience for e in candidates]) ** power
    return candidates[int(rng.choice(len(candidates), p=weights / weights.sum()))]


class Mention(NamedTuple):
    facts: np.ndarray  # int32 [MENTION_WIDTH]
    text: str
    plural: bool
    entity: Entity


def _shared(values: Sequence[int]) -> int:
    """The value all members share, or -1."""
    return values[0] if len(set(values)) == 1 else -1


def _choose_facts(rng: np.random.Generator, entity: Entity) -> np.ndarray:
    members = entity.members
    facts = np.full(MENTION_WIDTH, -1, dtype=np.int32)
    facts[0] = entity.noun
    plural = len(members) > 1 and rng.random() < _P_PLURAL
    if plural:
        draw = rng.random()
        if draw < _P_COUNT_EXACT:
            facts[1] = len(members)
        elif draw < _P_COUNT_EXACT + _P_COUNT_SEVERAL and len(members) >= 3:
            facts[1] = COUNT_SEVERAL
    elif len(members) == 1 and rng.random() < _P_SINGLE_COUNTED:
        facts[1] = 1
    described = members if plural else (entity.lead,)
    thing = THINGS[entity.lead.category]
    colour, pattern, size = (_shared([o.colour for o in described]), _shared([o.pattern for o in described]),
                             _shared([o.size for o in described]))
    one_colour = len(set(thing.colours)) == 1
    if colour >= 0 and not entity.vague and rng.random() < (_P_FIXED_COLOUR if one_colour else _P_COLOUR):
        facts[2] = colour
    if size >= 0 and rng.random() < _P_SIZE:
        facts[3] = size
    if pattern >= 0 and not entity.vague and len(thing.patterns) > 1:
        if rng.random() < (_P_PLAIN if PATTERNS[pattern] == "plain" else _P_PATTERN):
            facts[4] = pattern
    if plural and facts[1] < 0 and rng.random() < 0.5:
        facts[1] = -2  # plural without a count ("dogs", "some sheep"): marked here, cleared before it is a fact
    return facts


def colour_word(rng: np.random.Generator, thing, colour: int) -> str:
    name = COLOURS[colour]
    return pick(rng, thing.colour_words.get(name, COLOUR_WORDS[name]))


def article(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"


def _noun_words(rng: np.random.Generator, entity: Entity, plural: bool) -> str:
    if entity.vague:
        singular, many = pick(rng, VAGUE_NOUNS[SUPERCATEGORIES[entity.noun - len(CATEGORIES)]])
        return many if plural else singular
    thing = THINGS[entity.noun]
    noun = pick(rng, thing.nouns)
    return thing.plurals[noun] if plural else noun


def _determiner(rng: np.random.Generator, facts: np.ndarray, entity: Entity, first_word: str, plural: bool) -> str:
    count = int(facts[1])
    if count == COUNT_SEVERAL:
        supercategory = SUPERCATEGORIES[int(CATEGORY_SUPER_INDEX[entity.lead.category])]
        return pick(rng, SEVERAL_BY_SUPERCATEGORY.get(supercategory, SEVERAL_WORDS))
    if 1 <= count <= MAX_OBJECTS:
        return pick(rng, COUNT_WORDS[count])
    if plural:
        return pick(rng, ("", "", "", "some"))
    return "the" if rng.random() < _P_THE else article(first_word)


def _plural(noun: str) -> str:
    return noun + ("es" if noun.endswith(("s", "sh", "ch", "x")) else "s")


def _worn(rng: np.random.Generator, thing, facts: np.ndarray, plural: bool) -> str:
    """A person's colour and pattern, said of their clothes: "in a red shirt", "wearing a striped dress"."""
    colour = colour_word(rng, thing, int(facts[2])) if facts[2] >= 0 else ""
    pattern = pick(rng, PATTERN_ADJECTIVES[PATTERNS[int(facts[4])]]) if facts[4] >= 0 else ""
    if not colour and not pattern:
        return ""
    if colour and not pattern and rng.random() < 0.2:
        return f"in {colour}"
    clothes = pick(rng, thing.worn)
    garment = " ".join(w for w in (pattern, colour, _plural(clothes) if plural else clothes) if w)
    return f"{pick(rng, ('in', 'in', 'wearing'))} {'' if plural else article(garment)} {garment}".replace("  ", " ")


def mention_text(rng: np.random.Generator, facts: np.ndarray, entity: Entity, plural: bool) -> str:
    """The noun phrase stating exactly ``facts`` of ``entity`` ("two small striped umbrellas", "a man in red")."""
    thing = THINGS[entity.lead.category]
    noun = _noun_words(rng, entity, plural)
    size = ""
    if facts[3] >= 0:
        name = SIZES[int(facts[3])]
        size = pick(rng, SIZE_WORDS[name] if entity.vague else thing.size_words.get(name, SIZE_WORDS[name]))
    after = []
    if thing.worn and not entity.vague:
        colour, pattern = "", ""
        after.append(_worn(rng, thing, facts, plural))
    else:
        colour = colour_word(rng, thing, int(facts[2])) if facts[2] >= 0 else ""
        pattern = ""
        if facts[4] >= 0:
            phrases = PATTERN_PHRASES[PATTERNS[int(facts[4])]]
            if phrases and rng.random() < 0.3:
                after.append(pick(rng, phrases))
            else:
                pattern = pick(rng, PATTERN_ADJECTIVES[PATTERNS[int(facts[4])]])
    if entity.lead.extra and not entity.vague and not plural and rng.random() < _P_EXTRA:
        after.append(entity.lead.extra.replace("{its}", "its"))
    body = [w for w in (size, pattern, colour, noun) if w]
    determiner = _determiner(rng, facts, entity, body[0], plural)
    return " ".join(w for w in (determiner, *body, *after) if w)


def draw_mention(rng: np.random.Generator, entity: Entity) -> Mention:
    """The facts a caption states of ``entity`` and the words that state them."""
    facts = _choose_facts(rng, entity)
    plural = facts[1] >= 2 or facts[1] == -2
    facts[1] = max(int(facts[1]), -1)
    return Mention(facts, mention_text(rng, facts, entity, bool(plural)), bool(plural), entity)


_VAGUE_ACTIONS = ("standing", "waiting", "gathered", "resting", "seen", "visible")
_P_OWN_ACTION = 0.85


def action(rng: np.random.Generator, mention: Mention) -> str:
    """A participle phrase for the mention: mostly what its lead object is doing in this scene, sometimes another
    (decoration: the drawings do not show it)."""
    lead = mention.entity.lead
    if mention.entity.vague and lead.category >= 0 and THINGS[lead.category].worn == ():
        return pick(rng, _VAGUE_ACTIONS)
    phrase = lead.action if rng.random() < _P_OWN_ACTION else pick(rng, THINGS[lead.category].actions)
    return phrase.replace("{its}", "their" if mention.plural else "its")

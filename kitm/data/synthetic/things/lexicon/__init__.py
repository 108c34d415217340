"""The things world's words: what captions may say of objects, settings, colours, counts and relations.

One job per module: `thing` (the record of a category's words), `living` (people, animals, vehicles), `indoor` (food,
furniture, household things, outdoor gear), `phrases` (settings, colours, sizes, patterns, counts, relations, vague
nouns). ``THINGS`` lists the categories' records in the order of `kitm.relevance.things_facts.CATEGORIES`; importing
this package checks that every name a record uses is a fact name, so a typo fails at once, not in a caption.
"""

from __future__ import annotations

from kitm.data.synthetic.things.lexicon.indoor import FOOD_AND_HOUSEHOLD
from kitm.data.synthetic.things.lexicon.living import LIVING_AND_VEHICLES
from kitm.data.synthetic.things.lexicon.phrases import (COLOUR_WORDS, COUNT_WORDS, PATTERN_ADJECTIVES,
                                                        PATTERN_PHRASES, RELATION_PHRASES, SETTING_NAMES,
                                                        SETTING_PLACES, SETTING_TIMES, SEVERAL_BY_SUPERCATEGORY,
                                                        SEVERAL_WORDS,
                                                        SIZE_WORDS, VAGUE_NOUNS)
from kitm.data.synthetic.things.lexicon.thing import Thing
from kitm.relevance.things_facts import (CATEGORIES, COLOURS, PATTERNS, RELATIONS, SETTINGS, SIZES,
                                         SUPERCATEGORIES)

__all__ = ["THINGS", "Thing", "COLOUR_WORDS", "COUNT_WORDS", "PATTERN_ADJECTIVES", "PATTERN_PHRASES",
           "RELATION_PHRASES", "SETTING_NAMES", "SETTING_PLACES", "SETTING_TIMES", "SEVERAL_BY_SUPERCATEGORY",
           "SEVERAL_WORDS",
           "SIZE_WORDS", "VAGUE_NOUNS"]


def _checked(records: dict[str, Thing]) -> tuple[Thing, ...]:
    if sorted(records) != sorted(CATEGORIES):
        raise AssertionError(f"lexicon categories differ from the facts': {sorted(set(records) ^ set(CATEGORIES))}")
    for name, thing in records.items():
        unknown = ((set(thing.colours) | set(thing.colour_words)) - set(COLOURS)
                   | set(thing.settings) - set(SETTINGS) | set(thing.patterns) - set(PATTERNS)
                   | set(n for n in thing.nouns if n not in thing.plurals))
        if unknown:
            raise AssertionError(f"lexicon entry {name!r} names unknown colours, settings, patterns or nouns without "
                                 f"a plural: {sorted(unknown)}")
    return tuple(records[name] for name in CATEGORIES)


THINGS = _checked({**LIVING_AND_VEHICLES, **FOOD_AND_HOUSEHOLD})
assert set(SETTING_PLACES) == set(SETTING_NAMES) == set(SETTINGS)
assert set(COLOUR_WORDS) == set(COLOURS) and set(SIZE_WORDS) == set(SIZES)
assert set(PATTERN_ADJECTIVES) == set(PATTERN_PHRASES) == set(PATTERNS) and set(RELATION_PHRASES) == set(RELATIONS)
assert set(VAGUE_NOUNS) | set(SEVERAL_BY_SUPERCATEGORY) <= set(SUPERCATEGORIES)

"""The record of one category's words and habits (`kitm.data.synthetic.things.lexicon`)."""

from __future__ import annotations

from typing import NamedTuple


class Thing(NamedTuple):
    """A category's words and habits. ``colours``: the colours it comes in (fact names, weighted by repetition);
    ``colour_words``: words for a colour other than its name ("golden" for a yellow dog); ``worn``: a person's
    colour and pattern are their clothes' ("a man in a red shirt"), never an adjective of the noun; ``patterns``:
    the patterns it may have; ``settings``: where it appears (weighted); ``actions``: participle phrases (singular
    subject; ``{its}`` becomes "its" or "their"); ``actions_in``: more actions that fit one setting only ("stuck in
the sand" at the beach); ``extras``: phrases that may follow the noun."""

    nouns: tuple[str, ...]
    plurals: dict[str, str]
    colours: tuple[str, ...]
    settings: tuple[str, ...]
    actions: tuple[str, ...]
    patterns: tuple[str, ...] = ("plain",)
    colour_words: dict[str, tuple[str, ...]] = {}
    size_words: dict[str, tuple[str, ...]] = {}  # words for a size other than the usual ("tall" for a large man)
    extras: tuple[str, ...] = ()
    worn: tuple[str, ...] = ()
    actions_in: dict[str, tuple[str, ...]] = {}  # more actions, only in the setting named

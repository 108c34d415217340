"""Captions of the things world: sentences like people's, and the facts row each one states.

A caption mentions the salient part of a scene, not all of it: its subject (one entity, `mentions`), sometimes a
second entity, related ("a dog next to a bench") or not ("a dog and a man"), and often the setting ("on the beach").
Sentences take the shapes of crowd-sourced captions ("A brown dog running through the grass.", "Two men in red
shirts standing on a city street", "A sandy beach with a striped umbrella"): a noun phrase, an action, a place.
Actions, moods and extras are decoration (`kitm.data.synthetic.things.lexicon`); the facts row (setting, mention 0,
mention 1, relation: `kitm.relevance.things_facts`) holds exactly what the words assert of the picture, so the
world's truth relevance gives every caption 1.0 on its own image. Captions of one scene differ in their words and,
where a few redraws allow, in their facts.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from kitm.data.synthetic.caption_draws import distinct_captions, finish_text
from kitm.data.synthetic.things.lexicon import RELATION_PHRASES, SETTING_NAMES, SETTING_PLACES, SETTING_TIMES
from kitm.data.synthetic.things.mentions import (Mention, action, draw_mention, entities, pick, pick_entity,
                                                 vague_entity)
from kitm.data.synthetic.things.scenes import ThingScene, relations_between
from kitm.relevance.things_facts import CAPTION_FACT_WIDTH, MENTION_WIDTH, RELATIONS, SETTINGS

_P_KIND = {"single": 0.52, "relation": 0.22, "pair": 0.14, "setting_first": 0.12}
_P_SETTING = {"single": 0.8, "relation": 0.45, "pair": 0.6, "setting_first": 1.0}
_RELATION_WEIGHTS = np.array([1.0, 1.0, 0.4, 0.4, 2.0])

# Sentence shapes; {np0} and {np1} are noun phrases, {act0} an action, {be0} "is" / "are", {place} the setting.
_SINGLE = ("{np0} {act0} {place}", "{np0} {act0} {place}", "{np0} {act0} {place}", "{np0} {be0} {act0} {place}",
           "{np0} {be0} {act0} {place}", "{np0} {act0}", "{np0} {be0} {act0}", "{np0} {place}",
           "{place}, {np0} {be0} {act0}", "{np0} {be0} {place}", "{np0} {act0} {place} {time}")
_SINGLE_NO_PLACE = ("{np0} {act0}", "{np0} {be0} {act0}", "{np0} {act0}", "a close up of {np0} {act0}",
                    "{np0} {be0} {act0} in this picture")
_RELATION = ("{np0} {act0} {rel} {np1} {place}", "{np0} {act0} {rel} {np1}", "{np0} {rel} {np1} {place}",
             "{np0} {be0} {act0} {rel} {np1}", "{np0} {be0} {rel} {np1} {place}", "{np0} {rel} {np1}",
             "{np1} with {np0} {act0} {rel} {it1}")
_PAIR = ("{np0} and {np1} {place}", "{np0} {act0} and {np1} {act1} {place}", "{np0} {act0} with {np1} {place}",
         "{np0} and {np1} {be-pl} {place}", "{np0} and {np1}", "{np0} {act0} while {np1} {be1} {act1}")
_SETTING_FIRST = ("{setting} with {np0}", "{setting} with {np0} {act0}", "{setting} with {np0} and {np1}",
                  "a view of {setting} with {np0}", "{setting} where {np0} {be0} {act0}")


def _kind(rng: np.random.Generator, num_entities: int) -> str:
    kinds = list(_P_KIND) if num_entities > 1 else ["single", "setting_first"]
    weights = np.array([_P_KIND[k] for k in kinds])
    return kinds[int(rng.choice(len(kinds), p=weights / weights.sum()))]


def _relation(rng: np.random.Generator, first: Mention, second: Mention, image_size: int) -> int:
    """A relation that holds between the two mentions' lead objects, or -1 when none does."""
    holding = relations_between(first.entity.lead, second.entity.lead, image_size)
    if not holding:
        return -1
    weights = _RELATION_WEIGHTS[holding]
    return holding[int(rng.choice(len(holding), p=weights / weights.sum()))]


def _fill(rng: np.random.Generator, template: str, setting: int, mentions: Sequence[Mention], relation: int) -> str:
    values = {"place": pick(rng, SETTING_PLACES[SETTINGS[setting]]) if setting >= 0 else "",
              "setting": pick(rng, SETTING_NAMES[SETTINGS[setting]]) if setting >= 0 else "",
              "time": pick(rng, SETTING_TIMES[SETTINGS[setting]]) if setting >= 0 else "",
              "rel": pick(rng, RELATION_PHRASES[RELATIONS[relation]]) if relation >= 0 else "", "be-pl": "are"}
    for i, mention in enumerate(mentions):
        values[f"np{i}"] = mention.text
        values[f"act{i}"] = action(rng, mention)
        # "a bottle with a cork in it", never "a bottle is with a cork in it"
        values[f"be{i}"] = "" if values[f"act{i}"].startswith("with ") else ("are" if mention.plural else "is")
        values[f"it{i}"] = "them" if mention.plural else "it"
    return template.format(**values)


def _draw_caption(rng: np.random.Generator, scene: ThingScene, image_size: int) -> tuple[np.ndarray, str]:
    """One (facts row, text) true of ``scene``."""
    found = entities(scene.objects)
    kind = _kind(rng, len(found))
    first = vague_entity(rng, pick_entity(rng, found, 3.0), scene.objects)
    chosen = [draw_mention(rng, first)]
    others = [e for e in found if not set(e.members) & set(first.members)]
    wants_second = kind in ("relation", "pair") or (kind == "setting_first" and rng.random() < 0.35)
    if wants_second and others:
        second = vague_entity(rng, pick_entity(rng, others, 1.0), scene.objects, taken=first.members)
        chosen.append(draw_mention(rng, second))
    relation = _relation(rng, chosen[0], chosen[1], image_size) if kind == "relation" and len(chosen) > 1 else -1
    if len(chosen) == 1 and kind in ("relation", "pair"):
        kind = "single"
    if kind == "relation" and relation < 0:
        kind = "pair"
    setting = scene.setting if rng.random() < _P_SETTING[kind] else -1
    if kind == "single":
        templates = _SINGLE if setting >= 0 else _SINGLE_NO_PLACE
    elif kind == "setting_first":
        templates = tuple(t for t in _SETTING_FIRST if ("{np1}" in t) == (len(chosen) > 1))
    else:
        templates = _RELATION if kind == "relation" else _PAIR
        if setting < 0:
            templates = tuple(t for t in templates if "{place}" not in t)
    template = pick(rng, templates)
    text = _fill(rng, template, setting, chosen, relation)
    facts = np.full(CAPTION_FACT_WIDTH, -1, dtype=np.int32)
    facts[0] = setting if "{place}" in template or "{setting}" in template else -1
    for i, mention in enumerate(chosen):
        facts[1 + i * MENTION_WIDTH:1 + (i + 1) * MENTION_WIDTH] = mention.facts
    facts[-1] = relation
    return facts, " ".join(text.split())


def finish(rng: np.random.Generator, text: str) -> str:
    """Crowd-sourced captions mostly start with a capital, and end with a full stop or nothing."""
    return finish_text(rng, text, p_capital=0.9, p_full_stop=0.45)


def scene_captions(rng: np.random.Generator, scene: ThingScene, image_size: int, count: int):
    """(``count`` texts, int32 [count, 12] facts) true of ``scene``, stating different facts where they can."""
    return distinct_captions(lambda: _draw_caption(rng, scene, image_size), lambda text: finish(rng, text), count)

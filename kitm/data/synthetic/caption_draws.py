"""How every synthetic world turns one caption drawer into a scene's captions (both worlds, both caption styles).

A scene's captions should state different facts, as five annotators describe different parts of one photograph:
``distinct_captions`` redraws a caption whose facts row repeats an earlier one's, a bounded number of times (a scene
with little to say may repeat). ``finish_text`` gives a caption the case and final punctuation crowd-sourced captions
vary in (kitm's text pipelines must not care). Every draw comes from the generator the drawer and `finish` use, in
a fixed order, so a world stays byte-identical for a seed.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

CAPTION_TRIES = 40


def finish_text(rng: np.random.Generator, text: str, p_capital: float, p_full_stop: float) -> str:
    """``text`` with a capital first letter with probability ``p_capital`` and a full stop with ``p_full_stop``."""
    if rng.random() < p_capital:
        text = text[0].upper() + text[1:]
    if rng.random() < p_full_stop:
        text += "."
    return text


def distinct_captions(draw: Callable[[], tuple[np.ndarray, str]], finish: Callable[[str], str], count: int,
                      tries: int = CAPTION_TRIES) -> tuple[list[str], np.ndarray]:
    """(``count`` texts, int32 [count, width] facts) from ``draw() -> (facts, text)``, each redrawn up to ``tries``
    times while its facts row repeats an earlier caption's, each text then through ``finish``."""
    texts: list[str] = []
    rows: list[np.ndarray] = []
    seen: set[bytes] = set()
    for _ in range(count):
        for _ in range(tries):
            facts, text = draw()
            if facts.tobytes() not in seen:
                break
        seen.add(facts.tobytes())
        rows.append(facts)
        texts.append(finish(text))
    return texts, np.stack(rows)

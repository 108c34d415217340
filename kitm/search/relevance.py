"""Graded relevance of search results, where the index knows it: what binary labels miss.

A dataset labels each image with its own few captions and calls every other pairing wrong, yet a query often fits
many images fully or in part. The search page shows, beside each result's rank and score, how relevant it really is:

* the synthetic world's **truth**: when the typed query is one of the world's captions (compared in lower case with
  spaces collapsed and a final full stop dropped), or the dropped image is one of the indexed images, the exact
  relevance of that caption to each image (``kitm.relevance.truth``): 1 when the image has everything the caption
  states;
* **CIDEr-D** for other data with captions, and for a typed query that is none of the world's captions: the query
  scored against each result image's captions, with the document frequencies of all the index's captions, the
  measure behind kitm's ``cider`` relevance rows (``kitm.relevance.cider_matrix``; lower case, whitespace tokens, as
  the NCS reference);
* nothing for a folder of photos without captions, or an uploaded image the index does not hold.

Each result also says whether it is the annotated pair (the image the matched caption was written for, or one of
the dropped image's own captions): the one result binary labels would count.
"""

from __future__ import annotations

import dataclasses

import numpy as np


def normalized(text: str) -> str:
    """How queries and captions are compared: lower case, whitespace collapsed, a final full stop dropped."""
    return " ".join(text.lower().split()).rstrip(".").strip()


@dataclasses.dataclass
class Graded:
    """Relevance of each result (None: unknown), its source, and which results are the annotated pair."""

    values: list[float | None]
    source: str | None
    annotated: list[bool | None]
    note: str


def _truth(index, scene_facts, caption_facts) -> np.ndarray:
    from kitm.eval.relevance_sources import truth_relevance_matrix

    return truth_relevance_matrix(scene_facts, caption_facts, image_size=index.image_size, world=index.world)


def _cider(hypotheses: list[str], groups: list[list[str]], document_frequency) -> np.ndarray:
    from kitm.relevance import cider_matrix

    return cider_matrix([h.lower() for h in hypotheses], [[c.lower() for c in group] for group in groups],
                        document_frequency=document_frequency, normalize=False)


def caption_groups(index, positions) -> list[list[str]]:
    return [[index.captions[row]["text"] for row in index.captions_of(int(p))] for p in positions]


def text_query_relevance(index, query: str, matched_row: int | None, positions: np.ndarray) -> Graded:
    """Relevance of the typed `query` (index caption `matched_row`, or None) to the images at `positions`."""
    n = len(positions)
    if not index.captions:
        return Graded([None] * n, None, [None] * n, "This index holds no captions: no graded relevance to show.")
    annotated = ([bool(index.captions[matched_row]["image"] == p) for p in positions] if matched_row is not None
                 else [None] * n)
    if index.scene_facts is not None and matched_row is not None:
        values = _truth(index, index.scene_facts[positions], index.caption_facts[[matched_row]])[0]
        return Graded([float(v) for v in values], "truth", annotated,
                      "Relevance: the synthetic world's exact relevance of the caption to each image (1: the image "
                      "shows everything the caption states).")
    values = _cider([query], caption_groups(index, positions), index.document_frequency)[0]
    instead = (" The query is none of the synthetic world's captions, whose exact relevance is known: type one of "
               "them (click an image to see its captions) to see the truth." if index.scene_facts is not None else "")
    return Graded([float(v) for v in values], "cider", annotated,
                  "Relevance: CIDEr-D of the query against each image's captions (0: no shared words; about 10: "
                  "the same words as the captions)." + instead)


def image_query_relevance(index, position: int | None, rows: np.ndarray) -> Graded:
    """Relevance of the captions at `rows` to indexed image `position` (None: an image the index lacks)."""
    n = len(rows)
    if position is None:
        return Graded([None] * n, None, [None] * n,
                      "This image is not in the index: its relevance to the captions is unknown.")
    annotated = [bool(index.captions[int(row)]["image"] == position) for row in rows]
    if index.scene_facts is not None:
        values = _truth(index, index.scene_facts[[position]], index.caption_facts[rows])[:, 0]
        return Graded([float(v) for v in values], "truth", annotated,
                      "Relevance: the synthetic world's exact relevance of each caption to the image.")
    values = _cider([index.captions[int(row)]["text"] for row in rows], caption_groups(index, [position]),
                    index.document_frequency)[:, 0]
    return Graded([float(v) for v in values], "cider", annotated,
                  "Relevance: CIDEr-D of each caption against the image's own captions.")

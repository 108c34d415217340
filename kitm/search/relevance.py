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


_TRUTH_TEXT_NOTE = ("Relevance: the synthetic world's exact relevance of the caption to each image (1: the image "
                    "shows everything the caption states).")
_CIDER_TEXT_NOTE = ("Relevance: CIDEr-D of the query against each image's captions (0: no shared words; about 10: "
                    "the same words as the captions).")
_NOT_A_WORLD_CAPTION = (" The query is none of the synthetic world's captions, whose exact relevance is known: type "
                        "one of them (click an image to see its captions) to see the truth.")


def _columns(positions_list: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
    """(the distinct positions of all the lists, each list's columns among them)."""
    union, inverse = np.unique(np.concatenate([np.asarray(p, np.int64) for p in positions_list]), return_inverse=True)
    ends = np.cumsum([len(p) for p in positions_list])
    return union, np.split(inverse, ends[:-1])


def text_query_relevance(index, query: str, matched_row: int | None, positions: np.ndarray) -> Graded:
    """Relevance of the typed `query` (index caption `matched_row`, or None) to the images at `positions`."""
    return text_queries_relevance(index, [query], [matched_row], [positions])[0]


def text_queries_relevance(index, queries: list[str], matched_rows: list[int | None],
                           positions_list: list[np.ndarray]) -> list[Graded]:
    """`text_query_relevance` of several queries at once: one truth matrix for the queries that are world captions,
    one CIDEr-D matrix for the others, over the distinct images of all their results (the matrices' fixed costs,
    n-gram tables and sparse products, are paid once for a batch instead of once a query)."""
    graded: list = [None] * len(queries)
    if not index.captions:
        return [Graded([None] * len(p), None, [None] * len(p), "This index holds no captions: no graded relevance "
                       "to show.") for p in positions_list]
    truth = [i for i, row in enumerate(matched_rows) if row is not None and index.scene_facts is not None]
    free = sorted(set(range(len(queries))) - set(truth))
    if truth:
        union, columns = _columns([positions_list[i] for i in truth])
        matrix = _truth(index, index.scene_facts[union], index.caption_facts[[matched_rows[i] for i in truth]])
        for at, i in enumerate(truth):
            graded[i] = ([float(v) for v in matrix[at, columns[at]]], "truth", _TRUTH_TEXT_NOTE)
    if free:
        union, columns = _columns([positions_list[i] for i in free])
        matrix = _cider([queries[i] for i in free], caption_groups(index, union), index.document_frequency)
        note = _CIDER_TEXT_NOTE + (_NOT_A_WORLD_CAPTION if index.scene_facts is not None else "")
        for at, i in enumerate(free):
            graded[i] = ([float(v) for v in matrix[at, columns[at]]], "cider", note)
    answers = []
    for i, (values, source, note) in enumerate(graded):
        row, positions = matched_rows[i], positions_list[i]
        annotated = ([bool(index.captions[row]["image"] == p) for p in positions] if row is not None
                     else [None] * len(positions))
        answers.append(Graded(values, source, annotated, note))
    return answers


def image_query_relevance(index, position: int | None, rows: np.ndarray) -> Graded:
    """Relevance of the captions at `rows` to indexed image `position` (None: an image the index lacks)."""
    return image_queries_relevance(index, [position], [rows])[0]


def image_queries_relevance(index, positions: list[int | None], rows_list: list[np.ndarray]) -> list[Graded]:
    """`image_query_relevance` of several images at once (one truth or CIDEr-D matrix for the indexed ones)."""
    answers: list = [Graded([None] * len(rows), None, [None] * len(rows),
                            "This image is not in the index: its relevance to the captions is unknown.")
                     for rows in rows_list]
    known = [i for i, position in enumerate(positions) if position is not None]
    if not known:
        return answers
    union, columns = _columns([rows_list[i] for i in known])  # caption rows
    images = [positions[i] for i in known]
    if index.scene_facts is not None:
        matrix = _truth(index, index.scene_facts[images], index.caption_facts[union]).T  # [images, captions]
        source, note = "truth", "Relevance: the synthetic world's exact relevance of each caption to the image."
    else:
        matrix = _cider([index.captions[int(row)]["text"] for row in union], caption_groups(index, images),
                        index.document_frequency).T
        source, note = "cider", "Relevance: CIDEr-D of each caption against the image's own captions."
    for at, i in enumerate(known):
        rows = rows_list[i]
        annotated = [bool(index.captions[int(row)]["image"] == positions[i]) for row in rows]
        answers[i] = Graded([float(v) for v in matrix[at, columns[at]]], source, annotated, note)
    return answers

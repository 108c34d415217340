"""The relevance column's sources: the synthetic world's truth for its own captions, CIDEr-D for other captions, none
without captions; and which result is the annotated pair."""

import types

import numpy as np
import pytest

from kitm.relevance import DocumentFrequency
from kitm.search.relevance import image_query_relevance, normalized, text_query_relevance

CAPTIONS = [["a dog runs on the grass", "a brown dog running"], ["a cat sleeps on the sofa", "a cat on a couch"],
            ["a dog sleeps on the sofa", "a sleepy dog on a couch"]]


def _index(with_captions=True):
    flat = [{"text": text, "image": i} for i, group in enumerate(CAPTIONS) for text in group]
    return types.SimpleNamespace(
        captions=flat if with_captions else None, scene_facts=None,
        document_frequency=DocumentFrequency.from_reference_groups(CAPTIONS, normalize=False),
        captions_of=lambda p: [2 * p, 2 * p + 1])


def test_a_typed_query_is_graded_by_cider_against_each_images_captions():
    index = _index()
    graded = text_query_relevance(index, "a dog sleeps on the sofa", 4, np.array([2, 1, 0]))
    assert graded.source == "cider" and graded.annotated == [True, False, False]
    assert graded.values[0] > graded.values[1] > 0 and graded.values[0] > graded.values[2] > 0
    free = text_query_relevance(index, "an airplane", None, np.array([0, 1]))
    assert free.values == [0.0, 0.0] and free.annotated == [None, None]


def test_an_indexed_image_grades_the_captions_found_and_an_unknown_one_does_not():
    index = _index()
    graded = image_query_relevance(index, 2, np.array([4, 2, 0]))
    assert graded.source == "cider" and graded.annotated == [True, False, False]
    assert graded.values[0] == max(graded.values)
    unknown = image_query_relevance(index, None, np.array([4, 2]))
    assert unknown.values == [None, None] and "not in the index" in unknown.note


def test_without_captions_there_is_no_relevance():
    graded = text_query_relevance(_index(with_captions=False), "a dog", None, np.array([0, 1]))
    assert graded.values == [None, None] and graded.source is None


@pytest.mark.parametrize("text", ["A dog  runs on the grass.", " a DOG runs on the grass "])
def test_queries_match_captions_in_lower_case_without_the_full_stop(text):
    assert normalized(text) == "a dog runs on the grass"

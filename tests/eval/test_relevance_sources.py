"""The evaluation's CIDEr-D relevance (kitm.eval.relevance_sources) against the NCS reference's rule.

The rule, read in furkanbiten/ncs_metric (custom_cider.py, the script whose matrices NCS reads): its ``__main__``
loads each image's captions as ``[c.lower() for c in cap['refs']]``, adds every image as one item of a
``CiderScorer`` (so the documents of the idf are the images' caption groups, D = number of images), and
``compute_fast`` scores every caption (rows, image-major) against every group (columns); ``precook`` tokenizes
with ``s.split()``. No PTB tokenizer, no punctuation removal. ``reference_rule_oracle`` below is a per-pair
transcription of that (dicts and math, no kitm code), CIDEr-D as in docs/methods.md.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from kitm.eval.relevance_sources import CIDER_NORMALIZATIONS, caption_relevance, cider_relevance
from kitm.relevance.text_normalization import ptb_normalize

# Three captions per image. Capitals, final periods, commas, an apostrophe and a tab: PTB normalisation changes
# every one of these ("A dog." -> "a dog"), the reference's handling only lower-cases them.
CAPTIONS = [
    "A dog.", "a dog", "A brown dog runs on the grass.",
    "A dog's ball, red and round.", "a dog s ball red and round", "The ball\tis RED.",
    "Two men ride bikes, fast.", "two men ride bikes fast", "Men on bikes.",
    "A cat sleeps.", "a cat sleeps on the sofa", "The CAT, asleep.",
]
CPI = 3


def reference_rule_oracle(captions: list[str], captions_per_image: int, n: int = 4,
                          sigma: float = 6.0) -> np.ndarray:
    """N[c, i]: CIDEr-D of caption c against image i's captions, the NCS reference's way, pair by pair."""
    captions = [caption.lower() for caption in captions]
    groups = [captions[i:i + captions_per_image] for i in range(0, len(captions), captions_per_image)]

    def grams(caption: str) -> Counter:
        words = caption.split()
        return Counter(tuple(words[i:i + k]) for k in range(1, n + 1) for i in range(len(words) - k + 1))

    frequency = Counter(g for group in groups for g in set().union(*(grams(c) for c in group)))
    log_d = math.log(len(groups))

    def vector(caption: str):
        vec = [{} for _ in range(n)]
        for gram, tf in grams(caption).items():
            vec[len(gram) - 1][gram] = tf * (log_d - math.log(max(1.0, frequency[gram])))
        norms = [math.sqrt(sum(v * v for v in order.values())) for order in vec]
        bigrams = sum(tf for gram, tf in grams(caption).items() if len(gram) == 2)
        return vec, norms, bigrams

    result = np.zeros((len(captions), len(groups)))
    for c, caption in enumerate(captions):
        vh, nh, lh = vector(caption)
        for i, group in enumerate(groups):
            per_order = np.zeros(n)
            for reference in group:
                vr, nr, lr = vector(reference)
                for k in range(n):
                    value = sum(min(x, vr[k].get(g, 0.0)) * vr[k].get(g, 0.0) for g, x in vh[k].items())
                    if nh[k] and nr[k]:
                        value /= nh[k] * nr[k]
                    per_order[k] += value * math.exp(-((lh - lr) ** 2) / (2 * sigma ** 2))
            result[c, i] = 10.0 * per_order.mean() / len(group)
    return result


def test_default_is_the_ncs_references_rule() -> None:
    expected = reference_rule_oracle(CAPTIONS, CPI)
    actual = cider_relevance(CAPTIONS, CPI)
    assert actual.shape == (12, 4) and actual.dtype == np.float64
    np.testing.assert_allclose(actual, expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(caption_relevance("cider", CAPTIONS, CPI), actual)
    np.testing.assert_array_equal(cider_relevance(CAPTIONS, CPI, cider_normalization="ncs"), actual)
    # "A dog." and "a dog" are different token strings here ("dog." is not "dog"): not a perfect match.
    assert 0 < expected[0, 0] < 10


def test_ptb_option_normalises_punctuation_and_differs_on_these_captions() -> None:
    ncs = cider_relevance(CAPTIONS, CPI)
    ptb = caption_relevance("cider", CAPTIONS, CPI, cider_normalization="ptb")
    # The PTB option is the same rule on PTB-normalised captions ("A dog." -> "a dog").
    np.testing.assert_allclose(ptb, reference_rule_oracle([ptb_normalize(c) for c in CAPTIONS], CPI),
                               rtol=1e-12, atol=1e-12)
    assert not np.allclose(ptb, ncs, rtol=1e-3)
    assert np.abs(ptb - ncs).max() > 0.5


def test_unknown_normalization_is_refused() -> None:
    assert CIDER_NORMALIZATIONS == ("ncs", "ptb")
    with pytest.raises(ValueError, match="cider_normalization"):
        caption_relevance("cider", CAPTIONS, CPI, cider_normalization="java")

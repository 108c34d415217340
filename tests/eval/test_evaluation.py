"""Bad input to kitm.eval.evaluate and the standalone metrics raises clear ValueErrors."""

from __future__ import annotations

import numpy as np
import pytest

import kitm.eval as keval

SIMS = np.random.default_rng(0).standard_normal((6, 30))
RELEVANCE = np.random.default_rng(1).random((30, 6))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_sims(bad):
    sims = SIMS.copy()
    sims[2, 7] = bad
    with pytest.raises(ValueError, match=r"`sims` must be finite; found .* at \[2, 7\]"):
        keval.evaluate(sims)


def test_non_finite_relevance():
    relevance = RELEVANCE.copy()
    relevance[0, 0] = np.nan
    with pytest.raises(ValueError, match="`relevance` must be finite"):
        keval.evaluate(SIMS, relevance=relevance, ks=(1,))


def test_captions_not_divisible():
    with pytest.raises(ValueError, match="30 columns .* not divisible by captions_per_image=4"):
        keval.evaluate(SIMS, captions_per_image=4)


def test_sims_layout_mismatch():
    with pytest.raises(ValueError, match=r"expected \[num_images, num_images \* 3\] = \[6, 18\]"):
        keval.evaluate(SIMS, captions_per_image=3)
    with pytest.raises(ValueError, match="2-D"):
        keval.evaluate(SIMS[0])
    with pytest.raises(ValueError, match="empty"):
        keval.evaluate(np.zeros((0, 0)))
    with pytest.raises(ValueError, match="numeric"):
        keval.evaluate(np.array([["a"]]))


def test_transposed_relevance_is_named():
    with pytest.raises(ValueError, match=r"\[num_images, num_captions\].*pass relevance\.T"):
        keval.evaluate(SIMS, relevance=RELEVANCE.T, ks=(1,))


def test_relevance_wrong_shape():
    with pytest.raises(ValueError, match=r"expected \[num_captions, num_images\] = \(30, 6\)"):
        keval.evaluate(SIMS, relevance=np.zeros((30, 5)), ks=(1,))


def test_cutoffs_larger_than_candidates():
    with pytest.raises(ValueError, match=r"`ks` holds \[7\], larger than the 6 candidates a t2i query ranks"):
        keval.evaluate(SIMS, ks=(1, 7))
    # With the ground truth removed a t2i query ranks only 5 images.
    with pytest.raises(ValueError, match="5 candidates a t2i query ranks once its ground truth is removed"):
        keval.evaluate(SIMS, relevance=RELEVANCE, ks=(6,))
    assert keval.evaluate(SIMS, relevance=RELEVANCE, ks=(6,), include_gt=True)["t2i"]["ncs"][6] > 0
    with pytest.raises(ValueError, match="larger than the 30 candidates"):
        keval.recall_at_k(SIMS, (31,))


@pytest.mark.parametrize("ks", [(), (0,), (1, 1), (1.5,), ("5",), (True,)])
def test_bad_cutoffs(ks):
    with pytest.raises(ValueError, match="ks"):
        keval.evaluate(SIMS, ks=ks)


def test_bad_scalars():
    with pytest.raises(ValueError, match="captions_per_image"):
        keval.evaluate(SIMS, captions_per_image=0, ks=(1,))
    with pytest.raises(ValueError, match="semantic_threshold"):
        keval.evaluate(SIMS, relevance=RELEVANCE, semantic_threshold=6, ks=(1,))
    with pytest.raises(ValueError, match="semantic_depth"):
        keval.evaluate(SIMS, relevance=RELEVANCE, semantic_depth=7, ks=(1,))
    with pytest.raises(ValueError, match="chunk_size"):
        keval.evaluate(SIMS, chunk_size=0, ks=(1,))
    with pytest.raises(ValueError, match="direction"):
        keval.recall_at_k(SIMS, direction="both")

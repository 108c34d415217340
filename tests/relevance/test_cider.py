"""Tests of kitm.relevance.cider against pycocoevalcap's CiderScorer and the docs/methods.md equation.

Oracle path (pycocoevalcap). ``CiderScorer`` scores *items* (one hypothesis with its own list of
references) and takes its document frequencies from the references of all the items it holds,
with D = the number of items. So to score hypothesis h against every group with the groups as
documents, one fresh scorer gets one item per group, ``(h, group_j)``: its df and D are then
exactly the groups' (one document per group), and ``compute_score()`` returns CIDEr-D(h, G_j) for
every j. One scorer per hypothesis gives the whole matrix (``pycoco_matrix``).

With a given document frequency (``pycoco_matrix_with_df``): the scorer's items are the groups,
padded with dummy ("", [""]) items until there are D of them so that its ``ref_len = log(D)``
matches; its ``document_frequency`` is replaced by the given counts, and ``compute_cider()`` (the
scoring half of ``compute_score``, which skips counting df) is called directly. The dummy items'
scores are ignored. Everything else is pycocoevalcap's own code.

Both oracles see captions normalised by ``ptb_normalize``; normalisation itself is tested against
the Java tokenizer in test_text_normalization.py.

A third oracle, ``equation_oracle``, is a literal per-pair transcription of docs/methods.md (dicts and
math, no kitm code) used where pycocoevalcap cannot go: n != 4 (its ``precook`` always counts up to
4-grams and then indexes out of range) and other sigmas.
"""

from __future__ import annotations

import math
import os
import random
from collections import Counter, defaultdict

import numpy as np
import pytest
from pycocoevalcap.cider.cider_scorer import CiderScorer, cook_refs, precook

from kitm.relevance import cider as cider_module
from kitm.relevance.cider import DocumentFrequency, cider_matrix, ngram_counts
from kitm.relevance.text_normalization import ptb_normalize

FLICKR_TOKENS = "/work/shared/data/flickr8k/Flickr8k.token.txt"


def _load_flickr() -> dict[str, list[str]]:
    captions: dict[str, list[str]] = {}
    with open(FLICKR_TOKENS, encoding="utf-8") as stream:
        for line in stream:
            key, caption = line.rstrip("\n").split("\t")
            captions.setdefault(key.split("#")[0], []).append(caption)
    return captions


FLICKR = _load_flickr()
KEYS = sorted(FLICKR)


def pycoco_matrix(hypotheses: list[str], groups: list[list[str]]) -> np.ndarray:
    """pycocoevalcap CIDEr-D of each hypothesis against each group, groups as the documents."""
    hypotheses = [ptb_normalize(h) for h in hypotheses]
    groups = [[ptb_normalize(c) for c in g] for g in groups]
    result = np.zeros((len(hypotheses), len(groups)))
    for i, hypothesis in enumerate(hypotheses):
        scorer = CiderScorer(n=4, sigma=6.0)
        for group in groups:
            scorer += (hypothesis, group)
        _, scores = scorer.compute_score()
        result[i] = scores
    return result


def pycoco_matrix_with_df(hypotheses: list[str], groups: list[list[str]],
                          frequency: DocumentFrequency) -> np.ndarray:
    """pycocoevalcap CIDEr-D with the document frequencies and D of ``frequency`` injected."""
    assert frequency.num_documents >= len(groups)
    hypotheses = [ptb_normalize(h) for h in hypotheses]
    groups = [[ptb_normalize(c) for c in g] for g in groups]
    counts = defaultdict(float, {tuple(gram.split(" ")): float(c) for gram, c in frequency.counts.items()})
    result = np.zeros((len(hypotheses), len(groups)))
    for i, hypothesis in enumerate(hypotheses):
        scorer = CiderScorer(n=4, sigma=6.0)
        for group in groups:
            scorer += (hypothesis, group)
        for _ in range(frequency.num_documents - len(groups)):
            scorer += ("", [""])
        scorer.document_frequency = defaultdict(float, counts)
        result[i] = scorer.compute_cider()[:len(groups)]
    return result


def equation_oracle(hypotheses: list[str], groups: list[list[str]], *, n: int = 4, sigma: float = 6.0,
                    frequency: dict[str, int] | None = None, num_documents: int | None = None) -> np.ndarray:
    """docs/methods.md CIDEr-D, pair by pair, on already-normalised captions."""
    def grams(caption: str) -> Counter:
        words = caption.split()
        return Counter(" ".join(words[i:i + k]) for k in range(1, n + 1) for i in range(len(words) - k + 1))

    if frequency is None:
        frequency = Counter(g for group in groups for g in set().union(*(grams(c) for c in group)))
        num_documents = len(groups)
    log_d = math.log(num_documents)

    def vectors(caption: str) -> tuple[list[dict[str, float]], list[float], int]:
        vec: list[dict[str, float]] = [{} for _ in range(n)]
        for gram, tf in grams(caption).items():
            vec[gram.count(" ")][gram] = tf * (log_d - math.log(max(1, frequency.get(gram, 0))))
        norms = [math.sqrt(sum(v * v for v in order.values())) for order in vec]
        return vec, norms, max(len(caption.split()) - 1, 0)

    result = np.zeros((len(hypotheses), len(groups)))
    for i, hypothesis in enumerate(hypotheses):
        vh, nh, lh = vectors(hypothesis)
        for j, group in enumerate(groups):
            total = 0.0
            for reference in group:
                vr, nr, lr = vectors(reference)
                sims = 0.0
                for k in range(n):
                    value = sum(min(x, vr[k].get(g, 0.0)) * vr[k].get(g, 0.0) for g, x in vh[k].items())
                    if nh[k] and nr[k]:
                        value /= nh[k] * nr[k]
                    sims += value
                total += sims * math.exp(-((lh - lr) ** 2) / (2 * sigma ** 2))
            result[i, j] = 10.0 * total / n / len(group)
    return result


@pytest.fixture(scope="module")
def flickr_case() -> tuple[list[str], list[list[str]]]:
    """~20 Flickr8K groups of 1, 3, 5 and 7 captions; hypotheses from inside and outside them."""
    rng = random.Random(2024)
    keys = rng.sample(KEYS, 30)
    groups = [list(FLICKR[k][:5]) for k in keys[:20]]
    groups[0] = groups[0][:1]
    groups[1] = groups[1][:3]
    groups[2] = groups[2] + FLICKR[keys[20]][:2]  # 7 captions
    groups[3] = groups[3] + ["", "Dog ."]  # an empty and a one-word reference
    hypotheses = [rng.choice(g) for g in groups[:14]] + [FLICKR[k][0] for k in keys[21:27]]
    hypotheses += ["", "dog", "A", "a a a a dog", "zebra xylophone quartet", "A dog dog dog runs runs ."]
    return hypotheses, groups


def test_equals_pycocoevalcap_on_flickr8k(flickr_case) -> None:
    hypotheses, groups = flickr_case
    expected = pycoco_matrix(hypotheses, groups)
    actual = cider_matrix(hypotheses, groups)
    assert actual.shape == (len(hypotheses), len(groups)) and actual.dtype == np.float64
    assert len(hypotheses) * len(groups) >= 500
    np.testing.assert_allclose(actual, expected, rtol=1e-9, atol=0)
    assert (expected > 0).mean() > 0.5  # the comparison is not dominated by zeros


def test_equation_oracle_agrees_with_pycocoevalcap(flickr_case) -> None:
    # The hand-written oracle used for n != 4 is itself checked against pycocoevalcap here.
    hypotheses, groups = flickr_case
    normalized = [[ptb_normalize(c) for c in g] for g in groups[:8]]
    expected = pycoco_matrix(hypotheses[:10], groups[:8])
    np.testing.assert_allclose(equation_oracle([ptb_normalize(h) for h in hypotheses[:10]], normalized),
                               expected, rtol=1e-9, atol=0)


def test_given_document_frequency_equals_pycocoevalcap(flickr_case, tmp_path) -> None:
    hypotheses, groups = flickr_case
    corpus = [FLICKR[k] for k in random.Random(7).sample(KEYS, 60)] + groups
    frequency = DocumentFrequency.from_reference_groups(corpus)
    assert frequency.num_documents == 80
    expected = pycoco_matrix_with_df(hypotheses, groups, frequency)
    np.testing.assert_allclose(cider_matrix(hypotheses, groups, document_frequency=frequency),
                               expected, rtol=1e-9, atol=0)
    # A saved and re-loaded frequency gives the same scores.
    frequency.save(tmp_path / "df.json")
    loaded = DocumentFrequency.load(tmp_path / "df.json")
    np.testing.assert_array_equal(cider_matrix(hypotheses, groups, document_frequency=loaded),
                                  cider_matrix(hypotheses, groups, document_frequency=frequency))


def test_document_frequency_of_the_groups_themselves_is_the_default(flickr_case) -> None:
    hypotheses, groups = flickr_case
    own = DocumentFrequency.from_reference_groups(groups)
    np.testing.assert_allclose(cider_matrix(hypotheses, groups, document_frequency=own),
                               cider_matrix(hypotheses, groups), rtol=1e-12, atol=0)


def test_document_frequency_counts_match_pycocoevalcap(flickr_case) -> None:
    _, groups = flickr_case
    scorer = CiderScorer(n=4)
    for group in groups:
        scorer += ("", [ptb_normalize(c) for c in group])
    scorer.compute_doc_freq()
    expected = {" ".join(gram): int(count) for gram, count in scorer.document_frequency.items()}
    frequency = DocumentFrequency.from_reference_groups(groups)
    assert dict(frequency.counts) == expected
    assert frequency.num_documents == len(groups) and frequency.n == 4 and frequency.normalization == "ptb"


def test_hand_computed_clipping_case() -> None:
    # D = 2 and every n-gram has df <= 1, so every idf is L = log 2 (unseen ones too: log max(1, 0) = 0).
    # h = "a a b", r = "a b b":
    #   unigrams: v_h = (a: 2L, b: L), v_r = (a: L, b: 2L), norms L*sqrt(5) each;
    #             numerator min(2L, L)*L + min(L, 2L)*2L = 3L^2  -> sim_1 = 3/5
    #   bigrams:  h {a a, a b}, r {a b, b b}, norms L*sqrt(2); numerator L^2 -> sim_2 = 1/2
    #   trigrams: no shared one -> 0; 4-grams: both empty (norm 0) -> 0.
    #   lengths: 2 bigrams each -> no penalty.  CIDEr-D = 10 * (0.6 + 0.5) / 4 / 1 = 2.75.
    scores = cider_matrix(["a a b"], [["a b b"], ["c"]], normalize=False)
    np.testing.assert_allclose(scores, [[2.75, 0.0]], rtol=1e-12, atol=0)


def test_hand_computed_length_penalty_case() -> None:
    # h = "a b" vs r = "a b c d" (all idf = L = log 2):
    #   sim_1 = 2L^2 / (L sqrt(2) * 2L) = 1/sqrt(2); sim_2 = L^2 / (L * L sqrt(3)) = 1/sqrt(3);
    #   sim_3 = sim_4 = 0 (h has no trigram: norm 0).
    #   lengths 1 and 3 bigrams: penalty exp(-(1 - 3)^2 / (2 * 6^2)) = exp(-1/18).
    scores = cider_matrix(["a b"], [["a b c d"], ["e"]], normalize=False)
    expected = 10 * math.exp(-1 / 18) * (1 / math.sqrt(2) + 1 / math.sqrt(3)) / 4
    np.testing.assert_allclose(scores, [[expected, 0.0]], rtol=1e-12, atol=0)


def test_hand_computed_group_average_and_zero_idf() -> None:
    # "a" is in both documents: idf 0, it counts for nothing. Group 0 = {"a x", "a y"}: h = "a x" matches
    # "a x" fully on orders 1 and 2 (sim 1 each), and "a y" only through "a" (idf 0) -> 0.
    # CIDEr-D = 10 * (1 + 1 + 0 + 0) / 4 / 2 = 2.5.
    scores = cider_matrix(["a x"], [["a x", "a y"], ["a z"]], normalize=False)
    np.testing.assert_allclose(scores, [[2.5, 0.0]], rtol=1e-12, atol=0)


def test_edge_cases_against_pycocoevalcap() -> None:
    groups = [["a dog"], ["a a a a dog", "dog dog"], ["", "cat"], ["one"],
              ["a black dog runs", "a dog runs", "the dog is black"],
              ["x y z w v u t s r q p o n m"] * 7]
    hypotheses = ["", "a", "dog", "a a a a dog", "a a a a a a dog dog", "never seen words", "one",
                  "a black dog runs on the grass", "x y z w v u t s r q p o n m", "the the the"]
    np.testing.assert_allclose(cider_matrix(hypotheses, groups), pycoco_matrix(hypotheses, groups),
                               rtol=1e-9, atol=0)


def test_not_symmetric() -> None:
    captions = ["a a a b", "a b", "c d e", "a b c d e f"]
    scores = cider_matrix(captions, [[c] for c in captions], normalize=False)
    np.testing.assert_allclose(scores, pycoco_matrix(captions, [[c] for c in captions]), rtol=1e-9, atol=0)
    assert not np.allclose(scores, scores.T)
    assert scores[0, 1] != scores[1, 0]


def test_other_orders_and_sigma_follow_the_equation(flickr_case) -> None:
    hypotheses, groups = flickr_case
    hyps = [ptb_normalize(h) for h in hypotheses]
    refs = [[ptb_normalize(c) for c in g] for g in groups]
    for n, sigma in [(1, 6.0), (2, 6.0), (6, 2.5), (4, 0.5)]:
        np.testing.assert_allclose(cider_matrix(hyps, refs, n=n, sigma=sigma, normalize=False),
                                   equation_oracle(hyps, refs, n=n, sigma=sigma), rtol=1e-9, atol=0)


def test_chunking_duplicates_and_column_split_do_not_change_scores(flickr_case, monkeypatch) -> None:
    hypotheses, groups = flickr_case
    original = len(hypotheses)
    hypotheses = hypotheses + hypotheses[::3]  # repeated hypotheses
    reference = cider_matrix(hypotheses, groups)
    for chunk_size in (1, 2, 7):
        # BLAS may sum in another order for another block shape: equal to the last bits only.
        np.testing.assert_allclose(cider_matrix(hypotheses, groups, chunk_size=chunk_size), reference,
                                   rtol=1e-13, atol=0)
    for share in (0.0, 2.0):  # every column dense / every column sparse
        monkeypatch.setattr(cider_module, "_DENSE_COLUMN_SHARE", share)
        np.testing.assert_allclose(cider_matrix(hypotheses, groups), reference, rtol=1e-12, atol=0)
    monkeypatch.setattr(cider_module, "_MAX_DENSE_COLUMNS", 3)
    np.testing.assert_allclose(cider_matrix(hypotheses, groups), reference, rtol=1e-12, atol=0)
    np.testing.assert_array_equal(reference[original:], reference[:original][::3])


def test_equal_size_groups_path(flickr_case) -> None:
    # All groups of 5 takes the reshape path for group sums; compare with pycocoevalcap too.
    keys = random.Random(11).sample(KEYS, 12)
    groups = [FLICKR[k][:5] for k in keys]
    hypotheses = [FLICKR[k][2] for k in keys] + ["a dog"]
    np.testing.assert_allclose(cider_matrix(hypotheses, groups), pycoco_matrix(hypotheses, groups),
                               rtol=1e-9, atol=0)


def test_normalisation_is_applied_to_both_sides() -> None:
    raw_h, raw_g = ["A Dog's ball."], [["a dog 's ball", "A DOG, running!"], ["Two cats ."]]
    normalized = cider_matrix([ptb_normalize(h) for h in raw_h], [[ptb_normalize(c) for c in g] for g in raw_g],
                              normalize=False)
    np.testing.assert_array_equal(cider_matrix(raw_h, raw_g), normalized)
    np.testing.assert_array_equal(cider_matrix(raw_h, raw_g, normalize="java"), normalized)
    # Without normalisation case and punctuation count.
    assert not np.array_equal(cider_matrix(raw_h, raw_g, normalize=False), normalized)


def test_empty_inputs() -> None:
    assert cider_matrix([], [["a"]]).shape == (0, 1)
    assert cider_matrix(["a"], []).shape == (1, 0)
    assert cider_matrix([""], [[""]]).tolist() == [[0.0]]
    # A single document: every idf is log(1) - log(1) = 0.
    assert cider_matrix(["a dog"], [["a dog"]]).tolist() == [[0.0]]


def test_bad_input_errors() -> None:
    with pytest.raises(TypeError, match="hypotheses must be a sequence of strings"):
        cider_matrix("a dog", [["a dog"]])
    with pytest.raises(TypeError, match=r"hypotheses\[1\] must be a str"):
        cider_matrix(["a", 2], [["a dog"]])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"reference_groups\[0\] must be a sequence of strings"):
        cider_matrix(["a"], ["a dog"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"reference_groups\[1\] is empty"):
        cider_matrix(["a"], [["a dog"], []])
    with pytest.raises(ValueError, match="n must be a positive integer"):
        cider_matrix(["a"], [["a"]], n=0)
    for sigma in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="sigma must be a positive finite number"):
            cider_matrix(["a"], [["a"]], sigma=sigma)
    with pytest.raises(ValueError, match="chunk_size"):
        cider_matrix(["a"], [["a"]], chunk_size=0)
    with pytest.raises(ValueError, match="normalize must be"):
        cider_matrix(["a"], [["a"]], normalize="nltk")
    frequency = DocumentFrequency({"a": 1}, num_documents=2, n=2)
    with pytest.raises(ValueError, match="up to n=2"):
        cider_matrix(["a"], [["a"]], document_frequency=frequency)
    with pytest.raises(ValueError, match="'ptb'-normalised"):
        cider_matrix(["a"], [["a"]], n=2, document_frequency=frequency, normalize=False)
    with pytest.raises(TypeError, match="document_frequency must be a DocumentFrequency"):
        cider_matrix(["a"], [["a"]], document_frequency={"a": 1})  # type: ignore[arg-type]


def test_document_frequency_validation_and_files(tmp_path) -> None:
    with pytest.raises(ValueError, match=r"counts\['a'\] = 3 is outside \[1, num_documents=2\]"):
        DocumentFrequency({"a": 3}, num_documents=2)
    with pytest.raises(ValueError, match="num_documents must be a positive integer"):
        DocumentFrequency({}, num_documents=0)
    with pytest.raises(ValueError, match="normalization"):
        DocumentFrequency({}, num_documents=1, normalization="lower")
    frequency = DocumentFrequency.from_reference_groups([["a dog", "a cat"], ["a dog runs"]], n=2,
                                                        normalize=False)
    assert dict(frequency.counts) == {"a": 2, "dog": 2, "cat": 1, "runs": 1, "a dog": 2, "a cat": 1,
                                      "dog runs": 1}
    assert frequency.lookup(["a", "zebra", "a cat"]).tolist() == [2, 0, 1]
    for name in ("df.json", "df.json.gz"):
        frequency.save(tmp_path / name)
        loaded = DocumentFrequency.load(str(tmp_path / name))
        assert dict(loaded.counts) == dict(frequency.counts)
        assert (loaded.num_documents, loaded.n, loaded.normalization) == (2, 2, "none")
    assert sorted(os.listdir(tmp_path)) == ["df.json", "df.json.gz"]  # no temporary file left
    (tmp_path / "bad.json").write_text('{"format": "something else"}')
    with pytest.raises(ValueError, match="not a kitm DocumentFrequency file"):
        DocumentFrequency.load(tmp_path / "bad.json")


def test_ngram_counts_equal_pycocoevalcap_precook() -> None:
    for caption in ["", "dog", "a a a a dog", "a child in a pink dress is climbing up a set of stairs"]:
        expected = {" ".join(gram): count for gram, count in precook(caption, 4).items()}
        assert ngram_counts(caption) == expected
    assert ngram_counts("a a dog", 2) == {"a": 2, "dog": 1, "a a": 1, "a dog": 1}
    assert cook_refs(["a b"])[0] == precook("a b")  # the oracle's reference cooking is precook

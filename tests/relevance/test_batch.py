"""Exact batch relevance from stored relevance rows: CIDEr-D with the training idf, sentence-embedding cosines,
neighbour rows. Oracles: `kitm.relevance.cider_matrix` (pinned to pycocoevalcap's CiderScorer in test_cider.py),
pycocoevalcap itself on a few pairs, and plain numpy on the embeddings."""

import collections

import numpy as np
import pytest
import tensorflow as tf

from kitm.data import schema
from kitm.relevance.batch import batch_cider
from kitm.errors import KitmDataError
from kitm.data.pipeline import PipelineConfig, training_captions, training_dataset
from kitm.data.records import parse_record, read_records
from kitm.layers import CaptionTokenizer, build_vocabulary
from kitm.relevance import DocumentFrequency, cider_matrix, sentence_embeddings
from kitm.relevance.cider_features import cider_features, ngram_key
from kitm.relevance.rows import compute_relevance_rows, load_document_frequency


def _flickr_groups(shared_dir, count, start=0):
    groups = collections.defaultdict(list)
    for line in (shared_dir / "data" / "flickr8k" / "Flickr8k.token.txt").read_text().splitlines():
        key, caption = line.split("\t", 1)
        groups[key.split("#")[0]].append(caption)
    keys = sorted(groups)[start:start + count]
    return [groups[key][:5] for key in keys]


def _ragged(features, values, captions_per_group=None):
    tensor = tf.RaggedTensor.from_row_lengths(values, features.entries)
    if captions_per_group:
        tensor = tf.RaggedTensor.from_uniform_row_length(tensor, captions_per_group)
    return tensor


def _batch_cider_from_features(hypotheses, groups, document_frequency, normalize=True):
    hypothesis_features = cider_features(hypotheses, document_frequency, normalize=normalize)
    reference_features = cider_features([c for group in groups for c in group], document_frequency,
                                        normalize=normalize)
    size = len(groups[0])
    return batch_cider(
        {"keys": _ragged(hypothesis_features, hypothesis_features.keys),
         "weights": _ragged(hypothesis_features, hypothesis_features.hypothesis_weights),
         "lengths": hypothesis_features.lengths},
        {"keys": _ragged(reference_features, reference_features.keys, size),
         "weights": _ragged(reference_features, reference_features.reference_weights, size),
         "lengths": reference_features.lengths.reshape(-1, size)},
        n=document_frequency.n).numpy()


def test_batch_cider_equals_cider_matrix_on_flickr8k_with_training_idf(shared_dir):
    document_frequency = DocumentFrequency.from_reference_groups(_flickr_groups(shared_dir, 1500))
    groups = _flickr_groups(shared_dir, 64, start=6000)  # unseen images: some n-grams are absent from the idf
    rng = np.random.default_rng(0)
    hypotheses = [group[rng.integers(5)] for group in groups] + [groups[3][0].upper(), "A dog !"]
    expected = cider_matrix(hypotheses, groups, document_frequency=document_frequency).T  # [images, captions]
    found = _batch_cider_from_features(hypotheses, groups, document_frequency)
    assert found.shape == (64, 66) and found.dtype == np.float32
    np.testing.assert_allclose(found, expected, rtol=2e-6, atol=2e-6)
    assert np.count_nonzero(expected > 0.05) > 500  # the test compares real overlaps, not mostly zeros


def test_batch_cider_edge_cases_against_pycocoevalcap():
    from pycocoevalcap.cider.cider_scorer import CiderScorer

    corpus = [["a dog runs", "a dog runs on grass", "the dog", "dog", "a a a a"],
              ["a cat sleeps", "a cat on a mat", "cat", "the cat sleeps on the mat", "a cat a cat"],
              ["two men", "men talk", "two men talk in a room", "people", "a room"]]
    document_frequency = DocumentFrequency.from_reference_groups(corpus, normalize=False)
    # Empty after normalisation is impossible with normalize=False; use one-word, repeated, absent n-grams.
    hypotheses = ["dog", "a a a a a a", "a cat a cat a cat", "zebra crossing", "two men talk in a room", "room"]
    found = _batch_cider_from_features(hypotheses, corpus, document_frequency, normalize=False)

    corpus_frequency = collections.defaultdict(float, {
        tuple(gram.split()): float(count) for gram, count in document_frequency.counts.items()})
    for row, hypothesis in enumerate(hypotheses):
        # pycocoevalcap takes D from the number of pairs it scores (here the 3 corpus groups) and counts
        # document frequencies over them; give it the corpus's counts instead.
        scorer = CiderScorer(n=4, sigma=6.0)
        for group in corpus:
            scorer += (hypothesis, group)
        scorer.document_frequency = corpus_frequency
        scores = np.array(scorer.compute_cider())
        np.testing.assert_allclose(found[:, row], scores, rtol=2e-6, atol=2e-6)
    assert np.count_nonzero(found) >= 5  # "a" is in every document: idf 0, so "a a a a a a" scores 0


def test_caption_that_normalises_to_nothing_has_no_entries_and_scores_zero():
    document_frequency = DocumentFrequency.from_reference_groups([["a dog"], ["a cat"]])
    features = cider_features(["...", "a dog"], document_frequency)
    np.testing.assert_array_equal(features.entries[:1], [0])
    assert features.lengths[0] == 0
    found = _batch_cider_from_features(["...", "a dog"], [["a dog"], ["a cat"]], document_frequency)
    np.testing.assert_allclose(found, cider_matrix(["...", "a dog"], [["a dog"], ["a cat"]],
                                                   document_frequency=document_frequency).T, atol=1e-6)


def test_ngram_keys_separate_levels_and_ngrams():
    keys = {ngram_key("a"), ngram_key("a", 2), ngram_key("a dog"), ngram_key("dog a")}
    assert len(keys) == 4 and all(0 <= key < 2 ** 63 for key in keys)
    assert ngram_key("a", 2) - ngram_key("a") == 1
    with pytest.raises(ValueError, match="level"):
        ngram_key("a", 0)


def test_a_caption_repeating_an_ngram_hundreds_of_times_scores_as_pycocoevalcap():
    """A 100,000-character caption stopped the build with "a caption repeats an n-gram more than 256 times" (the
    keys' 8 level bits); levels above 256 now take salted hashes, and CIDEr-D stays pycocoevalcap's."""
    from pycocoevalcap.cider.cider_scorer import CiderScorer

    long_caption = " ".join(["dog runs"] * 700)  # "dog", "runs", "dog runs", "runs dog", ... each ~700 times
    corpus = [["a dog runs", "dog runs dog runs", "the dog"], ["a cat sleeps", "cat", "a cat on a mat"],
              [long_caption, "dog runs fast", "a dog"]]
    document_frequency = DocumentFrequency.from_reference_groups(corpus, normalize=False)
    hypotheses = [long_caption, "dog runs dog runs", "a cat"]
    features = cider_features(hypotheses, document_frequency, normalize=False)
    first = features.caption_slices()[0]
    assert len(set(features.keys[first].tolist())) == features.entries[0] > 2000  # every (n-gram, level) its own key
    assert ngram_key("dog", 700) in set(features.keys[first].tolist())
    # Keys below level 257 are the unsalted hash's: the records of earlier builds keep their meaning.
    assert ngram_key("dog", 257) != ngram_key("dog", 1) and ngram_key("dog", 256) - ngram_key("dog") == 255
    found = _batch_cider_from_features(hypotheses, corpus, document_frequency, normalize=False)
    corpus_frequency = collections.defaultdict(float, {
        tuple(gram.split()): float(count) for gram, count in document_frequency.counts.items()})
    for row, hypothesis in enumerate(hypotheses):
        scorer = CiderScorer(n=4, sigma=6.0)
        for group in corpus:
            scorer += (hypothesis, group)
        scorer.document_frequency = corpus_frequency
        # float32 weights summed over ~2,800 entries of one pair: 2e-5 relative (a wrong key would miss by far more).
        np.testing.assert_allclose(found[:, row], np.array(scorer.compute_cider()), rtol=1e-4, atol=2e-6)
    assert found[2, 0] > 3


def _records_by_caption_id(root, split):
    info = schema.load_info(root)
    spec = schema.feature_spec(info)
    captions, embeddings, neighbors = {}, {}, {}
    for parsed in read_records(info.shard_paths(root, split)).map(lambda p, r: parse_record(p, r, spec)):
        ids = parsed["caption/ids"].numpy()
        for k, caption_id in enumerate(ids):
            captions[int(caption_id)] = parsed["captions"].numpy()[k].decode()
            if schema.SBERT_EMBEDDINGS in parsed:
                embeddings[int(caption_id)] = parsed[schema.SBERT_EMBEDDINGS].numpy().reshape(len(ids), -1)[k]
            if schema.NEIGHBOR_CAPTION_IDS in parsed:
                neighbors[int(caption_id)] = (
                    parsed[schema.NEIGHBOR_CAPTION_IDS].numpy().reshape(len(ids), -1)[k],
                    parsed[schema.NEIGHBOR_SCORES].numpy().reshape(len(ids), -1)[k])
    return info, captions, embeddings, neighbors


@pytest.fixture(scope="module")
def rich_synthetic(tmp_path_factory):
    """A small synthetic world with every relevance row source (CIDEr-D, sentence embeddings, neighbours)."""
    from kitm.data.synthetic_records import build_synthetic

    root = tmp_path_factory.mktemp("rich") / "synthetic"
    build_synthetic(root, num_scenes=60, seed=3, image_size=32, num_shards=2, progress=False,
                    relevance=("cider", "sbert", "neighbors"), neighbors_k=20, world="shapes")
    return root


@pytest.fixture(scope="module")
def tokenizer(rich_synthetic):
    return CaptionTokenizer(build_vocabulary(training_captions(rich_synthetic)), max_length=16)


@pytest.mark.parametrize("captions_mode", ["sample", "all"])
@pytest.mark.parametrize("replicas", [1, 2])
def test_pipeline_cider_relevance_equals_cider_matrix(rich_synthetic, tokenizer, captions_mode, replicas):
    info, captions, _, _ = _records_by_caption_id(rich_synthetic, "train")
    document_frequency = load_document_frequency(rich_synthetic, info)
    assert document_frequency.num_documents == info.num_images("train")
    config = PipelineConfig(batch_size=16, image_size=32, relevance="cider", flip=False, captions=captions_mode,
                            num_replicas=replicas, seed=2)
    for _, y in training_dataset(rich_synthetic, "train", tokenizer, config).take(2):
        image_index, caption_index = y["image_index"].numpy(), y["caption_index"].numpy()
        groups = [[captions[i * 5 + k] for k in range(5)] for i in image_index]
        hypotheses = [captions[c] for c in caption_index]
        full = cider_matrix(hypotheses, groups, document_frequency=document_frequency).T
        b = 16 // replicas
        expected = np.concatenate([full[r * b:(r + 1) * b, r * b:(r + 1) * b] for r in range(replicas)])
        np.testing.assert_allclose(y["relevance"].numpy(), expected, rtol=1e-5, atol=1e-5)


def test_pipeline_sbert_relevance_is_the_cosine_with_the_images_own_caption(rich_synthetic, tokenizer):
    _, captions, embeddings, _ = _records_by_caption_id(rich_synthetic, "train")
    ids = sorted(captions)
    recomputed = sentence_embeddings([captions[i] for i in ids])
    np.testing.assert_allclose(np.stack([embeddings[i] for i in ids]), recomputed, atol=1e-5)
    config = PipelineConfig(batch_size=16, image_size=32, relevance="sbert", flip=False, seed=2)
    _, y = next(iter(training_dataset(rich_synthetic, "train", tokenizer, config)))
    caption_embeddings = np.stack([embeddings[c] for c in y["caption_index"].numpy()])
    np.testing.assert_allclose(y["relevance"].numpy(), caption_embeddings @ caption_embeddings.T, atol=1e-5)
    np.testing.assert_allclose(np.diag(y["relevance"].numpy()), 1.0, atol=1e-5)


def test_neighbor_rows_are_the_nearest_captions_of_other_images(rich_synthetic):
    info, captions, embeddings, neighbors = _records_by_caption_id(rich_synthetic, "train")
    assert info.relevance["neighbors"]["k"] == 20
    ids = np.array(sorted(captions))
    matrix = np.stack([embeddings[i] for i in ids]).astype(np.float64)
    for caption_id in ids[::37]:
        found, scores = neighbors[int(caption_id)]
        assert len(found) == 20 and not np.any(found // 5 == caption_id // 5)  # other images only
        cosines = matrix @ embeddings[int(caption_id)]
        others = ids // 5 != caption_id // 5
        best = np.sort(cosines[others])[::-1][:20]
        np.testing.assert_allclose(scores, best, atol=1e-5)
        np.testing.assert_allclose(scores, cosines[np.searchsorted(ids, found)], atol=1e-5)


def test_relevance_the_records_lack_is_named(tiny_synthetic, tokenizer):
    config = PipelineConfig(batch_size=16, image_size=32, relevance="sbert")
    with pytest.raises(KitmDataError, match="sbert"):
        training_dataset(tiny_synthetic, "train", tokenizer, config)


def test_a_resumed_build_reuses_cached_embeddings(tmp_path, monkeypatch):
    captions = {"train": [["a red circle", "a circle", "red shape", "a round thing", "circle on the left"],
                          ["a blue square", "a square", "blue shape", "a box", "square on the right"],
                          ["a green star", "a star", "green shape", "a star shape", "star in the middle"]]}
    ids = {"train": np.arange(15).reshape(3, 5)}
    first = compute_relevance_rows(tmp_path, captions, ids, captions_per_image=5, sources=("sbert", "neighbors"),
                                   neighbors_k=4, progress=False)

    def no_model(*args, **kwargs):
        raise AssertionError("the embeddings should come from the cache")

    monkeypatch.setattr("kitm.relevance.sentence.sentence_embeddings", no_model)
    again = compute_relevance_rows(tmp_path, captions, ids, captions_per_image=5, sources=("sbert", "neighbors"),
                                   neighbors_k=4, progress=False)
    for key in (schema.SBERT_EMBEDDINGS, schema.NEIGHBOR_CAPTION_IDS):
        np.testing.assert_array_equal(first.features("train", 1)[key], again.features("train", 1)[key])
    assert not list(tmp_path.glob("**/*.tmp"))


def test_relevance_rows_reject_bad_input(tmp_path):
    with pytest.raises(KitmDataError, match="Unknown relevance row"):
        compute_relevance_rows(tmp_path, {"train": [["a"] * 5]}, {"train": np.arange(5)[None]},
                               captions_per_image=5, sources=("bleu",))
    with pytest.raises(KitmDataError, match="image 1: 4 captions"):
        compute_relevance_rows(tmp_path, {"train": [["a"] * 5, ["a"] * 4]}, {"train": np.arange(10).reshape(2, 5)},
                               captions_per_image=5, sources=("cider",))
    with pytest.raises(KitmDataError, match="train split"):
        compute_relevance_rows(tmp_path, {"val": [["a b"] * 5]}, {"val": np.arange(5)[None]},
                               captions_per_image=5, sources=("cider",))

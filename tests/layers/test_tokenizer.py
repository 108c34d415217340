"""CaptionTokenizer: tensorflow-text normalisation, vocabulary, padding, serialisation."""

import numpy as np
import pytest
import tensorflow as tf

import kitm  # noqa: F401
import keras
from kitm.layers import CaptionTokenizer, build_vocabulary, split_words
from kitm.layers.tokenizer import script_tokens

# Captions that stress the tokenizer: empty and whitespace-only rows (first and last), scripts changing inside a
# word, digits, combining marks, emoji, right-to-left text, non-breaking and ideographic spaces, control characters
# and bytes that are not UTF-8 (replaced by U+FFFD).
EDGE_CASES = ["", "   ", "xy.,z de", "abαβ", "累計7239人", "A Red circle, left of a BLUE square!", "--- ...",
              "it's 3 dogs", "cafe\u0301 naïve ÉCOLE", "a dog 🐕‍🦺 runs 👍🏽!", "\u0627\u0644\u0643\u0644\u0628 dog",
              "two\u00a0words\u3000and\ttabs\nnew line", "ctrl\x00char\x07s", "ß straße ǅ", "", "\u200b"]
INVALID_UTF8 = [b"\xff\xfe dog", b"half \xe7\xb4 char", b"\xc3"]


def _public_tokens(texts):
    """The oracle: tensorflow-text's own UnicodeScriptTokenizer.tokenize (offsets computed, then dropped)."""
    import tensorflow_text as tf_text

    return tf_text.UnicodeScriptTokenizer().tokenize(texts)


def _flickr8k_captions(shared_dir):
    from kitm.data.flickr8k import read_token_file

    captions = read_token_file(shared_dir / "data" / "flickr8k" / "Flickr8k.token.txt")
    return [caption for numbered in captions.values() for _, caption in numbered]


def test_script_tokens_equal_the_tokenizers_own_on_flickr8k_and_edge_cases(shared_dir):
    captions = _flickr8k_captions(shared_dir)
    assert len(captions) > 40_000
    for texts in (tf.constant(captions + EDGE_CASES), tf.constant(INVALID_UTF8), tf.constant([], tf.string)):
        assert script_tokens(texts).to_list() == _public_tokens(texts).to_list()
    # In a graph with an unknown batch size, as tf.data maps and the serving signatures trace it.
    graph_tokens = tf.function(script_tokens, input_signature=[tf.TensorSpec([None], tf.string)])
    texts = tf.constant(EDGE_CASES + [c.upper() for c in captions[:500]])
    assert graph_tokens(texts).to_list() == _public_tokens(texts).to_list()
    # Another rank takes the tokenizer's own path.
    assert script_tokens(tf.constant([["a b", "c"]])).to_list() == _public_tokens(tf.constant([["a b", "c"]])).to_list()


def test_split_words_equals_the_tokenizer_and_ragged_boolean_mask(shared_dir):
    """split_words against the same words composed from tensorflow-text's tokenizer and tf.ragged.boolean_mask."""
    import tensorflow_text as tf_text

    def oracle(texts):
        tokens = _public_tokens(tf_text.case_fold_utf8(texts))
        words = tokens.flat_values
        keep = tf.logical_not(tf.strings.regex_full_match(words, r"[\p{P}\p{S}]+"))
        keep = tf.logical_and(keep, tf.not_equal(tf.strings.strip(words), ""))
        return tf.ragged.boolean_mask(tokens, tokens.with_flat_values(keep))

    # Rows whose every token is dropped, at the start, inside and at the end; a batch of only such rows.
    texts = tf.constant(["...", *_flickr8k_captions(shared_dir)[:2000], *EDGE_CASES, "!?", "--- ..."])
    assert split_words(texts).to_list() == oracle(texts).to_list()
    for texts in (tf.constant(["...", "!"]), tf.constant([], tf.string), tf.constant(INVALID_UTF8)):
        assert split_words(texts).to_list() == oracle(texts).to_list()
    # A batch of ragged rank 2 (another rank): the tokenizer's own path, masked with tf.ragged.boolean_mask.
    nested = tf.constant([["A dog.", "!"], ["b", ""]])
    assert split_words(nested).to_list() == oracle(nested).to_list()


def test_a_tokenising_graph_stays_small():
    """The tokens' byte offsets, which the tokenizer computes and drops, once made a tokenising graph 1,500 ops
    (0.8 s of tracing for each tf.data map and serving signature): the graphs keep well under 200."""
    tokenizer = CaptionTokenizer(["a", "dog"], max_length=8)
    for function in (split_words, tokenizer.tf_tokenize):
        graph = tf.function(function).get_concrete_function(tf.TensorSpec([None], tf.string)).graph
        assert len(graph.get_operations()) < 200, (function, len(graph.get_operations()))


def test_split_words_case_folds_and_drops_punctuation():
    words = split_words(tf.constant(["A Red circle, left of a BLUE square!", "--- ...", "it's 3 dogs"]))
    assert [[w.decode() for w in row] for row in words.to_list()] == [
        ["a", "red", "circle", "left", "of", "a", "blue", "square"], [], ["it", "s", "3", "dogs"]]


def test_vocabulary_is_ordered_by_frequency_then_alphabet_and_respects_min_count():
    vocabulary = build_vocabulary(["b a a", "c b a", "d"], min_count=1)
    assert vocabulary == ["a", "b", "c", "d"]
    assert build_vocabulary(["b a a", "c b a", "d"], min_count=2) == ["a", "b"]
    with pytest.raises(ValueError, match="no words"):
        build_vocabulary(["...", "!"])


def test_ids_padding_truncation_and_unknown_words():
    tokenizer = CaptionTokenizer(["a", "red", "circle"], max_length=4)
    ids = tokenizer(tf.constant(["A red square.", "", "a a a a a a"])).numpy()
    assert ids.dtype == np.int32
    np.testing.assert_array_equal(ids, [[2, 3, 1, 0], [0, 0, 0, 0], [2, 2, 2, 2]])
    assert tokenizer.vocabulary_size == 5


def test_config_round_trip_and_vocabulary_file(tmp_path):
    tokenizer = CaptionTokenizer(["a", "red", "circle"], max_length=5, name="tok")
    clone = keras.layers.deserialize(keras.layers.serialize(tokenizer))
    assert clone.vocabulary == ["a", "red", "circle"] and clone.max_length == 5
    path = str(tmp_path / "vocabulary.txt")
    tokenizer.save_vocabulary(path)
    from_file = CaptionTokenizer(path, max_length=5)
    texts = tf.constant(["red circle", "a blue circle"])
    np.testing.assert_array_equal(from_file(texts), tokenizer(texts))


def test_works_inside_tf_data():
    tokenizer = CaptionTokenizer(["a", "b"], max_length=3)
    dataset = tf.data.Dataset.from_tensor_slices(["a b", "b c a x"]).batch(2).map(tokenizer)
    np.testing.assert_array_equal(next(iter(dataset)).numpy(), [[2, 3, 0], [3, 1, 2]])


def test_without_the_kernels_module_the_tokenizers_own_path_gives_the_same_words(monkeypatch):
    import kitm.layers.tokenizer as tokenizer_module

    texts = tf.constant(EDGE_CASES)
    fast = split_words(texts).to_list()
    monkeypatch.setattr(tokenizer_module, "_script_tokenizer_module", None)
    assert script_tokens(texts).to_list() == _public_tokens(texts).to_list()
    assert split_words(texts).to_list() == fast

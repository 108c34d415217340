"""CaptionTokenizer: tensorflow-text normalisation, vocabulary, padding, serialisation."""

import numpy as np
import pytest
import tensorflow as tf

import kitm  # noqa: F401
import keras
from kitm.layers import CaptionTokenizer, build_vocabulary, split_words


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

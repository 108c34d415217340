"""Caption tokenisation inside the TensorFlow graph (tensorflow-text), with the vocabulary saved with the model.

`CaptionTokenizer` case-folds UTF-8 (`tensorflow_text.case_fold_utf8`), splits on Unicode script boundaries
(`tensorflow_text.UnicodeScriptTokenizer`, so "dog." gives "dog" and "."), drops punctuation-only tokens and
maps words to ids with a `keras.layers.StringLookup` whose vocabulary comes from the training captions.
Id 0 is padding (the mask), id 1 unknown words. The same layer runs in the tf.data pipeline and in the exported
SavedModel, so serving sees exactly the training tokenisation.
"""

from __future__ import annotations

import collections
from typing import Iterable

import keras
import numpy as np
from kitm.progress import progress_bar as tqdm
import tensorflow as tf
import tensorflow_text as tf_text

from kitm.files import write_text_atomically

try:  # the module of tensorflow-text's script tokenizer, for its kernel (`script_tokens`); not a public name
    from tensorflow_text.python.ops import unicode_script_tokenizer as _script_tokenizer_module
except ImportError:  # another layout: script_tokens takes the tokenizer's own path
    _script_tokenizer_module = None

PAD_TOKEN = ""
UNKNOWN_TOKEN = "[UNK]"
# Tokens made only of punctuation or symbols carry no content for matching (as the PTB tokenizer's removal).
_PUNCTUATION = r"[\p{P}\p{S}]+"


def script_tokens(texts: tf.Tensor) -> tf.RaggedTensor:
    """`tensorflow_text.UnicodeScriptTokenizer().tokenize(texts)` for [N] strings, without the tokens' byte offsets.

    The tokenizer's `tokenize` computes each token's start and end byte offsets and drops them; their ragged gathers
    and the ragged tensors' validity checks are about 1,400 of the 1,500 ops a tokenising graph held (0.8 s of
    tracing on one CPU core, paid by every tf.data map, serving signature and eager call that tokenises). The tokens
    come from the same kernel by the same steps (UTF-8 -> code points, split where the Unicode script changes and
    drop whitespace, code points -> UTF-8, invalid bytes replaced by U+FFFD both ways), so they are identical
    (tests/layers/test_tokenizer.py compares them on every Flickr8K caption and on edge cases); the kernel's row
    splits are valid by construction, so they are not checked again. Other ranks, or a tensorflow-text without that
    kernel, take the tokenizer's own path."""
    kernel = getattr(_script_tokenizer_module, "gen_unicode_script_tokenizer", None)
    if texts.shape.rank != 1 or kernel is None:
        return tf_text.UnicodeScriptTokenizer().tokenize(texts)
    codepoints = tf.strings.unicode_decode(texts, "UTF-8")
    values, token_splits, _, _, caption_splits = kernel.unicode_script_tokenize_with_offsets(
        input_values=codepoints.flat_values, input_splits=codepoints.row_splits, keep_whitespace=False)
    tokens = tf.RaggedTensor.from_nested_row_splits(values, [caption_splits, token_splits], validate=False)
    return tf.strings.unicode_encode(tokens, "UTF-8")


def _keep_tokens(tokens: tf.RaggedTensor, keep: tf.Tensor) -> tf.RaggedTensor:
    """The tokens whose `keep` (one bool per token, flat) is true, each row's order kept: `tf.ragged.boolean_mask`
    in a handful of ops (a row's new end is the number of kept tokens up to its old end)."""
    kept_before = tf.concat([tf.zeros([1], tf.int64), tf.cumsum(tf.cast(keep, tf.int64))], axis=0)
    return tf.RaggedTensor.from_row_splits(tf.boolean_mask(tokens.flat_values, keep),
                                           tf.gather(kept_before, tokens.row_splits), validate=False)


# Not converted by autograph (tf.data maps convert what they call): the function has no tensor-dependent Python
# control flow, and converting tensorflow-text's Python code with it (the tokenizer's own path) cost about a second
# per trace.
@tf.autograph.experimental.do_not_convert
def split_words(texts: tf.Tensor) -> tf.RaggedTensor:
    """Normalised words of each caption: [N] strings -> ragged [N, (words)]."""
    texts = tf_text.case_fold_utf8(tf.convert_to_tensor(texts, tf.string))
    tokens = script_tokens(texts)
    keep = tf.logical_not(tf.strings.regex_full_match(tokens.flat_values, _PUNCTUATION))
    keep = tf.logical_and(keep, tf.not_equal(tf.strings.strip(tokens.flat_values), ""))
    if tokens.ragged_rank != 1:  # the tokenizer's own path on another rank
        return tf.ragged.boolean_mask(tokens, tokens.with_flat_values(keep))
    return _keep_tokens(tokens, keep)


def build_vocabulary(captions: Iterable[str], *, min_count: int = 1, max_size: int | None = None,
                     batch_size: int = 4096, progress: bool = False) -> list[str]:
    """Words of the training captions seen at least `min_count` times, most frequent first (ties alphabetical)."""
    counts: collections.Counter = collections.Counter()
    captions = list(captions)
    starts = range(0, len(captions), batch_size)
    for start in tqdm(starts, desc="vocabulary", unit="batch", disable=not progress, leave=False):
        words = split_words(tf.constant(captions[start:start + batch_size])).flat_values.numpy()
        counts.update(words.tolist())
    ranked = sorted(((w.decode("utf-8"), c) for w, c in counts.items() if c >= min_count), key=lambda x: (-x[1], x[0]))
    if max_size is not None:
        ranked = ranked[:max_size]
    if not ranked:
        raise ValueError("The training captions contain no words; cannot build a vocabulary.")
    return [word for word, _ in ranked]


@keras.saving.register_keras_serializable(package="kitm")
class CaptionTokenizer(keras.layers.Layer):
    """Raw caption strings [N] -> int32 token ids [N, max_length] (0-padded, truncated).

    Args:
        vocabulary: list of words (ids 2.. in order), or a path to a file with one word per line.
        max_length: tokens kept per caption.
    """

    def __init__(self, vocabulary, max_length: int = 32, **kwargs):
        super().__init__(trainable=False, **kwargs)
        if isinstance(vocabulary, str):
            with tf.io.gfile.GFile(vocabulary) as handle:
                vocabulary = [line.rstrip("\n") for line in handle if line.rstrip("\n")]
        vocabulary = list(vocabulary)
        if max_length < 1:
            raise ValueError(f"max_length must be >= 1; got {max_length}.")
        self.vocabulary = vocabulary
        self.max_length = int(max_length)
        self.lookup = keras.layers.StringLookup(
            vocabulary=vocabulary, mask_token=PAD_TOKEN, oov_token=UNKNOWN_TOKEN, output_mode="int")
        # No weights: the vocabulary is a lookup table, ready as soon as it is given.
        self.built = True

    @property
    def vocabulary_size(self) -> int:
        """Number of ids, padding and unknown included."""
        return len(self.vocabulary) + 2

    def call(self, texts):
        return self.tf_tokenize(texts)

    @tf.autograph.experimental.do_not_convert  # as split_words: plain TensorFlow ops, no Python control flow
    def tf_tokenize(self, texts):
        """`call` in TensorFlow ops alone, for tf.data maps on every Keras backend: a Keras layer called there on JAX
        or PyTorch converts its string inputs to that backend's arrays, which cannot hold strings."""
        words = split_words(texts)
        ids = tf.ragged.map_flat_values(self.lookup, words)
        return tf.cast(ids.to_tensor(default_value=0, shape=[None, self.max_length]), tf.int32)

    def save_vocabulary(self, path: str) -> None:
        """One word per line, written to a temporary name and renamed.

        Local paths go through `kitm.files.write_text_atomically`, kitm's one atomic writer. Paths with a scheme
        (gs://, hdfs://, ...) keep the same temporary-then-rename through tf.io.gfile, which reaches those file
        systems; Python's os.replace cannot.
        """
        text = "\n".join(self.vocabulary) + "\n"
        if "://" not in str(path):
            write_text_atomically(path, text)
            return
        tmp = path + ".tmp"
        with tf.io.gfile.GFile(tmp, "w") as handle:
            handle.write(text)
        tf.io.gfile.rename(tmp, path, overwrite=True)

    def get_config(self):
        config = super().get_config()
        config.update(vocabulary=self.vocabulary, max_length=self.max_length)
        config.pop("trainable", None)
        return config

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.max_length)


def token_lengths(token_ids: np.ndarray) -> np.ndarray:
    """Number of non-padding tokens per row."""
    return np.count_nonzero(np.asarray(token_ids), axis=-1)

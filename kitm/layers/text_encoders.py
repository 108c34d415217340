"""Text encoder: word embeddings and a GRU, bidirectional as in the four papers, or unidirectional as in the VSE++
reference code (fartashf/vsepp `EncoderText`)."""

from __future__ import annotations

import keras
from keras import layers, ops

from kitm.distribute.backend import on_jax, on_tensorflow
from kitm.ops.packed_gru import packed_gru


@keras.saving.register_keras_serializable(package="kitm")
class GRUTextEncoder(keras.layers.Layer):
    """Token ids [B, T] (0 = padding) -> [B, 2 * units]: the concatenated final states of a bidirectional GRU;
    with `bidirectional=False`, [B, units]: the final state of one forward GRU (the VSE++ reference's text encoder).

    The padding mask makes the final state that of each caption's last real word; a caption with no word
    (all padding) gives zeros.

    `trim_padding` (default): the GRU runs only up to the batch's last real token, not over the tokenizer's fixed
    width (32 ids, most of them padding for captions of ~11 words). A masked step passes the state through
    unchanged, so dropping the columns that are padding in every row gives the same states, bit for bit, in about a
    third of the steps; this is what PyTorch's `pack_padded_sequence` buys the papers' code. The trimmed width
    depends on the data, which XLA cannot compile, so a trimming encoder says `supports_jit = False` (Keras'
    `jit_compile="auto"` then leaves XLA off); build it with `trim_padding=False` to train under `jit_compile=True`.

    `recurrence`: "masked" runs Keras' GRU over every row of the (trimmed) width; "packed" skips the rows whose
    caption has ended (`kitm.ops.packed_gru`, PyTorch's packed sequences): sum(lengths) row-steps instead of
    B x the longest, on the same weights, equal to float rounding (tests/ops/test_packed_gru.py). Packed assumes
    the padding (id 0) trails each caption, as kitm's tokenizers write it, and is not XLA-compilable either.
    "auto" (default), the fastest of the two that fits the build: on TensorFlow packed where the encoder trims
    (data-dependent shapes, no XLA anyway) and masked where it was built for XLA (`trim_padding=False`); masked on
    the other backends, where "packed" is a masked scan of kitm's own and Keras' GRU is faster (on JAX's CPU step
    61 against 76 ms forward and backward for the demo's GRU, 504 against 579 ms at 512 units). docs/performance.md.

    On JAX, whose compiled steps need static shapes, neither trims nor packs: the padding is not trimmed (the same
    states, a masked step passing the state through) and "packed" runs `packed_gru`'s masked equivalent (equal to
    float rounding), so the encoder compiles there. On PyTorch trimming applies, "packed" is that masked equivalent.
    """

    def __init__(self, vocabulary_size: int, word_dim: int = 300, units: int = 512, bidirectional: bool = True,
                 trim_padding: bool = True, recurrence: str = "auto", **kwargs):
        super().__init__(**kwargs)
        self.vocabulary_size, self.word_dim, self.units = int(vocabulary_size), int(word_dim), int(units)
        self.bidirectional = bool(bidirectional)
        self.trim_padding = bool(trim_padding)
        if recurrence not in ("auto", "masked", "packed"):
            raise ValueError(f"recurrence must be 'auto', 'masked' or 'packed'; got {recurrence!r}.")
        # Resolved here, so that get_config (and a saved model) records the recurrence the weights trained with.
        if recurrence == "auto":
            recurrence = "packed" if self.trim_padding and on_tensorflow() else "masked"
        self.recurrence = recurrence
        self.supports_jit = on_jax() or (not self.trim_padding and self.recurrence == "masked")
        self.embedding = layers.Embedding(self.vocabulary_size, self.word_dim, mask_zero=True, name="words")
        if self.bidirectional:
            self.gru = layers.Bidirectional(layers.GRU(self.units), merge_mode="concat", name="bigru")
        else:
            self.gru = layers.GRU(self.units, name="gru")

    def build(self, input_shape):
        self.embedding.build(input_shape)
        self.gru.build(tuple(input_shape) + (self.word_dim,))
        self.built = True

    def call(self, token_ids, training=False):
        if self.trim_padding and not on_jax():  # a data-dependent width (class docstring)
            token_ids = self._trimmed(token_ids)
        embedded = self.embedding(token_ids)
        if self.recurrence == "packed":
            return self._packed(embedded, ops.sum(ops.cast(ops.not_equal(token_ids, 0), "int32"), axis=1))
        mask = self.embedding.compute_mask(token_ids)
        return self.gru(embedded, mask=mask, training=training)

    def _packed(self, embedded, lengths):
        """The GRU's final states through `packed_gru`, on the Keras GRU's own weights."""
        def final_state(gru, reverse=False):
            cell = gru.cell
            return packed_gru(embedded, lengths, cell.kernel, cell.recurrent_kernel, cell.bias, reverse=reverse)

        if not self.bidirectional:
            return final_state(self.gru)
        return ops.concatenate([final_state(self.gru.forward_layer),
                          final_state(self.gru.backward_layer, reverse=True)], axis=1)

    @staticmethod
    def _trimmed(token_ids):
        """token_ids[:, :w], w the last column holding a real token in any row (at least 1, so an all-padding batch
        still has a time step)."""
        token_ids = ops.convert_to_tensor(token_ids)
        positions = ops.arange(1, ops.shape(token_ids)[1] + 1, dtype="int32")
        last = ops.max(ops.where(ops.not_equal(token_ids, 0), positions[None, :], 0))
        return token_ids[:, :ops.maximum(last, 1)]

    def get_config(self):
        config = super().get_config()
        config.update(vocabulary_size=self.vocabulary_size, word_dim=self.word_dim, units=self.units,
                      bidirectional=self.bidirectional, trim_padding=self.trim_padding,
                      recurrence=self.recurrence)
        return config

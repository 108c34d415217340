"""Text encoder: word embeddings and a GRU, bidirectional as in the four papers, or unidirectional as in the VSE++
reference code (fartashf/vsepp `EncoderText`)."""

from __future__ import annotations

import keras
from keras import layers


@keras.saving.register_keras_serializable(package="kitm")
class GRUTextEncoder(keras.layers.Layer):
    """Token ids [B, T] (0 = padding) -> [B, 2 * units]: the concatenated final states of a bidirectional GRU;
    with `bidirectional=False`, [B, units]: the final state of one forward GRU (the VSE++ reference's text encoder).

    The padding mask makes the final state that of each caption's last real word; a caption with no word
    (all padding) gives zeros.
    """

    def __init__(self, vocabulary_size: int, word_dim: int = 300, units: int = 512, bidirectional: bool = True,
                 **kwargs):
        super().__init__(**kwargs)
        self.vocabulary_size, self.word_dim, self.units = int(vocabulary_size), int(word_dim), int(units)
        self.bidirectional = bool(bidirectional)
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
        embedded = self.embedding(token_ids)
        mask = self.embedding.compute_mask(token_ids)
        return self.gru(embedded, mask=mask, training=training)

    def get_config(self):
        config = super().get_config()
        config.update(vocabulary_size=self.vocabulary_size, word_dim=self.word_dim, units=self.units,
                      bidirectional=self.bidirectional)
        return config

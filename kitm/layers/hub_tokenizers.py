"""Captions -> a keras-hub text backbone's inputs, in the tf.data pipeline and inside the exported SavedModel.

`HubCaptionTokenizer` wraps the preset's own tokenizer (CLIP's byte-pair encoding, BERT's WordPiece, SigLIP's
SentencePiece) and packs each caption the way the family's keras-hub preprocessor does:
- clip: lower-cased (CLIPPreprocessor's `to_lower`), start and end tokens, padded with the tokenizer's pad id;
- siglip: canonicalised as big_vision does (lower case, punctuation removed, spaces collapsed), end token only;
- bert: [CLS] ... [SEP], padded with [PAD], segment ids 0 and a padding mask.
It returns the backbone's input dict with int32 [N, sequence_length] entries ({"token_ids"} for CLIP and SigLIP;
{"token_ids", "segment_ids", "padding_mask"} for BERT), which the pipeline puts at x["tokens"] and
`kitm.layers.hub_towers.HubTextTower` reads. Everything is TensorFlow and tensorflow-text ops, so the SavedModel
runs it without keras-hub.
"""

from __future__ import annotations

import keras
import tensorflow as tf

_SIGLIP_PUNCTUATION = r"!|\"|#|\$|%|&|\\|'|\(|\)|\*|\+|,|-|\.|/|:|;|<|=|>|\?|@|\[|\\|\]|\^|_|`|{|\||}|~"


@keras.saving.register_keras_serializable(package="kitm")
class HubCaptionTokenizer(keras.layers.Layer):
    """Raw caption strings [N] -> {input name: int32 [N, sequence_length]} (module docstring).

    Args:
        tokenizer: the preset's keras-hub tokenizer.
        family: clip, siglip or bert.
        sequence_length: tokens per caption, start and end tokens included (longer captions are truncated).
    """

    def __init__(self, tokenizer, family: str, sequence_length: int, **kwargs):
        super().__init__(trainable=False, **kwargs)
        if isinstance(tokenizer, dict):
            tokenizer = keras.saving.deserialize_keras_object(tokenizer)
        from keras_hub.layers import StartEndPacker

        self.tokenizer = tokenizer
        self.family = str(family)
        self.sequence_length = int(sequence_length)
        if self.sequence_length < 2:
            raise ValueError(f"sequence_length must be >= 2 (start/end tokens); got {sequence_length}.")
        self.packer = StartEndPacker(
            start_value=None if self.family == "siglip" else tokenizer.start_token_id,
            end_value=tokenizer.end_token_id, pad_value=tokenizer.pad_token_id,
            sequence_length=self.sequence_length, return_padding_mask=True)
        self.built = True

    @property
    def vocabulary_size(self) -> int:
        return int(self.tokenizer.vocabulary_size())

    @property
    def input_names(self) -> tuple[str, ...]:
        return ("padding_mask", "segment_ids", "token_ids") if self.family == "bert" else ("token_ids",)

    def call(self, texts):
        return self.tf_tokenize(texts)

    def tf_tokenize(self, texts):
        """`call` in TensorFlow ops alone, for tf.data maps on every Keras backend (as CaptionTokenizer's)."""
        texts = tf.convert_to_tensor(texts, tf.string)
        if self.family == "clip":
            texts = tf.strings.lower(texts)
        elif self.family == "siglip":
            texts = tf.strings.lower(texts)
            texts = tf.strings.regex_replace(texts, _SIGLIP_PUNCTUATION, "")
            texts = tf.strings.strip(tf.strings.regex_replace(texts, r"\s+", " "))
        token_ids, padding_mask = self.packer(self.tokenizer(texts))
        token_ids = tf.cast(token_ids, tf.int32)
        if self.family != "bert":
            return {"token_ids": token_ids}
        return {"token_ids": token_ids, "segment_ids": tf.zeros_like(token_ids),
                "padding_mask": tf.cast(padding_mask, tf.int32)}

    def get_config(self):
        config = super().get_config()
        config.update(tokenizer=keras.saving.serialize_keras_object(self.tokenizer), family=self.family,
                      sequence_length=self.sequence_length)
        config.pop("trainable", None)
        return config

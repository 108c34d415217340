"""Embedding whole splits for evaluation (batched, compiled, with a progress bar)."""

from __future__ import annotations

import weakref

import numpy as np
import tensorflow as tf
from tqdm.auto import tqdm

# One compiled encoder per model: evaluation runs every few epochs, and a new tf.function each time would
# retrace (and warn) on every call.
_ENCODERS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _encoder(model):
    if model not in _ENCODERS:
        @tf.function(reduce_retracing=True)
        def encode(images, tokens):
            shape = tf.shape(tokens)
            text = model.encode_text(tf.reshape(tokens, [-1, shape[-1]]), training=False)
            return model.encode_image(images, training=False), text

        _ENCODERS[model] = encode
    return _ENCODERS[model]


def embed_dataset(model, dataset: tf.data.Dataset, *, progress: bool = False, total: int | None = None):
    """Embed every image and every caption of an `evaluation_dataset`.

    Returns (image_embeddings [N, D], text_embeddings [N * C, D], image_index [N]); caption j of image i
    is row i * C + j, the layout `kitm.eval.evaluate` expects.
    """
    encode = _encoder(model)
    images, texts, indices = [], [], []
    bar = tqdm(total=total, desc="embedding", unit="image", disable=not progress, leave=False)
    for batch in dataset:
        image_embeddings, text_embeddings = encode(batch["image"], batch["tokens"])
        images.append(image_embeddings.numpy())
        texts.append(text_embeddings.numpy())
        indices.append(batch["image_index"].numpy())
        bar.update(len(indices[-1]))
    bar.close()
    if not images:
        raise ValueError("The evaluation dataset is empty.")
    return np.concatenate(images), np.concatenate(texts), np.concatenate(indices)


def similarity_matrix(image_embeddings: np.ndarray, text_embeddings: np.ndarray) -> np.ndarray:
    """[N images, M captions] cosine similarities (embeddings are unit rows)."""
    return image_embeddings @ text_embeddings.T

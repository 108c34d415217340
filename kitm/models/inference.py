"""Embedding whole splits for evaluation (batched, compiled, with a progress bar), with test-time crop averaging.

Test-time crops (Malali & Keller, Sec. 4.1: 20 random crops per test image, after Huang et al.): an image given as N
crops [B, N, H, W, 3] (`kitm.data.pipeline.evaluation_dataset` with `test_crops=N`) is embedded as

    e(image) = normalize(mean_j e(crop_j)),   e(crop_j) the model's unit-norm image embedding of crop j,

all B * N crops going through the encoder as one batch. Images [B, H, W, 3] (N = 1) or features are
embedded as before.
"""

from __future__ import annotations

import weakref

import numpy as np
import tensorflow as tf
from kitm.progress import progress_bar as tqdm

# One compiled encoder per model and image rank (4: images, 5: test-time crops, 2: features): evaluation runs
# every few epochs, and a new tf.function each time would retrace (and warn) on every call; one function
# for two ranks would relax its signature to an unknown rank, which the encoders cannot build on.
_ENCODERS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def encode_images(model, images, training=False):
    """Unit-norm image embeddings [B, D]; crops [B, N, H, W, 3] are averaged (module docstring)."""
    if images.shape.rank != 5:
        return model.encode_image(images, training=training)
    shape = tf.shape(images)
    flat = tf.reshape(images, tf.concat([[shape[0] * shape[1]], shape[2:]], axis=0))
    embeddings = model.encode_image(flat, training=training)  # [B * N, D], crop-major within an image
    embeddings = tf.reshape(embeddings, [shape[0], shape[1], -1])
    return tf.math.l2_normalize(tf.reduce_mean(embeddings, axis=1), axis=-1)


def paired_encoder(model, rank: int):
    """The model's compiled (images, tokens [..., L]) -> (image embeddings, caption embeddings) function for images
    of rank `rank`, one per model and rank, kept across calls (see `_ENCODERS`)."""
    per_rank = _ENCODERS.setdefault(model, {})
    if rank not in per_rank:
        @tf.function(reduce_retracing=True)
        def encode(images, tokens):
            # tokens: a tensor, or a dict of them (a keras-hub text tower's inputs)
            flat = tf.nest.map_structure(lambda ids: tf.reshape(ids, [-1, tf.shape(ids)[-1]]), tokens)
            text = model.encode_text(flat, training=False)
            return encode_images(model, images), text

        per_rank[rank] = encode
    return per_rank[rank]


def embed_dataset(model, dataset: tf.data.Dataset, *, progress: bool = False, total: int | None = None):
    """Embed every image and every caption of an `evaluation_dataset`.

    Returns (image_embeddings [N, D], text_embeddings [N * C, D], image_index [N]); caption j of image i
    is row i * C + j, the layout `kitm.eval.evaluate` expects.
    """
    images, texts, indices = [], [], []
    bar = tqdm(total=total, desc="embedding", unit="image", disable=not progress, leave=False)
    for batch in dataset:
        encode = paired_encoder(model, batch["image"].shape.rank)
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

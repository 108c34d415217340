"""Embedding whole splits for evaluation (batched, compiled, with a progress bar), with test-time crop averaging.

Test-time crops (Malali & Keller, Sec. 4.1: 20 random crops per test image, after Huang et al.): an image given as N
crops [B, N, H, W, 3] (`kitm.data.pipeline.evaluation_dataset` with `test_crops=N`) is embedded as

    e(image) = normalize(mean_j e(crop_j)),   e(crop_j) the model's unit-norm image embedding of crop j,

all B * N crops going through the encoder as one batch. Images [B, H, W, 3] (N = 1) or features are
embedded as before.

The datasets are tf.data's (the input pipeline is TensorFlow's on every backend); the model runs on the Keras
backend: compiled with tf.function on TensorFlow, called eagerly on the others, each batch handed over as numpy.
"""

from __future__ import annotations

import weakref

import keras
import numpy as np
from keras import ops

from kitm.distribute.backend import compiled, on_tensorflow
from kitm.progress import progress_bar as tqdm

# One compiled encoder per model and image rank (4: images, 5: test-time crops, 2: features): evaluation runs
# every few epochs, and a new tf.function each time would retrace (and warn) on every call; one function
# for two ranks would relax its signature to an unknown rank, which the encoders cannot build on.
_ENCODERS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def encode_images(model, images, training=False):
    """Unit-norm image embeddings [B, D]; crops [B, N, H, W, 3] are averaged (module docstring)."""
    if len(images.shape) != 5:
        return model.encode_image(images, training=training)
    shape = ops.shape(images)
    flat = ops.reshape(images, (-1,) + tuple(shape[2:]))  # [B * N, H, W, 3]
    embeddings = model.encode_image(flat, training=training)  # [B * N, D], crop-major within an image
    embeddings = ops.mean(ops.reshape(embeddings, (shape[0], shape[1], -1)), axis=1)
    # tf.math.l2_normalize's formula (epsilon 1e-12 on the squared norm)
    return embeddings * ops.rsqrt(ops.maximum(ops.sum(ops.square(embeddings), axis=-1, keepdims=True), 1e-12))


def paired_encoder(model, rank: int):
    """The model's compiled (images, tokens [..., L]) -> (image embeddings, caption embeddings) function for images
    of rank `rank`, one per model and rank, kept across calls (see `_ENCODERS`)."""
    per_rank = _ENCODERS.setdefault(model, {})
    if rank not in per_rank:
        def encode(images, tokens):
            # tokens: a tensor, or a dict of them (a keras-hub text tower's inputs)
            flat = keras.tree.map_structure(lambda ids: ops.reshape(ids, (-1, ops.shape(ids)[-1])), tokens)
            text = model.encode_text(flat, training=False)
            return encode_images(model, images), text

        per_rank[rank] = compiled(encode, reduce_retracing=True)
    return per_rank[rank]


def embed_dataset(model, dataset, *, progress: bool = False, total: int | None = None):
    """Embed every image and every caption of an `evaluation_dataset`.

    Returns (image_embeddings [N, D], text_embeddings [N * C, D], image_index [N]); caption j of image i
    is row i * C + j, the layout `kitm.eval.evaluate` expects.
    """
    images, texts, indices = [], [], []
    bar = tqdm(total=total, desc="embedding", unit="image", disable=not progress, leave=False)
    tensors_as_they_come = on_tensorflow()
    for batch in dataset:
        if not tensors_as_they_come:  # tf.data gives TensorFlow tensors; the other backends take numpy
            batch = keras.tree.map_structure(np.asarray, dict(batch))
        encode = paired_encoder(model, len(batch["image"].shape))
        image_embeddings, text_embeddings = encode(batch["image"], batch["tokens"])
        images.append(ops.convert_to_numpy(image_embeddings))
        texts.append(ops.convert_to_numpy(text_embeddings))
        indices.append(np.asarray(batch["image_index"]))
        bar.update(len(indices[-1]))
    bar.close()
    if not images:
        raise ValueError("The evaluation dataset is empty.")
    return np.concatenate(images), np.concatenate(texts), np.concatenate(indices)


def similarity_matrix(image_embeddings: np.ndarray, text_embeddings: np.ndarray) -> np.ndarray:
    """[N images, M captions] cosine similarities (embeddings are unit rows)."""
    return image_embeddings @ text_embeddings.T

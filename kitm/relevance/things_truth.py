"""The things world's truth relevance: the exact relevance of any caption to any image, from their facts.

The things world (`kitm.data.synthetic.things`) keeps every scene's and caption's facts (`kitm.relevance.
things_facts` defines their format), so relevance is known exactly (docs/methods.md#truth). `things_relevance`
(NumPy) serves evaluation and the tests; `things_relevance_tf` (TensorFlow) builds each training batch's matrix
inside the tf.data graph.

Definition
----------
For a caption with an optional setting g, mentions m (1 or 2) and an optional relation, and an image with setting S
and objects o (absent objects excluded):

- the noun fits: ``fits(m, o) = 1`` when m's noun is o's category or o's supercategory, else 0;
- the count: ``n(m)`` = the number of objects the noun fits; ``kappa(m) = [count(m) = n(m)]``, or
  ``[n(m) >= 3]`` for "several";
- object match ``s(m, o) = fits(m, o) * (1 + sum_{a stated} [m_a = o_a] + [count stated] kappa(m)) /
  (1 + |stated attributes| + [count stated])`` over the attributes colour, size and pattern;
- mention term ``t(m) = max_o s(m, o)``;
- relation term, when relation REL is stated: ``r = max_{o1 != o2, REL(o1, o2)} s(m0, o1) * s(m1, o2)``, 0 when no
  ordered pair of distinct objects has REL;
- setting term ``[g = S]`` when g is stated;
- ``relevance = (sum_m t(m) + [relation] r + [setting stated] [g = S]) / (mentions + [relation] + [setting])``.

So a caption about a dog scores 0 on its mention for an image without a dog (the noun gates the attributes), a red
car against a blue car scores 1/2, and "two dogs in a park" against a park with one dog scores (1/2 + 1) / 2. Every
caption has relevance exactly 1.0 to its own image. ``result[m, k]`` is the relevance of caption k to image m.
"""

from __future__ import annotations

import numpy as np

from kitm.relevance.things_facts import (ATTRIBUTE_VOCAB_SIZES, CAPTION_FACT_WIDTH, CATEGORIES, CATEGORY_SUPER_INDEX,
                                         COUNT_SEVERAL, MAX_OBJECTS, MENTION_WIDTH, NUM_NOUNS, RELATIONS,
                                         SCENE_FACT_FIELDS, near_reach, relation_gap, validate_caption_facts,
                                         validate_scene_facts)

_ATTRIBUTE_WIDTH = sum(ATTRIBUTE_VOCAB_SIZES)
_ATTRIBUTE_OFFSETS = tuple(int(v) for v in np.cumsum((0,) + ATTRIBUTE_VOCAB_SIZES[:-1]))


def _attribute_codes_np(values: np.ndarray) -> np.ndarray:
    """[..., 3] colour, size, pattern (-1 = not stated) -> [..., 17] concatenated one-hot codes (-1 -> zeros)."""
    code = np.zeros(values.shape[:-1] + (_ATTRIBUTE_WIDTH,), dtype=np.float32)
    for field, (offset, size) in enumerate(zip(_ATTRIBUTE_OFFSETS, ATTRIBUTE_VOCAB_SIZES)):
        code[..., offset:offset + size] = values[..., field, None] == np.arange(size)
    return code


def _object_noun_codes_np(category: np.ndarray) -> np.ndarray:
    """[M, O] categories (-1 absent) -> [M, O, nouns]: 1 at the category and at its supercategory's noun."""
    present = category >= 0
    safe = np.where(present, category, 0)
    code = (safe[..., None] == np.arange(NUM_NOUNS)).astype(np.float32)
    code += (len(CATEGORIES) + CATEGORY_SUPER_INDEX[safe])[..., None] == np.arange(NUM_NOUNS)
    return code * present[..., None]


def _relations_hold_np(scene: np.ndarray, image_size: int) -> np.ndarray:
    """bool [M, O, O, len(RELATIONS) + 1]: object a REL object b; False when either is absent or a == b. The extra
    last relation is never true, so a caption's relation -1 selects False."""
    x, y = scene[:, :, 5].astype(np.float64), scene[:, :, 6].astype(np.float64)
    xa, xb, ya, yb = x[:, :, None], x[:, None, :], y[:, :, None], y[:, None, :]
    gap, reach = relation_gap(image_size), near_reach(image_size)
    near = np.maximum(np.abs(xa - xb), np.abs(ya - yb)) <= reach
    holds = np.stack([xa < xb - gap, xa > xb + gap, ya < yb - gap, ya > yb + gap, near, np.zeros_like(near)], -1)
    present = scene[:, :, 1] >= 0
    valid = present[:, :, None] & present[:, None, :] & ~np.eye(scene.shape[1], dtype=bool)
    return holds & valid[..., None]


def _mention_matches_np(object_nouns, object_attributes, mention: np.ndarray) -> np.ndarray:
    """s(m, o) for every image, object and caption: float32 [O, M, K] from a mention block [K, 5]."""
    noun_code = (mention[:, 0, None] == np.arange(NUM_NOUNS)).astype(np.float32)  # [K, nouns]
    fits = np.einsum("mon,kn->omk", object_nouns, noun_code)  # [O, M, K]
    count = mention[:, 1]
    count_stated = (count >= 0).astype(np.float32)
    present_count = fits.sum(axis=0)  # n(m) [M, K]
    kappa = (present_count == count) | ((count == COUNT_SEVERAL) & (present_count >= 3))
    attribute_code = _attribute_codes_np(mention[:, 2:])  # [K, 17]
    matches = np.einsum("moa,ka->omk", object_attributes, attribute_code)
    stated = (mention[:, 2:] >= 0).sum(axis=1).astype(np.float32)
    return fits * (1.0 + matches + count_stated * kappa) / (1.0 + stated + count_stated)


def things_relevance(scene_facts, caption_facts, *, image_size: int = 64) -> np.ndarray:
    """Exact relevance of every caption to every image of the things world (module docstring, "Definition").

    Args:
        scene_facts: int [M, num_objects, 7] (``SCENE_FACT_FIELDS``); absent objects all -1.
        caption_facts: int [K, 12] (``CAPTION_FACT_WIDTH``).
        image_size: the rendered image side, which sets the relation distances. Pass the world's ``image_size``.

    Returns:
        float64 [M, K]; ``result[m, k]`` is the relevance of caption k to image m. Memory: a few [O, M, K] arrays
        (`kitm.eval.relevance_sources.truth_relevance_matrix` chunks the captions).

    Example: "a red car on a street" against a street holding only a blue car gives (1/2 + 1) / 2 = 3/4.
    """
    scene = validate_scene_facts(scene_facts)
    caption = validate_caption_facts(caption_facts)
    object_nouns = _object_noun_codes_np(scene[..., 1])
    object_attributes = _attribute_codes_np(scene[..., 2:5])
    object_attributes *= (scene[..., 1:2] >= 0)
    mentions = caption[:, 1:1 + 2 * MENTION_WIDTH].reshape(-1, 2, MENTION_WIDTH)
    first = _mention_matches_np(object_nouns, object_attributes, mentions[:, 0])
    second = _mention_matches_np(object_nouns, object_attributes, mentions[:, 1])
    relevance = first.max(axis=0).astype(np.float64)
    has_second = mentions[:, 1, 0] >= 0
    relevance += has_second * second.max(axis=0)
    relation = caption[:, -1]
    if (relation >= 0).any():
        holds = _relations_hold_np(scene, image_size)[..., relation]  # [M, O, O, K]
        pairs = first[:, None] * second[None, :]  # [O, O, M, K]
        relevance += (pairs * np.moveaxis(holds, (1, 2), (0, 1))).max(axis=(0, 1))
    setting = caption[:, 0]
    relevance += (setting >= 0) * (scene[:, :1, 0] == setting[None, :])
    parts = 1.0 + has_second + (relation >= 0) + (setting >= 0)
    return relevance / parts


def _one_hot_tf(values, size):
    import tensorflow as tf

    return tf.one_hot(values, size, dtype=tf.float32)  # -1 -> zeros


def _mention_matches_tf(object_nouns, object_attributes, mention):
    """`_mention_matches_np` in TensorFlow ops: [O, M, K]."""
    import tensorflow as tf

    fits = tf.einsum("mon,kn->omk", object_nouns, _one_hot_tf(mention[:, 0], NUM_NOUNS))
    count = mention[:, 1]
    count_stated = tf.cast(count >= 0, tf.float32)
    present_count = tf.reduce_sum(fits, axis=0)
    kappa = tf.logical_or(tf.equal(present_count, tf.cast(count, tf.float32)),
                          tf.logical_and(tf.equal(count, COUNT_SEVERAL)[None, :], present_count >= 3.0))
    attribute_code = tf.concat([_one_hot_tf(mention[:, 2 + a], size)
                                for a, size in enumerate(ATTRIBUTE_VOCAB_SIZES)], axis=-1)
    matches = tf.einsum("moa,ka->omk", object_attributes, attribute_code)
    stated = tf.reduce_sum(tf.cast(mention[:, 2:] >= 0, tf.float32), axis=1)
    return fits * (1.0 + matches + count_stated * tf.cast(kappa, tf.float32)) / (1.0 + stated + count_stated)


def things_relevance_tf(scene_facts, caption_facts, *, image_size: int = 64):
    """``things_relevance`` in TensorFlow ops: float32 [M, K], for tf.data map functions and ``tf.function``.

    Same definition and algorithm as ``things_relevance``. M and K may be dynamic; the object axis must be known
    statically or is taken to be ``MAX_OBJECTS``. Inputs are not validated beyond their rank and last dimension
    (graph mode), so feed facts the things world produced.
    """
    import tensorflow as tf

    scene = tf.cast(tf.convert_to_tensor(scene_facts), tf.int32)
    caption = tf.cast(tf.convert_to_tensor(caption_facts), tf.int32)
    objects = scene.shape[1] if scene.shape.rank is not None and scene.shape[1] is not None else MAX_OBJECTS
    scene = tf.ensure_shape(tf.reshape(scene, [-1, objects, len(SCENE_FACT_FIELDS)]),
                            [None, objects, len(SCENE_FACT_FIELDS)])
    caption = tf.ensure_shape(caption, [None, CAPTION_FACT_WIDTH])
    category = scene[..., 1]
    present = category >= 0
    safe = tf.where(present, category, 0)
    object_nouns = (_one_hot_tf(safe, NUM_NOUNS)
                    + _one_hot_tf(len(CATEGORIES) + tf.gather(tf.constant(CATEGORY_SUPER_INDEX, tf.int32), safe),
                                  NUM_NOUNS)) * tf.cast(present, tf.float32)[..., None]
    object_attributes = tf.concat([_one_hot_tf(scene[..., 2 + a], size)
                                   for a, size in enumerate(ATTRIBUTE_VOCAB_SIZES)], axis=-1)
    mentions = tf.reshape(caption[:, 1:1 + 2 * MENTION_WIDTH], [-1, 2, MENTION_WIDTH])
    first = _mention_matches_tf(object_nouns, object_attributes, mentions[:, 0])
    second = _mention_matches_tf(object_nouns, object_attributes, mentions[:, 1])
    has_second = tf.cast(mentions[:, 1, 0] >= 0, tf.float32)
    relation = caption[:, -1]
    relation_code = _one_hot_tf(relation, len(RELATIONS))  # [K, 5]; -1 -> zeros
    x, y = tf.cast(scene[..., 5], tf.float32), tf.cast(scene[..., 6], tf.float32)
    gap, reach = relation_gap(image_size), near_reach(image_size)
    best_pair = tf.zeros_like(first[0])
    for a in range(objects):
        for b in range(objects):
            if a == b:
                continue
            holds = tf.stack([x[:, a] < x[:, b] - gap, x[:, a] > x[:, b] + gap, y[:, a] < y[:, b] - gap,
                              y[:, a] > y[:, b] + gap,
                              tf.maximum(tf.abs(x[:, a] - x[:, b]), tf.abs(y[:, a] - y[:, b])) <= reach], axis=1)
            holds = tf.logical_and(holds, tf.logical_and(present[:, a], present[:, b])[:, None])
            holds = tf.matmul(tf.cast(holds, tf.float32), relation_code, transpose_b=True)  # [M, K]
            best_pair = tf.maximum(best_pair, first[a] * second[b] * holds)
    setting = caption[:, 0]
    setting_match = tf.cast(tf.equal(scene[:, :1, 0], setting[None, :]), tf.float32)
    setting_stated = tf.cast(setting >= 0, tf.float32)
    total = (tf.reduce_max(first, axis=0) + has_second * tf.reduce_max(second, axis=0) + best_pair
             + setting_stated * setting_match)
    parts = 1.0 + has_second + tf.cast(relation >= 0, tf.float32) + setting_stated
    return total / parts

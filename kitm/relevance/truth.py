"""Truth relevance: the exact relevance of any caption to any image of the synthetic world, from their facts.

The synthetic world (`kitm.data.synthetic`) keeps every scene's and caption's facts (`kitm.relevance.scene_facts`
defines their format), so relevance is known exactly (docs/methods.md#truth): the yardstick the other relevance
sources (CIDEr-D, SBERT) and the losses are judged against. `truth_relevance` (NumPy) serves evaluation and the
tests; `truth_relevance_tf` (TensorFlow) builds each training batch's matrix inside the tf.data graph.

Definition
----------
For a caption with mentions m (1 or 2) and an optional relation, and an image with objects o (absent objects
excluded):

- attribute match ``s(m, o) = |{a stated in m : m_a = o_a}| / |{a stated in m}|`` over (shape, colour, size, column,
  row); shape is always stated;
- mention term ``t(m) = max_o s(m, o)`` (0 for an image without objects);
- relation term, when relation REL is stated:
  ``r = max_{o1 != o2, REL(o1, o2)} s(m0, o1) * s(m1, o2)``, 0 when no ordered pair of distinct objects has REL;
- ``relevance = (sum_m t(m) + r) / (number of mentions + [relation stated])``, in [0, 1].

Every caption has relevance exactly 1.0 to its own image. The relevance of caption k to image m is
``result[m, k]`` (images by captions, the orientation of the batch matrices in docs/methods.md#notation).
"""

from __future__ import annotations

import numpy as np

from kitm.relevance.scene_facts import (CAPTION_FACT_WIDTH, MAX_OBJECTS, MENTION_WIDTH, RELATIONS, SCENE_FACT_FIELDS,
                                        VOCAB_SIZES, relation_gap, validate_caption_facts, validate_scene_facts)

# Offsets of each mention field in the concatenated one-hot attribute code used by the relevance kernels.
_VOCAB_OFFSETS = tuple(int(v) for v in np.cumsum((0,) + VOCAB_SIZES[:-1]))
_CODE_WIDTH = sum(VOCAB_SIZES)


def _one_hot_codes_np(values: np.ndarray) -> np.ndarray:
    """[..., 5] attribute indices (-1 = unknown) -> [..., 19] concatenated one-hot codes (unknown -> zeros).

    float32 is exact here: the codes are 0/1 and their dot products count at most 5 matches.
    """
    code = np.zeros(values.shape[:-1] + (_CODE_WIDTH,), dtype=np.float32)
    for field, (offset, size) in enumerate(zip(_VOCAB_OFFSETS, VOCAB_SIZES)):
        code[..., offset : offset + size] = values[..., field, None] == np.arange(size)
    return code


def _relations_hold_np(scene: np.ndarray, gap: float) -> np.ndarray:
    """bool [M, O, O, len(RELATIONS) + 1]: object a REL object b; False when either is absent or a == b.

    The extra last relation is never true, so indexing it with a caption's relation -1 selects False.
    """
    x = scene[:, :, 5].astype(np.float64)
    y = scene[:, :, 6].astype(np.float64)
    xa, xb, ya, yb = x[:, :, None], x[:, None, :], y[:, :, None], y[:, None, :]
    never = np.zeros_like(xa < xb)
    holds = np.stack([xa < xb - gap, xa > xb + gap, ya < yb - gap, ya > yb + gap, never], axis=-1)
    present = scene[:, :, 0] >= 0
    valid = present[:, :, None] & present[:, None, :] & ~np.eye(scene.shape[1], dtype=bool)
    return holds & valid[..., None]


def _best_matches_np(object_codes: np.ndarray, mention_codes: np.ndarray) -> np.ndarray:
    """max over objects o of the match count of each mention: float32 [M, K] from [M, O, 19] and [K, 19]."""
    best = object_codes[:, 0] @ mention_codes.T
    for o in range(1, object_codes.shape[1]):
        np.maximum(best, object_codes[:, o] @ mention_codes.T, out=best)
    return best


def truth_relevance(scene_facts, caption_facts, *, image_size: int = 64) -> np.ndarray:
    """Exact relevance of every caption to every image of the synthetic world (module docstring, "Definition").

    ``relevance = (sum_m max_o s(m, o) + r) / (num_mentions + [relation])`` with the attribute match
    ``s(m, o)`` = share of m's stated attributes that o has, and ``r`` the best ``s(m0, o1) * s(m1, o2)`` over
    ordered pairs of distinct objects with ``REL(o1, o2)`` (docs/methods.md#truth; defined in the module docstring).

    Match counts come from matrix products of one-hot attribute codes, one per object (and per ordered object
    pair for the relation term, over the captions that state one), so memory stays a few [M, K] arrays.

    Args:
        scene_facts: int [M, num_objects, 7] (``SCENE_FACT_FIELDS``); absent objects all -1.
        caption_facts: int [K, 11] (``CAPTION_FACT_WIDTH``).
        image_size: the rendered image side, which sets the relation gap ``image_size / 8``. Pass the world's
            ``image_size`` when it is not 64.

    Returns:
        float64 [M, K]; ``result[m, k]`` is the relevance of caption k to image m.

    Example: caption "a small red circle" (shape, colour, size stated) against an image holding only a large red
    circle gives 2/3.
    """
    scene = validate_scene_facts(scene_facts)
    caption = validate_caption_facts(caption_facts)
    num_objects = scene.shape[1]
    mentions = caption[:, : 2 * MENTION_WIDTH].reshape(-1, 2, MENTION_WIDTH)
    first_codes = _one_hot_codes_np(mentions[:, 0])  # [K, 19]
    second_codes = _one_hot_codes_np(mentions[:, 1])
    object_codes = _one_hot_codes_np(scene[..., :MENTION_WIDTH])  # [M, O, 19]; absent -> zeros, never match
    stated = (mentions != -1).sum(axis=-1).astype(np.float64)  # [K, 2]
    relation = caption[:, -1]

    relevance = _best_matches_np(object_codes, first_codes) / stated[:, 0]
    second = np.flatnonzero(mentions[:, 1, 0] >= 0)
    if second.size:
        relevance[:, second] += _best_matches_np(object_codes, second_codes[second]) / stated[second, 1]
    related = np.flatnonzero(relation >= 0)
    if related.size:
        holds = _relations_hold_np(scene, relation_gap(image_size))
        first = [object_codes[:, o] @ first_codes[related].T for o in range(num_objects)]
        second_matches = [object_codes[:, o] @ second_codes[related].T for o in range(num_objects)]
        best_pair = np.zeros((scene.shape[0], related.size), dtype=np.float32)
        for a in range(num_objects):
            for b in range(num_objects):
                if a != b:
                    pair = first[a] * second_matches[b]
                    pair[~holds[:, a, b][:, relation[related]]] = 0.0
                    np.maximum(best_pair, pair, out=best_pair)
        relevance[:, related] += best_pair / (stated[related, 0] * stated[related, 1])
    mention_count = 1.0 + (mentions[:, 1, 0] >= 0) + (relation >= 0)
    return relevance / mention_count


def _one_hot_codes_tf(values):
    import tensorflow as tf

    return tf.concat(
        [tf.one_hot(values[..., field], size, dtype=tf.float32) for field, size in enumerate(VOCAB_SIZES)],
        axis=-1,
    )


def truth_relevance_tf(scene_facts, caption_facts, *, image_size: int = 64):
    """``truth_relevance`` in TensorFlow ops: float32 [M, K], for tf.data map functions and ``tf.function``.

    Same definition and same algorithm as ``truth_relevance`` (see there and the module docstring). M and K may be
    dynamic; the object axis must be known statically or is taken to be ``MAX_OBJECTS``. Inputs are not
    validated beyond their rank and last dimension (graph mode), so feed facts the synthetic world produced.
    """
    import tensorflow as tf

    scene = tf.cast(tf.convert_to_tensor(scene_facts), tf.int32)
    caption = tf.cast(tf.convert_to_tensor(caption_facts), tf.int32)
    if scene.shape.rank is not None and scene.shape[1] is not None:
        scene = tf.ensure_shape(scene, [None, scene.shape[1], len(SCENE_FACT_FIELDS)])
    else:
        scene = tf.ensure_shape(scene, [None, MAX_OBJECTS, len(SCENE_FACT_FIELDS)])
    caption = tf.ensure_shape(caption, [None, CAPTION_FACT_WIDTH])
    num_objects = scene.shape[1]
    gap = tf.constant(relation_gap(image_size), tf.float32)

    mentions = tf.reshape(caption[:, : 2 * MENTION_WIDTH], [-1, 2, MENTION_WIDTH])
    mention_codes = _one_hot_codes_tf(mentions)  # [K, 2, 19]
    object_codes = _one_hot_codes_tf(scene[..., :MENTION_WIDTH])  # [M, O, 19]
    stated = tf.reduce_sum(tf.cast(mentions != -1, tf.float32), axis=-1)  # [K, 2]
    has_second = tf.cast(mentions[:, 1, 0] >= 0, tf.float32)
    has_relation = tf.cast(caption[:, -1] >= 0, tf.float32)

    # matches[j][o][m, k] = number of stated attributes of mention j of caption k that object o of image m has.
    matches = [
        [tf.matmul(object_codes[:, o], mention_codes[:, j], transpose_b=True) for o in range(num_objects)]
        for j in range(2)
    ]
    best0 = tf.math.reduce_max(tf.stack(matches[0]), axis=0)
    best1 = tf.math.reduce_max(tf.stack(matches[1]), axis=0)

    relation_code = tf.one_hot(caption[:, -1], len(RELATIONS), dtype=tf.float32)  # [K, 4]; -1 -> zeros
    present = scene[:, :, 0] >= 0
    x = tf.cast(scene[:, :, 5], tf.float32)
    y = tf.cast(scene[:, :, 6], tf.float32)
    best_pair = tf.zeros_like(best0)
    for a in range(num_objects):
        for b in range(num_objects):
            if a == b:
                continue
            holds = tf.stack(
                [x[:, a] < x[:, b] - gap, x[:, a] > x[:, b] + gap, y[:, a] < y[:, b] - gap, y[:, a] > y[:, b] + gap],
                axis=1,
            )
            holds = tf.logical_and(holds, tf.logical_and(present[:, a], present[:, b])[:, None])
            # [M, 4] x [4, K]: 1 where caption k's relation holds for (a, b) in image m; 0 for captions without one.
            holds = tf.matmul(tf.cast(holds, tf.float32), relation_code, transpose_b=True)
            best_pair = tf.maximum(best_pair, matches[0][a] * matches[1][b] * holds)

    n0, n1 = stated[:, 0], tf.maximum(stated[:, 1], 1.0)
    total = best0 / n0 + has_second * (best1 / n1) + has_relation * (best_pair / (n0 * n1))
    return total / (1.0 + has_second + has_relation)

"""SAM against numpy oracles written from docs/methods.md ("SAM") and a replica of the reference's tensor code."""

import numpy as np
import pytest
import tensorflow as tf

import kitm  # noqa: F401  (selects the TensorFlow backend)
import keras
from kitm.losses.sam import SAMLoss, sam_loss, sam_terms
from kitm.ops.similarity import negative_mask


def clip(x, max_margin):
    return x if max_margin is None else min(x, max_margin)


def matched_oracle(s, r, neg_caption, neg_image, tau, max_margin=1.0):
    """docs/methods.md, matched pairing, explicit loops; an index of -1 drops the term."""
    b = s.shape[0]
    rows = np.zeros(b)
    for p in range(b):
        n = neg_caption[p]
        if n >= 0:
            rows[p] += max(0.0, clip((r[p, p] - r[p, n]) / tau, max_margin) + s[p, n] - s[p, p])
        q, m = p, neg_image[p]
        if m >= 0:
            rows[p] += max(0.0, clip((r[q, q] - r[m, q]) / tau, max_margin) + s[m, q] - s[q, q])
    return rows


def reference_formula_oracle(s, r, n0, n1, tau, max_margin=1.0):
    """docs/methods.md's statement of what the reference computes, term by term."""
    b = s.shape[0]
    ms = [clip((r[k, k] - r[k, n1[k]]) / tau, max_margin) for k in range(b)]
    mi = [clip((r[k, k] - r[k, n0[k]]) / tau, max_margin) for k in range(b)]
    rows = np.zeros(b)
    for p in range(b):
        rows[p] = (max(0.0, ms[n0[p]] + s[p, n0[p]] - s[p, p])
                   + max(0.0, mi[n1[p]] + s[p, n1[p]] - s[n1[p], n1[p]]))
    return rows


def reference_code_replica(s, r, n0, n1, tau):
    """The reference's ContrastiveLossMetric.forward in numpy, broadcasting exactly as torch does."""
    b = s.shape[0]
    diagonal = np.diag(s)[:, None]
    cost_s = s - diagonal  # d1 = diagonal.expand_as(scores)
    cost_im = s - diagonal.T  # d2 = diagonal.t().expand_as(scores)
    pos_score = np.diag(r)
    neg_score_i2t = r[np.arange(b), n0]
    neg_score_t2i = r[np.arange(b), n1]
    margin_s = np.minimum((pos_score - neg_score_t2i) / tau, 1.0)
    margin_im = np.minimum((pos_score - neg_score_i2t) / tau, 1.0)
    cost_s = np.maximum(cost_s + margin_s, 0)  # [B, B] + [B]: broadcast along the last axis
    cost_im = np.maximum(cost_im + margin_im, 0)
    return cost_s[np.arange(b), n0] + cost_im[np.arange(b), n1]


def triplet_oracle(s, margin, image_index):
    b = s.shape[0]
    rows = np.zeros(b)
    for p in range(b):
        i2t = [max(0.0, margin + s[p, q] - s[p, p]) for q in range(b) if image_index[q] != image_index[p]]
        t2i = [max(0.0, margin + s[m, p] - s[p, p]) for m in range(b) if image_index[m] != image_index[p]]
        rows[p] = max(i2t, default=0.0) + max(t2i, default=0.0)
    return rows


def extreme_negative(values, allowed, want):
    """First index of the max/min of `values` over the allowed positions, -1 if none."""
    best = -1
    for j, ok in enumerate(allowed):
        if ok and (best < 0 or (values[j] > values[best] if want == "max" else values[j] < values[best])):
            best = j
    return best


S3 = np.array([[0.7, 0.2, 0.4], [0.3, 0.6, -0.1], [0.5, 0.0, 0.8]])
R3 = np.array([[4.0, 1.0, 2.0], [0.5, 3.0, 1.5], [2.5, 0.0, 5.0]])


def test_hand_computed_matched_example_of_the_docstring():
    s = np.array([[0.9, 0.5], [0.8, 0.6]])
    r = np.array([[3.0, 1.0], [2.0, 2.5]])
    np.testing.assert_allclose(sam_loss(s, r, [1, 0], [1, 0], tau=4).numpy(), [0.25, 0.6], atol=1e-12)


def test_hand_built_matched_case():
    # tau = 4, negative captions [2, 0, 1], negative images [1, 2, 0]:
    # i2t: p0 [(4-2)/4 + .4 - .7] = .2, p1 [(3-.5)/4 + .3 - .6] = .325, p2 [min(5/4, 1) + 0 - .8] = .2
    # t2i: q0 [(4-.5)/4 + .3 - .7] = .475, q1 [(3-0)/4 + 0 - .6] = .15, q2 [(5-2)/4 + .4 - .8] = .35
    got = sam_loss(S3, R3, [2, 0, 1], [1, 2, 0], tau=4).numpy()
    np.testing.assert_allclose(got, [0.675, 0.475, 0.55], atol=1e-12)


def test_reference_pairing_on_hand_built_case():
    # n0 = [2, 0, 1], n1 = [1, 2, 0], tau = 4.
    # ms[k] = min((R[k,k] - R[k,n1[k]]) / 4, 1) = [.75, .375, .625]
    # mi[k] = min((R[k,k] - R[k,n0[k]]) / 4, 1) = [.5, .625, 1.0 (clipped from 1.25)]
    # caption retrieval: p0 [ms[2] + .4 - .7] = .325, p1 [ms[0] + .3 - .6] = .45, p2 [ms[1] + 0 - .8]+ = 0
    # image retrieval:   p0 [mi[1] + s[0,1] - s[1,1]] = .225, p1 [mi[2] - .1 - .8] = .1, p2 [mi[0] + .5 - .7] = .3
    n0, n1 = [2, 0, 1], [1, 2, 0]
    caption_retrieval, image_retrieval = sam_terms(S3, R3, n0, n1, tau=4, pairing="reference")
    np.testing.assert_allclose(caption_retrieval.numpy(), [0.325, 0.45, 0.0], atol=1e-12)
    np.testing.assert_allclose(image_retrieval.numpy(), [0.225, 0.1, 0.3], atol=1e-12)
    np.testing.assert_allclose(sam_loss(S3, R3, n0, n1, tau=4, pairing="reference").numpy(),
                               reference_code_replica(S3, R3, np.array(n0), np.array(n1), 4.0), atol=1e-12)


@pytest.mark.parametrize("max_margin", [1.0, 0.3, None])
@pytest.mark.parametrize("tau", [0.5, 3.0, 10.0])
def test_matched_and_reference_match_oracles_on_random_inputs(tau, max_margin):
    rng = np.random.default_rng(7)
    for b in (1, 2, 5, 12):
        s = rng.uniform(-1, 1, size=(b, b))
        r = rng.uniform(0, 6, size=(b, b))  # negatives more relevant than the positive: negative margins
        nc = rng.integers(0, b, size=b)
        ni = rng.integers(0, b, size=b)
        got = sam_loss(s, r, nc, ni, tau=tau, max_margin=max_margin).numpy()
        np.testing.assert_allclose(got, matched_oracle(s, r, nc, ni, tau, max_margin), atol=1e-12)
        got = sam_loss(s, r, nc, ni, tau=tau, max_margin=max_margin, pairing="reference").numpy()
        np.testing.assert_allclose(got, reference_formula_oracle(s, r, nc, ni, tau, max_margin), atol=1e-12)
        if max_margin == 1.0:
            np.testing.assert_allclose(got, reference_code_replica(s, r, nc, ni, tau), atol=1e-12)


def test_negative_margin_is_kept():
    # The negative caption is more relevant than the positive: alpha = (1 - 3) / 2 = -1.
    s = np.array([[0.5, 0.2], [0.1, 0.4]])
    r = np.array([[1.0, 3.0], [0.0, 1.0]])
    i2t, _ = sam_terms(s, r, [1, -1], [-1, -1], tau=2)
    np.testing.assert_allclose(i2t.numpy(), [0.0, 0.0])
    i2t, _ = sam_terms(s + np.array([[0, 1.0], [0, 0]]), r, [1, -1], [-1, -1], tau=2)
    np.testing.assert_allclose(i2t.numpy(), [max(0.0, -1 + 1.2 - 0.5), 0.0])


def test_missing_negative_drops_the_term():
    s = np.array([[0.9, 0.5], [0.8, 0.6]])
    r = np.array([[3.0, 1.0], [2.0, 2.5]])
    np.testing.assert_allclose(sam_loss(s, r, [-1, 0], [1, -1], tau=4).numpy(), [0.15, 0.325], atol=1e-12)


def test_gradient_matches_finite_differences():
    rng = np.random.default_rng(8)
    s = tf.constant(rng.uniform(-1, 1, size=(5, 5)))
    r = rng.uniform(0, 4, size=(5, 5))
    nc, ni = [3, 0, 4, 1, 2], [1, 2, 0, 4, 3]
    for pairing in ("matched", "reference"):
        theoretical, numerical = tf.test.compute_gradient(
            lambda x: tf.reduce_sum(sam_loss(x, r, nc, ni, tau=3.0, pairing=pairing)), [s])
        np.testing.assert_allclose(theoretical[0], numerical[0], atol=1e-6)


def embeddings(rng, b, d=6):
    image = tf.math.l2_normalize(tf.constant(rng.normal(size=(b, d))), axis=1)
    text = tf.math.l2_normalize(tf.constant(rng.normal(size=(b, d))), axis=1)
    return image, text


@pytest.mark.parametrize("sampling", ["hardest", "easiest"])
@pytest.mark.parametrize("pairing", ["matched", "reference"])
def test_class_matches_oracle_with_its_sampler(sampling, pairing):
    rng = np.random.default_rng(9)
    want_key = "max" if sampling == "hardest" else "min"
    for b in (1, 2, 7):
        image, text = embeddings(rng, b)
        s = (image @ tf.transpose(text)).numpy()
        r = rng.uniform(0, 5, size=(b, b))
        image_index = rng.integers(0, max(1, b - 2), size=b)
        allowed = negative_mask(s, image_index).numpy()
        n_cap = [extreme_negative(s[p], allowed[p], want_key) for p in range(b)]
        if pairing == "matched":
            n_img = [extreme_negative(s[:, q], allowed[:, q], want_key) for q in range(b)]
            sam = matched_oracle(s, r, n_cap, n_img, 3.0)
        else:
            cost_im = s - np.diag(s)[None, :]
            n_img = [extreme_negative(cost_im[p], allowed[p], want_key) for p in range(b)]
            ok = [n_cap[p] >= 0 and n_img[n_cap[p]] >= 0 for p in range(b)]
            if all(ok) and all(i >= 0 for i in n_img):
                sam = reference_formula_oracle(s, r, n_cap, n_img, 3.0)
            else:
                sam = None  # with one image only there is no negative anywhere: checked to be 0 below
        loss = SAMLoss(tau=3.0, sampling=sampling, pairing=pairing, margin=0.2)
        y_true = {"relevance": r, "image_index": image_index}
        terms = loss.compute_terms(y_true, {"image": image, "text": text})
        assert tuple(terms) == ("triplet_i2t", "triplet_t2i", "sam_i2t", "sam_t2i")
        got_sam = (terms["sam_i2t"] + terms["sam_t2i"]).numpy()
        if sam is None:
            np.testing.assert_allclose(got_sam, 0.0)
            sam = got_sam
        np.testing.assert_allclose(got_sam, sam, atol=1e-6)
        triplet = triplet_oracle(s, 0.2, image_index)
        np.testing.assert_allclose((terms["triplet_i2t"] + terms["triplet_t2i"]).numpy(), triplet, atol=1e-6)
        value = loss(y_true, {"image": image, "text": text}).numpy()
        np.testing.assert_allclose(value, (triplet + sam).sum(), rtol=1e-5, atol=1e-6)


def test_weights_and_random_sampling():
    rng = np.random.default_rng(10)
    image, text = embeddings(rng, 2)
    s = (image @ tf.transpose(text)).numpy()
    r = rng.uniform(0, 5, size=(2, 2))
    y_pred = {"image": image, "text": text}
    # With B = 2 every anchor has one negative, so all samplers agree.
    sam = matched_oracle(s, r, [1, 0], [1, 0], 5.0).sum()
    for sampling in ("hardest", "easiest", "random"):
        alone = SAMLoss(tau=5.0, sampling=sampling, triplet_weight=0.0, sam_weight=2.0)
        assert alone.term_names == ("sam_i2t", "sam_t2i")
        np.testing.assert_allclose(alone({"relevance": r}, y_pred).numpy(), 2 * sam, rtol=1e-6)
    mixed = SAMLoss(tau=5.0, triplet_weight=0.5, sam_weight=0.25)
    want = 0.5 * triplet_oracle(s, 0.2, [0, 1]).sum() + 0.25 * sam
    np.testing.assert_allclose(mixed({"relevance": r}, y_pred).numpy(), want, rtol=1e-6)
    # Random negatives are always real negatives (never the positive, never the same image).
    image, text = embeddings(rng, 9)
    image_index = np.array([0, 0, 1, 2, 2, 3, 4, 5, 5])
    loss = SAMLoss(tau=5.0, sampling="random", seed=1)
    for pairing in ("matched", "reference"):
        loss.pairing = pairing
        s = image @ tf.transpose(text)
        n_cap, n_img = (t.numpy() for t in loss.sample(s, image_index))
        allowed = negative_mask(s, image_index).numpy()
        assert all(allowed[p, n] for p, n in enumerate(n_cap))
        assert all((allowed[n, q] if pairing == "matched" else allowed[q, n]) for q, n in enumerate(n_img))


def test_graph_mode_with_dynamic_batch():
    loss = SAMLoss(tau=3.0, sampling="hardest")

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32), tf.TensorSpec([None, 4], tf.float32),
                                  tf.TensorSpec([None, None], tf.float32)])
    def step(image, text, relevance):
        return loss({"relevance": relevance}, {"image": image, "text": text})

    rng = np.random.default_rng(11)
    for b in (1, 3, 6):
        image, text = (tf.cast(t, tf.float32) for t in embeddings(rng, b, 4))
        r = rng.uniform(0, 5, size=(b, b)).astype(np.float32)
        np.testing.assert_allclose(step(image, text, r).numpy(),
                                   loss({"relevance": r}, {"image": image, "text": text}).numpy(), rtol=1e-6)


def test_get_config_round_trip_and_serialization():
    loss = SAMLoss(tau=5.0, sampling="easiest", pairing="reference", triplet_weight=0.0, sam_weight=2.0,
                   margin=0.1, max_violation=False, max_margin=None, seed=4, name="sam_sn")
    clone = SAMLoss.from_config(loss.get_config())
    assert clone.get_config() == loss.get_config()
    assert clone.term_names == ("sam_i2t", "sam_t2i")
    restored = keras.losses.deserialize(keras.losses.serialize(loss))
    assert isinstance(restored, SAMLoss) and restored.get_config() == loss.get_config()


def test_bad_arguments_raise_value_error_naming_them():
    for tau in (-1.0, 0.0):
        with pytest.raises(ValueError, match="tau"):
            SAMLoss(tau=tau)
        with pytest.raises(ValueError, match="tau"):
            sam_loss(S3, R3, [1, 2, 0], [1, 2, 0], tau=tau)
    with pytest.raises(ValueError, match="sampling"):
        SAMLoss(tau=3.0, sampling="soft")
    with pytest.raises(ValueError, match="pairing"):
        SAMLoss(tau=3.0, pairing="paper")
    with pytest.raises(ValueError, match="pairing"):
        sam_loss(S3, R3, [1, 2, 0], [1, 2, 0], tau=3.0, pairing="broadcast")
    with pytest.raises(ValueError, match="both 0"):
        SAMLoss(tau=3.0, triplet_weight=0.0, sam_weight=0.0)
    with pytest.raises(ValueError, match="sam_weight"):
        SAMLoss(tau=3.0, sam_weight=-1.0)
    with pytest.raises(ValueError, match="relevance"):
        sam_loss(S3, R3[:2], [1, 2, 0], [1, 2, 0], tau=3.0)
    with pytest.raises(ValueError, match="negative_captions"):
        sam_loss(S3, R3, [[1, 2, 0]], [1, 2, 0], tau=3.0)
    image = tf.math.l2_normalize(tf.ones([3, 4]), axis=1)
    with pytest.raises(ValueError, match="relevance"):
        SAMLoss(tau=3.0)({"image_index": [0, 1, 2]}, {"image": image, "text": image})

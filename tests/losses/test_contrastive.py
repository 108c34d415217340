"""InfoNCE, SigLIP and graded InfoNCE (kitm.losses.contrastive) against numpy oracles written from docs/methods.md.

The oracles below follow docs/methods.md, "Contrastive", term by term with
explicit loops (they are the reference, not the implementation): L_InfoNCE = 1/2 (sum_p -log softmax_q(z[p,:])[p]
+ sum_q -log softmax_p(z[:,q])[q]); L_SigLIP = -sum_p sum_q log sigmoid(y[p,q] z[p,q]); graded InfoNCE with soft
targets softmax(R'/tau_R). Samples of one image are positives of each other: InfoNCE's target is uniform over them,
SigLIP's y is +1 on them, graded InfoNCE raises them to the row (column) maximum.
"""

from __future__ import annotations

import json
import math
import pathlib
import tempfile

import keras
import numpy as np
import pytest
import tensorflow as tf

import kitm  # noqa: F401  (selects the TensorFlow backend)
from kitm.losses import (GradedInfoNCELoss, InfoNCELoss, SigLIPLoss, graded_info_nce_loss, info_nce_loss,
                         siglip_loss)
from kitm.losses.contrastive import graded_info_nce_targets

# ------------------------------------------------------------------------------------------------
# Oracles (numpy, float64, loops over anchors: written from docs/methods.md, not from the implementation)
# ------------------------------------------------------------------------------------------------


def _log_softmax(v):
    v = np.asarray(v, np.float64)
    m = v.max()
    return v - m - math.log(np.exp(v - m).sum())


def _positives(b, image_index):
    if image_index is None:
        return np.eye(b, dtype=bool)
    image_index = np.asarray(image_index)
    return image_index[:, None] == image_index[None, :]


def oracle_info_nce(s, scale, image_index=None):
    """Per row p: 1/2 (image p's term + caption p's term), each the mean over the anchor's positives of -log softmax."""
    s = np.asarray(s, np.float64)
    b = s.shape[0]
    z = scale * s
    pos = _positives(b, image_index)
    rows = np.zeros(b)
    for p in range(b):
        lsm_row = _log_softmax(z[p, :])
        lsm_col = _log_softmax(z[:, p])
        i2t = -np.mean([lsm_row[q] for q in range(b) if pos[p, q]])
        t2i = -np.mean([lsm_col[r] for r in range(b) if pos[r, p]])
        rows[p] = 0.5 * (i2t + t2i)
    return rows


def oracle_graded_targets(relevance, tau, image_index=None):
    r = np.asarray(relevance, np.float64)
    b = r.shape[0]
    pos = _positives(b, image_index)
    y_i2t, y_t2i = np.zeros((b, b)), np.zeros((b, b))
    for p in range(b):
        row = r[p, :].copy()
        row[pos[p, :]] = row.max()  # R'[p, :]: the positives raised to the row maximum
        y_i2t[p, :] = np.exp(_log_softmax(row / tau))
    for q in range(b):
        col = r[:, q].copy()
        col[pos[:, q]] = col.max()
        y_t2i[:, q] = np.exp(_log_softmax(col / tau))
    return y_i2t, y_t2i


def oracle_graded_info_nce(s, relevance, scale, tau, image_index=None):
    s = np.asarray(s, np.float64)
    b = s.shape[0]
    z = scale * s
    y_i2t, y_t2i = oracle_graded_targets(relevance, tau, image_index)
    rows = np.zeros(b)
    for p in range(b):
        i2t = -np.sum(y_i2t[p, :] * _log_softmax(z[p, :]))
        t2i = -np.sum(y_t2i[:, p] * _log_softmax(z[:, p]))
        rows[p] = 0.5 * (i2t + t2i)
    return rows


def oracle_siglip_total(s, scale, bias, image_index=None):
    """docs/methods.md's L (a scalar): -sum_p sum_q log sigmoid(y z)."""
    s = np.asarray(s, np.float64)
    b = s.shape[0]
    pos = _positives(b, image_index)
    total = 0.0
    for p in range(b):
        for q in range(b):
            y = 1.0 if pos[p, q] else -1.0
            x = y * (scale * s[p, q] + bias)
            total += math.log1p(math.exp(-x)) if x > -30 else -x  # -log sigmoid(x)
    return total


def oracle_siglip_rows(s, scale, bias, image_index=None):
    """kitm's per-row split: half of row p's sum plus half of column p's sum (sums to L)."""
    s = np.asarray(s, np.float64)
    b = s.shape[0]
    pos = _positives(b, image_index)
    y = np.where(pos, 1.0, -1.0)
    nll = np.log1p(np.exp(-y * (scale * s + bias)))
    return 0.5 * nll.sum(axis=1) + 0.5 * nll.sum(axis=0)


def _random(b, d=5, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    x, y = rng.normal(size=(b, d)), rng.normal(size=(b, d))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    y /= np.linalg.norm(y, axis=1, keepdims=True)
    return x.astype(dtype), y.astype(dtype), rng.uniform(size=(b, b)).astype(dtype)


REPEATS = np.array([3, 1, 3, 0, 1, 3], np.int32)  # image 3 three times, image 1 twice

MAX_DIFF: dict[str, float] = {}  # printed at the end (-s) for the report


def _agree(name, got, expected, rtol=1e-10, atol=1e-12):
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    MAX_DIFF[name] = max(MAX_DIFF.get(name, 0.0), float(np.max(np.abs(got - expected))))
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol, err_msg=name)


# ------------------------------------------------------------------------------------------------
# Hand-computed values (2x2)
# ------------------------------------------------------------------------------------------------

S2 = np.array([[0.5, 0.0], [0.0, 0.5]])


def test_info_nce_two_by_two_by_hand():
    # z = [[1, 0], [0, 1]]: every row and column gives -log softmax = log(1 + e^-1).
    expected = math.log1p(math.exp(-1.0))
    _agree("infonce 2x2", info_nce_loss(tf.constant(S2), 2.0), [expected, expected])
    # Both samples of one image: every entry is a positive, each term the mean of log(1 + e^-1) and log(1 + e).
    both = 0.5 * (math.log1p(math.exp(-1.0)) + math.log1p(math.exp(1.0)))
    _agree("infonce 2x2 same image", info_nce_loss(tf.constant(S2), 2.0, image_index=[4, 4]), [both, both])
    # An asymmetric case: s = [[0.9, 0.2], [0.4, 0.1]], exp(t) = 1.
    s = np.array([[0.9, 0.2], [0.4, 0.1]])
    row0 = math.log(math.exp(0.9) + math.exp(0.2)) - 0.9
    col0 = math.log(math.exp(0.9) + math.exp(0.4)) - 0.9
    row1 = math.log(math.exp(0.4) + math.exp(0.1)) - 0.1
    col1 = math.log(math.exp(0.2) + math.exp(0.1)) - 0.1
    _agree("infonce 2x2", info_nce_loss(tf.constant(s), 1.0), [0.5 * (row0 + col0), 0.5 * (row1 + col1)])


def test_graded_info_nce_two_by_two_by_hand():
    r = np.array([[1.0, 0.5], [0.5, 1.0]])
    target = np.exp(2.0) / (np.exp(2.0) + np.exp(1.0))  # softmax([1, 0.5] / 0.5)[0]
    half = 0.5 * (target * math.log1p(math.exp(-1.0)) + (1 - target) * math.log1p(math.exp(1.0)))
    _agree("graded 2x2", graded_info_nce_loss(tf.constant(S2), r, 2.0, tau_relevance=0.5), [2 * half, 2 * half])
    assert abs(2 * half - 0.58220) < 1e-5  # the docstring's example


def test_siglip_two_by_two_by_hand():
    # exp(t') = 10, b = -5: z = [[0, -5], [-5, 0]]; positives log 2, negatives log(1 + e^-5).
    row = math.log(2.0) + math.log1p(math.exp(-5.0))
    _agree("siglip 2x2", siglip_loss(tf.constant(S2), 10.0, -5.0), [row, row])
    # SigLIP's initial values (exp(t') = 10, b = -10): s = [[1, -1], [0.2, 0.6]].
    s = np.array([[1.0, -1.0], [0.2, 0.6]])
    nll = lambda x: math.log1p(math.exp(-x))  # noqa: E731
    total = nll(10 * 1.0 - 10) + nll(-(10 * -1.0 - 10)) + nll(-(10 * 0.2 - 10)) + nll(10 * 0.6 - 10)
    got = SigLIPLoss()(None, {"image": np.eye(2, dtype=np.float32), "text": s.astype(np.float32)})
    _agree("siglip init", got, total, rtol=1e-5)


# ------------------------------------------------------------------------------------------------
# Random inputs against the oracles
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("image_index", [None, REPEATS], ids=["distinct", "repeats"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_inputs_against_the_oracles(seed, image_index):
    b = 6
    x, y, r = _random(b, seed=seed)
    s = x @ y.T
    scale = float(np.random.default_rng(seed).uniform(1, 30))
    _agree("infonce random", info_nce_loss(tf.constant(s), scale, image_index=image_index),
           oracle_info_nce(s, scale, image_index))
    _agree("graded random", graded_info_nce_loss(tf.constant(s), r, scale, tau_relevance=0.3, image_index=image_index),
           oracle_graded_info_nce(s, r, scale, 0.3, image_index))
    rows = siglip_loss(tf.constant(s), scale, -3.0, image_index=image_index)
    _agree("siglip random rows", rows, oracle_siglip_rows(s, scale, -3.0, image_index))
    _agree("siglip random total", np.sum(rows), oracle_siglip_total(s, scale, -3.0, image_index))
    # The targets themselves.
    y_i2t, y_t2i = graded_info_nce_targets(tf.constant(r), tau_relevance=0.3, image_index=image_index)
    o_i2t, o_t2i = oracle_graded_targets(r, 0.3, image_index)
    _agree("graded targets", y_i2t, o_i2t)
    _agree("graded targets", y_t2i, o_t2i)


def test_negative_similarities():
    s = -np.abs(_random(5, seed=4)[0] @ _random(5, seed=5)[1].T) - 0.1  # every cosine < 0
    image_index = np.array([0, 1, 0, 2, 3], np.int32)
    _agree("infonce negative s", info_nce_loss(tf.constant(s), 14.0, image_index=image_index),
           oracle_info_nce(s, 14.0, image_index))
    r = np.random.default_rng(6).uniform(size=(5, 5))
    _agree("graded negative s", graded_info_nce_loss(tf.constant(s), r, 14.0, tau_relevance=0.1),
           oracle_graded_info_nce(s, r, 14.0, 0.1))
    _agree("siglip negative s", np.sum(siglip_loss(tf.constant(s), 10.0, -10.0, image_index=image_index)),
           oracle_siglip_total(s, 10.0, -10.0, image_index))


# ------------------------------------------------------------------------------------------------
# The limit tau_R -> 0, same-image samples
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("image_index", [None, REPEATS], ids=["distinct", "repeats"])
def test_graded_info_nce_tends_to_info_nce_as_tau_goes_to_zero(image_index):
    b = 6
    x, y, r = _random(b, seed=7)
    s = x @ y.T
    # The positives are the only entries at the maximum (docs/methods.md raises them to it; here they already are): the
    # limit is then InfoNCE's target, uniform over the positives.
    r = np.where(_positives(b, image_index), 1.0, 0.9 * r)
    infonce = oracle_info_nce(s, 10.0, image_index)
    gaps = []
    for tau in (1e-1, 1e-2, 1e-3):
        graded = graded_info_nce_loss(tf.constant(s), r, 10.0, tau_relevance=tau, image_index=image_index).numpy()
        gaps.append(np.max(np.abs(graded - infonce)))
    assert gaps[0] > gaps[1] > gaps[2] - 1e-12, gaps
    _agree("graded tau->0 = infonce", graded, infonce, rtol=1e-7, atol=1e-9)
    # And against kitm's InfoNCE itself.
    _agree("graded tau->0 = infonce", graded, info_nce_loss(tf.constant(s), 10.0, image_index=image_index))


def test_a_caption_tied_with_the_positive_shares_the_limit_target():
    # docs/methods.md raises the positive to the row maximum: a caption of another image that reaches that maximum ties
    # with it, and as tau_R -> 0 the target is 1/2 on each.
    r = np.array([[0.5, 0.9, 0.1], [0.2, 1.0, 0.3], [0.0, 0.1, 1.0]])
    y_i2t, y_t2i = graded_info_nce_targets(tf.constant(r), tau_relevance=1e-3)
    np.testing.assert_allclose(y_i2t.numpy()[0], [0.5, 0.5, 0.0], atol=1e-12)
    np.testing.assert_allclose(y_t2i.numpy()[:, 1], [0.0, 1.0, 0.0], atol=1e-12)


def test_same_image_samples_are_positives_not_negatives():
    b = 6
    x, y, _ = _random(b, seed=8)
    s = x @ y.T
    with_index = info_nce_loss(tf.constant(s), 10.0, image_index=REPEATS).numpy()
    without = info_nce_loss(tf.constant(s), 10.0).numpy()
    assert not np.allclose(with_index, without)
    # A row whose image occurs once (row 3, image 0) keeps its one-hot targets: its value is unchanged (the
    # softmax denominators run over the whole batch either way).
    _agree("infonce unique row", with_index[3], without[3], rtol=1e-12)
    # The samples of each image embedded alike (their pairs tied at 0.8, the rest at 0.1): with image_index the
    # gradient never pushes two samples of one image apart (it pulls them together, towards the negatives' side
    # of the softmax), without it they are negatives and are pushed apart.
    aligned = tf.constant(np.where(_positives(b, REPEATS), 0.8, 0.1))
    for loss in (lambda t, i: info_nce_loss(t, 10.0, image_index=i),
                 # Relevance 1 on the diagonal only: same-image entries are raised to it by image_index alone.
                 lambda t, i: graded_info_nce_loss(t, np.where(np.eye(b) > 0, 1.0, 0.2), 10.0, tau_relevance=0.01,
                                                   image_index=i)):
        for index, sign in ((REPEATS, -1.0), (None, 1.0)):
            with tf.GradientTape() as tape:
                tape.watch(aligned)
                total = tf.reduce_sum(loss(aligned, index))
            gradient = tape.gradient(total, aligned).numpy()
            assert sign * gradient[0, 2] > 0 and sign * gradient[2, 0] > 0, (index, gradient[0, 2])
    assert np.sum(siglip_loss(tf.constant(aligned), 10.0, -5.0, image_index=REPEATS)) < np.sum(
        siglip_loss(tf.constant(aligned), 10.0, -5.0))
    # Raising a negative pair's similarity (caption 1 is image 1, row 0 image 3) always raises the loss; raising a
    # same-image pair's (caption 2 is image 3) lowers SigLIP's (y = +1 there).
    def value(s_, loss):
        return float(np.sum(loss(tf.constant(s_))))
    up_positive, up_negative = s.copy(), s.copy()
    up_positive[0, 2] += 0.05
    up_negative[0, 1] += 0.05
    for loss in (lambda t: info_nce_loss(t, 10.0, image_index=REPEATS),
                 lambda t: siglip_loss(t, 10.0, -10.0, image_index=REPEATS),
                 lambda t: graded_info_nce_loss(t, np.where(np.eye(b) > 0, 1.0, 0.2), 10.0, tau_relevance=0.1,
                                                image_index=REPEATS)):
        assert value(s, loss) < value(up_negative, loss)
    siglip = lambda t: siglip_loss(t, 10.0, -10.0, image_index=REPEATS)  # noqa: E731
    assert value(up_positive, siglip) < value(s, siglip)
    # As tau_R -> 0 the graded targets of a row spread evenly over its image's samples, also when only the diagonal
    # carries the row's highest relevance: the other samples are raised to it.
    y_i2t, _ = graded_info_nce_targets(tf.constant(np.where(np.eye(b) > 0, 1.0, 0.2)), tau_relevance=0.001,
                                       image_index=REPEATS)
    np.testing.assert_allclose(y_i2t.numpy()[0], [1 / 3, 0, 1 / 3, 0, 0, 1 / 3], atol=1e-12)


# ------------------------------------------------------------------------------------------------
# The logit scale: initial values, the clip at 100, logging
# ------------------------------------------------------------------------------------------------

def test_initial_values_are_clip_and_siglip_ones():
    assert np.isclose(float(InfoNCELoss().logit_scale), 1 / 0.07, rtol=1e-6)
    assert np.isclose(float(GradedInfoNCELoss(0.1).logit_scale), 1 / 0.07, rtol=1e-6)
    siglip = SigLIPLoss()
    assert np.isclose(float(siglip.logit_scale), 10.0, rtol=1e-6) and float(siglip.bias) == -10.0
    assert np.isclose(float(siglip.temperature.log_scale), math.log(10.0), rtol=1e-6)


def test_logit_scale_is_clipped_at_100():
    loss = InfoNCELoss()
    loss.temperature.log_scale.assign(math.log(500.0))  # above the clip: the forward pass uses 100
    assert np.isclose(float(loss.logit_scale), 100.0, rtol=1e-6)
    x, y, _ = _random(4, seed=9, dtype=np.float32)
    value = loss.call(None, {"image": x, "text": y}).numpy()
    _agree("infonce clipped", value, oracle_info_nce(x.astype(np.float64) @ y.T.astype(np.float64), 100.0),
           rtol=1e-4, atol=1e-5)
    assert float(loss.monitored["logit_scale"]) == pytest.approx(100.0, rel=1e-6)
    # The optimizer clips the variable too after each step (open_clip's clamp), so t never drifts above the clip.
    loss.temperature.log_scale.assign(math.log(90.0))
    variable = loss.temperature.log_scale
    optimizer = keras.optimizers.SGD(1.0)
    optimizer.apply_gradients([(tf.constant(-5.0), variable)])  # a step that would take exp(t) to 90 e^5
    assert float(variable) == pytest.approx(math.log(100.0), rel=1e-6)
    with pytest.raises(ValueError, match="max_logit_scale"):
        InfoNCELoss(logit_scale_init=200.0)


def test_the_temperature_and_bias_are_reported_for_logging():
    x, y, _ = _random(4, seed=10, dtype=np.float32)
    siglip = SigLIPLoss(logit_scale_init=7.0, bias_init=-2.0)
    siglip.compute_terms(None, {"image": x, "text": y})
    assert siglip.monitor_names == ("logit_scale", "bias")
    assert float(siglip.monitored["logit_scale"]) == pytest.approx(7.0) and float(siglip.monitored["bias"]) == -2.0
    assert InfoNCELoss().monitor_names == ("logit_scale",)


# ------------------------------------------------------------------------------------------------
# Gradients: tf.GradientTape against central finite differences in float64
# ------------------------------------------------------------------------------------------------

def _numerical(f, values, eps=1e-6):
    """Central differences of the scalar f(*values) w.r.t. every entry of every array in `values`."""
    grads = []
    for i, v in enumerate(values):
        g = np.zeros_like(v)
        for index in np.ndindex(v.shape):
            plus = [w.copy() for w in values]
            minus = [w.copy() for w in values]
            plus[i][index] += eps
            minus[i][index] -= eps
            g[index] = (f(*plus) - f(*minus)) / (2 * eps)
        grads.append(g)
    return grads


GRAD_RTOL, GRAD_ATOL = 1e-6, 1e-8


@pytest.mark.parametrize("name", ["infonce", "graded_infonce", "siglip"])
@pytest.mark.parametrize("image_index", [None, REPEATS[:5]], ids=["distinct", "repeats"])
def test_gradients_match_finite_differences(name, image_index):
    b = 5
    x, y, r = _random(b, d=4, seed=11)
    t = np.array(math.log(8.0))
    bias = np.array(-2.0)

    def value(x_, y_, t_, b_):
        s = tf.matmul(x_, y_, transpose_b=True)
        scale = tf.exp(t_)
        if name == "infonce":
            rows = info_nce_loss(s, scale, image_index=image_index)
        elif name == "graded_infonce":
            rows = graded_info_nce_loss(s, r, scale, tau_relevance=0.2, image_index=image_index)
        else:
            rows = siglip_loss(s, scale, b_, image_index=image_index)
        return tf.reduce_sum(rows)

    variables = [tf.Variable(v) for v in (x, y, t, bias)]
    with tf.GradientTape() as tape:
        total = value(*variables)
    analytic = tape.gradient(total, variables)
    numeric = _numerical(lambda *v: float(value(*[tf.constant(w) for w in v])), [x, y, t, bias])
    for what, a, n in zip(("image", "text", "t", "bias"), analytic, numeric):
        if name != "siglip" and what == "bias":
            assert a is None
            continue
        a = tf.convert_to_tensor(a).numpy()
        _agree(f"gradient {name} {what}", a, n, rtol=GRAD_RTOL, atol=GRAD_ATOL)
        assert np.any(np.abs(a) > 1e-3), (name, what)


@pytest.mark.parametrize("cls", [InfoNCELoss, GradedInfoNCELoss, SigLIPLoss])
def test_class_gradients_reach_the_temperature_and_bias_in_float64(cls):
    b = 5
    x, y, r = _random(b, d=4, seed=12)
    kwargs = {"tau_relevance": 0.2} if cls is GradedInfoNCELoss else {}
    loss = cls(dtype="float64", **kwargs)
    y_true = {"relevance": r, "image_index": REPEATS[:5]}
    variables = loss.trainable_variables
    assert len(variables) == (2 if cls is SigLIPLoss else 1)
    assert all(v.dtype == "float64" for v in variables)
    with tf.GradientTape() as tape:
        total = loss(y_true, {"image": x, "text": y})
    analytic = [tf.convert_to_tensor(g).numpy() for g in tape.gradient(total, variables)]
    start = [v.numpy() for v in variables]

    def value(*values):
        for v, w in zip(variables, values):
            v.assign(w)
        out = float(loss(y_true, {"image": x, "text": y}))
        for v, w in zip(variables, start):
            v.assign(w)
        return out

    numeric = _numerical(value, [np.array(v) for v in start])
    for v, a, n in zip(variables, analytic, numeric):
        _agree(f"class gradient {cls.__name__} {v.name}", a, n, rtol=GRAD_RTOL, atol=GRAD_ATOL)


# ------------------------------------------------------------------------------------------------
# Classes: per-row sums, configs
# ------------------------------------------------------------------------------------------------

def _classes():
    return {"infonce": InfoNCELoss(logit_scale_init=5.0, max_logit_scale=50.0),
            "graded": GradedInfoNCELoss(tau_relevance=0.25, logit_scale_init=3.0, learnable=False),
            "siglip": SigLIPLoss(logit_scale_init=4.0, bias_init=-1.5, max_logit_scale=None)}


@pytest.mark.parametrize("name", ["infonce", "graded", "siglip"])
def test_per_row_sum_is_the_reduced_loss_and_the_plain_function(name):
    loss = _classes()[name]
    x, y, r = _random(6, seed=13, dtype=np.float32)
    y_true = {"relevance": r, "image_index": REPEATS}
    per_row = loss.call(y_true, {"image": x, "text": y}).numpy()
    assert per_row.shape == (6,)
    _agree(f"{name} sum", loss(y_true, {"image": x, "text": y}), per_row.sum(), rtol=1e-6, atol=1e-5)
    s = x.astype(np.float64) @ y.T.astype(np.float64)
    scale = float(loss.logit_scale)
    oracle = {"infonce": lambda: oracle_info_nce(s, scale, REPEATS),
              "graded": lambda: oracle_graded_info_nce(s, r, scale, 0.25, REPEATS),
              "siglip": lambda: oracle_siglip_rows(s, scale, -1.5, REPEATS)}[name]()
    _agree(f"{name} class vs oracle", per_row, oracle, rtol=1e-5, atol=1e-5)
    mean = keras.saving.deserialize_keras_object(
        json.loads(json.dumps(keras.saving.serialize_keras_object(loss))))
    assert type(mean) is type(loss)


@pytest.mark.parametrize("name", ["infonce", "graded", "siglip"])
def test_get_config_round_trips(name):
    loss = _classes()[name]
    config = json.loads(json.dumps(loss.get_config()))
    rebuilt = type(loss).from_config(config)
    assert rebuilt.get_config() == loss.get_config()
    assert rebuilt.learnable == loss.learnable and bool(rebuilt.trainable_variables) == loss.learnable
    via_keras = keras.losses.deserialize(json.loads(json.dumps(keras.losses.serialize(loss))))
    assert type(via_keras) is type(loss) and via_keras.get_config() == loss.get_config()
    x, y, r = _random(4, seed=14, dtype=np.float32)
    y_true = {"relevance": r[:4, :4]}
    np.testing.assert_allclose(rebuilt(y_true, {"image": x, "text": y}), loss(y_true, {"image": x, "text": y}),
                               rtol=1e-6)


def test_refusals_name_the_argument():
    with pytest.raises(ValueError, match="tau_relevance"):
        GradedInfoNCELoss(tau_relevance=0.0)
    with pytest.raises(ValueError, match="relevance"):
        GradedInfoNCELoss(0.1).call({"image_index": np.arange(2)}, {"image": np.eye(2, dtype=np.float32),
                                                                     "text": np.eye(2, dtype=np.float32)})
    with pytest.raises(ValueError, match="logit_scale_init"):
        InfoNCELoss(logit_scale_init=-1.0)
    with pytest.raises(ValueError, match="square"):
        info_nce_loss(tf.zeros([2, 3]), 1.0)


def test_print_max_differences():
    """Runs last in this module: the largest oracle differences seen (shown with -s)."""
    for name, diff in sorted(MAX_DIFF.items()):
        print(f"max |kitm - oracle| {name}: {diff:.3g}")


# ------------------------------------------------------------------------------------------------
# Training: the model's optimizer updates the temperature and bias; they are logged
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("prebuilt", [False, True], ids=["built_by_fit", "built_before"])
def test_fit_trains_the_temperature_and_bias_with_the_model_optimizer_and_logs_them(prebuilt):
    from kitm.losses import SAMLoss
    from kitm.models import DualEncoder

    # Seeded, so the initial weights do not depend on the tests that ran before in the worker: one full run saw the
    # SigLIP scale and bias move by only 0.04 and 4e-4 in six steps (seeds 0-11 alone move the bias by 0.03-0.16;
    # the cause was not found). What is asserted is that they move at all: the model's optimizer trains them.
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = {"image": rng.random((16, 5), dtype=np.float32), "tokens": rng.random((16, 7), dtype=np.float32)}
    y = {"image_index": np.arange(16, dtype=np.int32), "relevance": rng.random((16, 16), dtype=np.float32)}
    model = DualEncoder(keras.layers.Dense(8), keras.layers.Dense(8), embedding_dim=6)
    if prebuilt:
        model.build_from_inputs({k: tf.TensorSpec([None, v.shape[1]], v.dtype) for k, v in x.items()})
    infonce, siglip = InfoNCELoss(), SigLIPLoss()
    model.compile(keras.optimizers.Adam(0.05), losses={"infonce": infonce, "siglip": siglip, "sam": SAMLoss(tau=3.0)})
    start = [float(v.numpy()) for v in infonce.trainable_variables + siglip.trainable_variables]
    history = model.fit(tf.data.Dataset.from_tensors((x, y)).repeat(), epochs=2, steps_per_epoch=3, verbose=0)
    after = [float(v.numpy()) for v in infonce.trainable_variables + siglip.trainable_variables]
    assert all(abs(a - b) > 1e-5 for a, b in zip(after, start)), (start, after)
    # One optimizer for all of them, with their slots.
    known = {id(v) for v in model.optimizer._trainable_variables}
    assert all(id(v) in known for v in infonce.trainable_variables + siglip.trainable_variables)
    for key in ("infonce/logit_scale", "siglip/logit_scale", "siglip/bias", "infonce/i2t", "siglip/t2i"):
        assert key in history.history, sorted(history.history)
    # The epoch's mean of exp(t): between its values at the start and at the end of training.
    ends = sorted([math.exp(start[0]), float(infonce.logit_scale)])
    assert ends[0] <= history.history["infonce/logit_scale"][-1] <= ends[1]
    # The weights file of the model carries them (BackupAndRestore, last.weights.h5).
    path = pathlib.Path(tempfile.mkdtemp()) / "model.weights.h5"
    model.save_weights(path)
    infonce.temperature.log_scale.assign(0.0)
    model.load_weights(path)
    assert float(infonce.temperature.log_scale.numpy()) == pytest.approx(after[0])


def test_a_fixed_temperature_is_not_trained():
    from kitm.models import DualEncoder

    model = DualEncoder(keras.layers.Dense(4), keras.layers.Dense(4), embedding_dim=3)
    loss = InfoNCELoss(logit_scale_init=5.0, learnable=False)
    model.compile("adam", losses={"infonce": loss})
    assert loss.trainable_variables == [] and model.loss_variables_for_model_optimizer() == []

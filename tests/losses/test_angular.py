"""Angular and neighbourhood losses against loop oracles from docs/methods.md ("Angular", "Neighbourhood terms"), and
every semantic loss of kitm under tf.distribute."""

import math
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import kitm  # noqa: F401  (selects the TensorFlow backend)
import keras
from kitm.losses.angular import (AngularLoss, NeighborhoodAngularLoss, angular_loss, neighbor_coverage,
                                 squared_distance_triplet_loss)


def ang(a, p, n, angle_degrees=45.0):
    """L_ang(a, p, n) = [ |a - p|^2 - 4 tan^2(angle) |n - C|^2 ]+, C = (a + p) / 2."""
    tan2 = math.tan(math.radians(angle_degrees)) ** 2
    c = (a + p) / 2
    return max(0.0, float(np.sum((a - p) ** 2) - 4 * tan2 * np.sum((n - c) ** 2)))


def trip(a, p, n, margin=0.2):
    """Thomas & Kovashka, Eq. 1: [ |a - p|^2 - |a - n|^2 + m ]+."""
    return max(0.0, float(np.sum((a - p) ** 2) - np.sum((a - n) ** 2) + margin))


def npair_ang(a, p, negatives, angle_degrees=45.0):
    """docs/methods.md N-pair angular: log(1 + sum_n exp(4 tan^2 (a + p)^T n - 2 (1 + tan^2) a^T p))."""
    tan2 = math.tan(math.radians(angle_degrees)) ** 2
    return math.log(1.0 + sum(math.exp(4 * tan2 * float((a + p) @ n) - 2 * (1 + tan2) * float(a @ p))
                              for n in negatives))


def summed(f):
    """A per-negative term f(a, p, n) summed over an anchor's negatives (the hinge and triplet forms)."""
    return lambda a, p, negatives: sum(f(a, p, n) for n in negatives)


def npair_oracle(anchors, positives, negatives=None, allowed=None, f=ang, per_anchor=None):
    """Per-anchor values by loops; `per_anchor(a, p, [negatives])` (default: `f` summed over the negatives)."""
    per_anchor = per_anchor or summed(f)
    b = anchors.shape[0]
    pool = positives if negatives is None else negatives
    rows = np.zeros(b)
    for i in range(b):
        chosen = []
        for j in range(pool.shape[0]):
            if allowed is not None:
                if not allowed[i, j]:
                    continue
            elif negatives is None and j == i:
                continue
            chosen.append(pool[j])
        rows[i] = per_anchor(anchors[i], positives[i], chosen)
    return rows


def neighborhood_oracle(x, y, positions, image_index, alpha, beta, f, per_anchor=None):
    """Per-row terms (i2t, t2i, alpha L_text, beta L_img) by loops; negatives exclude i, i' and their images.
    `per_anchor(a, p, [negatives])` (default: `f` summed over the negatives); no neighbour -> 0."""
    per_anchor = per_anchor or summed(f)
    b = x.shape[0]
    idx = np.arange(b) if image_index is None else np.asarray(image_index)
    out = np.zeros((4, b))
    for i in range(b):
        cross = [j for j in range(b) if idx[j] != idx[i]]
        out[0, i] = per_anchor(x[i], y[i], [y[j] for j in cross])
        out[1, i] = per_anchor(y[i], x[i], [x[j] for j in cross])
        k = positions[i]
        if k < 0:
            continue
        within = [j for j in range(b) if j not in (i, k) and idx[j] not in (idx[i], idx[k])]
        out[2, i] = alpha * per_anchor(y[i], y[k], [y[j] for j in within])
        out[3, i] = beta * per_anchor(x[i], x[k], [x[j] for j in within])
    return out


def unit(rng, b, d=5):
    v = rng.normal(size=(b, d))
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_hand_computed_example_of_the_docstring():
    a, p = np.array([[1.0, 0.0]]), np.array([[0.0, 1.0]])
    # Hinge: |a - p|^2 = 2, C = (0.5, 0.5): n = (-1, 0) is 2.5 from C (loss 0), n = (0.6, 0.8) is 0.1 (loss 1.6).
    hinge = dict(form="hinge")
    np.testing.assert_allclose(angular_loss(a, p, np.array([[-1.0, 0.0]]), **hinge).numpy(), [0.0], atol=1e-12)
    np.testing.assert_allclose(angular_loss(a, p, np.array([[0.6, 0.8]]), **hinge).numpy(), [1.6], atol=1e-12)
    # Both negatives at once (N-pairs: summed).
    np.testing.assert_allclose(angular_loss(a, p, np.array([[-1.0, 0.0], [0.6, 0.8]]), **hinge).numpy(), [1.6],
                               atol=1e-12)
    # N-pair (the default): a^T p = 0, (a + p)^T n = -1 and 1.4: log(1 + e^-4 + e^5.6).
    np.testing.assert_allclose(angular_loss(a, p, np.array([[-1.0, 0.0], [0.6, 0.8]])).numpy(),
                               [math.log(1 + math.exp(-4) + math.exp(5.6))], rtol=1e-12)
    np.testing.assert_allclose(math.log(1 + math.exp(-4) + math.exp(5.6)), 5.6038, atol=1e-4)


@pytest.mark.parametrize("angle", [30.0, 45.0, 60.0])
def test_angular_matches_oracle_default_and_explicit_negatives(angle):
    rng = np.random.default_rng(0)
    for b in (1, 2, 6):
        a, p = unit(rng, b), unit(rng, b)
        got = angular_loss(a, p, angle_degrees=angle, form="hinge").numpy()
        np.testing.assert_allclose(got, npair_oracle(a, p, f=lambda *t: ang(*t, angle)), atol=1e-10)
        pool = unit(rng, b + 3)
        allowed = rng.uniform(size=(b, b + 3)) < 0.6
        got = angular_loss(a, p, pool, angle_degrees=angle, form="hinge").numpy()
        np.testing.assert_allclose(got, npair_oracle(a, p, pool, f=lambda *t: ang(*t, angle)), atol=1e-10)
        got = angular_loss(a, p, pool, angle_degrees=angle, negative_mask=allowed, form="hinge").numpy()
        np.testing.assert_allclose(got, npair_oracle(a, p, pool, allowed, f=lambda *t: ang(*t, angle)), atol=1e-10)


@pytest.mark.parametrize("angle", [30.0, 45.0, 60.0])
def test_npair_form_matches_oracle(angle):
    rng = np.random.default_rng(10)
    oracle = lambda a, p, ns: npair_ang(a, p, ns, angle)  # noqa: E731
    for b in (1, 2, 6):
        a, p = unit(rng, b), unit(rng, b)
        np.testing.assert_allclose(angular_loss(a, p, angle_degrees=angle).numpy(),
                                   npair_oracle(a, p, per_anchor=oracle), rtol=1e-10, atol=1e-12)
        pool = unit(rng, b + 3)
        allowed = rng.uniform(size=(b, b + 3)) < 0.6
        allowed[0] = False  # an anchor without negatives: log(1 + 0) = 0
        np.testing.assert_allclose(angular_loss(a, p, pool, angle_degrees=angle).numpy(),
                                   npair_oracle(a, p, pool, per_anchor=oracle), rtol=1e-10, atol=1e-12)
        got = angular_loss(a, p, pool, angle_degrees=angle, negative_mask=allowed).numpy()
        np.testing.assert_allclose(got, npair_oracle(a, p, pool, allowed, per_anchor=oracle), rtol=1e-10, atol=1e-12)
        assert got[0] == 0.0


def test_collapse_is_a_minimum_of_the_hinge_form_but_not_of_the_npair_form():
    # Every embedding the same unit vector: the hinge form is exactly 0 (its global minimum); the N-pair form is
    # log(1 + N e^4) at 45 degrees (docs/methods.md), and a spread-out configuration scores lower.
    b, d = 8, 16
    same = np.tile(unit(np.random.default_rng(11), 1, d), (b, 1))
    np.testing.assert_allclose(angular_loss(same, same, form="hinge").numpy(), np.zeros(b), atol=1e-12)
    np.testing.assert_allclose(angular_loss(same, same).numpy(), np.full(b, math.log(1 + (b - 1) * math.e ** 4)),
                               rtol=1e-9)
    spread = np.eye(b, d)  # orthogonal pairs: a = p, negatives orthogonal to both
    np.testing.assert_allclose(angular_loss(spread, spread).numpy(), np.full(b, math.log(1 + (b - 1) * math.e ** -4)),
                               rtol=1e-9)
    assert float(tf.reduce_sum(angular_loss(spread, spread))) < float(tf.reduce_sum(angular_loss(same, same)))


def test_squared_distance_triplet_matches_oracle():
    rng = np.random.default_rng(1)
    for b in (1, 2, 6):
        a, p = unit(rng, b), unit(rng, b)
        for margin in (0.0, 0.2, 1.0):
            got = squared_distance_triplet_loss(a, p, margin=margin).numpy()
            np.testing.assert_allclose(got, npair_oracle(a, p, f=lambda *t: trip(*t, margin)), atol=1e-10)


def test_gradients_match_finite_differences():
    rng = np.random.default_rng(2)
    a, p, n = (tf.constant(unit(rng, 4, 3)) for _ in range(3))
    for fn in (lambda a, p, n: angular_loss(a, p, n, angle_degrees=40.0, form="hinge"),
               lambda a, p, n: angular_loss(a, p, form="hinge"),
               lambda a, p, n: angular_loss(a, p, n, angle_degrees=40.0),
               lambda a, p, n: angular_loss(a, p, negative_mask=np.array([[0, 1, 1, 0]] * 3 + [[0] * 4], bool)),
               lambda a, p, n: squared_distance_triplet_loss(a, p, n, margin=0.5)):
        theoretical, numerical = tf.test.compute_gradient(lambda a, p, n: tf.reduce_sum(fn(a, p, n)), [a, p, n])
        for t, n_ in zip(theoretical, numerical):
            np.testing.assert_allclose(t, n_, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("form", ["npair", "hinge"])
def test_angular_loss_class_is_symmetric_and_skips_same_image(form):
    rng = np.random.default_rng(3)
    x, y = unit(rng, 7), unit(rng, 7)
    image_index = np.array([0, 0, 1, 2, 2, 2, 3])
    per_anchor = npair_ang if form == "npair" else None
    want = neighborhood_oracle(x, y, -np.ones(7, int), image_index, 0, 0, ang, per_anchor)
    loss = AngularLoss(form=form) if form == "hinge" else AngularLoss()
    terms = loss.compute_terms({"image_index": image_index}, {"image": x, "text": y})
    np.testing.assert_allclose(terms["i2t"].numpy(), want[0], atol=1e-10)
    np.testing.assert_allclose(terms["t2i"].numpy(), want[1], atol=1e-10)
    np.testing.assert_allclose(loss({"image_index": image_index}, {"image": x, "text": y}).numpy(),
                               want[:2].sum(), rtol=1e-6)
    # Without y_true every other row is a negative.
    want = neighborhood_oracle(x, y, -np.ones(7, int), None, 0, 0, ang, per_anchor)
    np.testing.assert_allclose(loss(None, {"image": x, "text": y}).numpy(), want[:2].sum(), rtol=1e-6)


@pytest.mark.parametrize("base, form", [("angular", "npair"), ("angular", "hinge"), ("triplet", "npair")])
def test_neighborhood_loss_matches_oracle(base, form):
    rng = np.random.default_rng(4)
    f = ang if base == "angular" else trip
    per_anchor = npair_ang if (base, form) == ("angular", "npair") else None
    alpha, beta = (0.2, 0.3) if base == "angular" else (0.3, 0.1)
    for b in (1, 2, 8):
        x, y = unit(rng, b), unit(rng, b)
        positions = rng.integers(-1, b, size=b)
        image_index = rng.integers(0, max(1, b - 2), size=b)
        loss = NeighborhoodAngularLoss(base=base, form=form)
        assert (loss.alpha, loss.beta) == (alpha, beta)
        for idx in (None, image_index):
            y_true = {"neighbor_position": positions}
            if idx is not None:
                y_true["image_index"] = idx
            want = neighborhood_oracle(x, y, positions, idx, alpha, beta, f, per_anchor)
            terms = loss.compute_terms(y_true, {"image": x, "text": y})
            assert tuple(terms) == loss.term_names
            np.testing.assert_allclose(np.stack([terms[k].numpy() for k in loss.term_names]), want, atol=1e-10)
            np.testing.assert_allclose(loss(y_true, {"image": x, "text": y}).numpy(), want.sum(), rtol=1e-5, atol=1e-6)


def test_neighbor_coverage_and_missing_neighbors():
    positions = np.array([3, -1, 0, -1])
    assert float(neighbor_coverage(positions)) == 0.5
    assert float(neighbor_coverage({"neighbor_position": positions})) == 0.5
    assert float(NeighborhoodAngularLoss.neighbor_coverage({"neighbor_position": positions})) == 0.5
    assert float(neighbor_coverage(np.zeros([0], int))) == 0.0
    rng = np.random.default_rng(5)
    x, y = unit(rng, 4), unit(rng, 4)
    terms = NeighborhoodAngularLoss().compute_terms({"neighbor_position": -np.ones(4, int)}, {"image": x, "text": y})
    assert float(tf.reduce_sum(terms["text_neighbors"])) == 0 and float(tf.reduce_sum(terms["image_neighbors"])) == 0


def test_graph_mode_with_dynamic_batch():
    loss = NeighborhoodAngularLoss(alpha=0.5, beta=0.7)

    @tf.function(input_signature=[tf.TensorSpec([None, 5], tf.float32), tf.TensorSpec([None, 5], tf.float32),
                                  tf.TensorSpec([None], tf.int32), tf.TensorSpec([None], tf.int32)])
    def step(image, text, positions, image_index):
        return loss({"neighbor_position": positions, "image_index": image_index}, {"image": image, "text": text})

    rng = np.random.default_rng(6)
    for b in (1, 4, 7):
        x, y = unit(rng, b).astype(np.float32), unit(rng, b).astype(np.float32)
        positions = rng.integers(-1, b, size=b).astype(np.int32)
        idx = rng.integers(0, b, size=b).astype(np.int32)
        want = neighborhood_oracle(x.astype(float), y.astype(float), positions, idx, 0.5, 0.7, ang, npair_ang).sum()
        np.testing.assert_allclose(step(x, y, positions, idx).numpy(), want, rtol=1e-5, atol=1e-5)


def test_get_config_round_trip_and_serialization():
    for loss in (AngularLoss(angle_degrees=36.0, name="ang"), AngularLoss(form="hinge"),
                 NeighborhoodAngularLoss(form="hinge"),
                 NeighborhoodAngularLoss(),
                 NeighborhoodAngularLoss(alpha=0.1, beta=0.0, base="triplet", margin=0.3, neighbor_space="image")):
        clone = type(loss).from_config(loss.get_config())
        assert clone.get_config() == loss.get_config()
        restored = keras.losses.deserialize(keras.losses.serialize(loss))
        assert type(restored) is type(loss) and restored.get_config() == loss.get_config()


def test_bad_arguments_raise_value_error_naming_them():
    for angle in (0.0, 90.0, -10.0):
        with pytest.raises(ValueError, match="angle_degrees"):
            AngularLoss(angle_degrees=angle)
    with pytest.raises(ValueError, match="base"):
        NeighborhoodAngularLoss(base="contrastive")
    with pytest.raises(ValueError, match="neighbor_space"):
        NeighborhoodAngularLoss(neighbor_space="doc2vec")
    with pytest.raises(ValueError, match="alpha"):
        NeighborhoodAngularLoss(alpha=-0.2)
    with pytest.raises(ValueError, match="anchors and positives"):
        angular_loss(np.zeros((3, 4)), np.zeros((2, 4)))
    with pytest.raises(ValueError, match="negative_mask"):
        angular_loss(np.zeros((3, 4)), np.zeros((3, 4)), np.zeros((5, 4)), negative_mask=np.ones((3, 4), bool))
    x = unit(np.random.default_rng(7), 3)
    with pytest.raises(ValueError, match="neighbor_position"):
        NeighborhoodAngularLoss()({"image_index": [0, 1, 2]}, {"image": x, "text": x})
    with pytest.raises(tf.errors.InvalidArgumentError, match="neighbor_position"):
        NeighborhoodAngularLoss()({"neighbor_position": [0, 5, 1]}, {"image": x, "text": x})


DISTRIBUTED_SCRIPT = textwrap.dedent("""
    import os
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import numpy as np
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import kitm
    from kitm.losses.sam import SAMLoss
    from kitm.losses.ladder import LadderLoss, AdaptiveLadderLoss
    from kitm.losses.angular import AngularLoss, NeighborhoodAngularLoss

    rng = np.random.default_rng(0)
    b, d = 6, 8
    local = []
    for _ in range(2):
        x = rng.normal(size=(b, d)).astype(np.float32); x /= np.linalg.norm(x, axis=1, keepdims=True)
        y = rng.normal(size=(b, d)).astype(np.float32); y /= np.linalg.norm(y, axis=1, keepdims=True)
        local.append(({"image": x, "text": y},
                      {"relevance": rng.uniform(size=(b, b)).astype(np.float32),
                       "image_index": np.array([0, 0, 1, 2, 3, 4], np.int32),
                       "neighbor_position": rng.integers(-1, b, size=b).astype(np.int32)}))
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    losses = [SAMLoss(tau=3.0), SAMLoss(tau=3.0, pairing="reference", sampling="easiest"), LadderLoss(),
              AdaptiveLadderLoss(), AngularLoss(), NeighborhoodAngularLoss()]
    # Single-device values first: inside the strategy each replica divides its local sum by 2.
    expected = [[float(loss(local[r][1], local[r][0])) / 2 for r in range(2)] for loss in losses]
    inputs = strategy.experimental_distribute_values_from_function(lambda ctx: local[ctx.replica_id_in_sync_group])

    @tf.function
    def run(inputs):
        def replica(batch):
            y_pred, y_true = batch
            image = tf.identity(y_pred["image"])
            with tf.GradientTape() as tape:
                tape.watch(image)
                values = tf.stack([loss(y_true, {"image": image, "text": y_pred["text"]}) for loss in losses])
                total = tf.reduce_sum(values)
            return values, tape.gradient(total, image)
        return strategy.run(replica, args=(inputs,))

    values, grads = run(inputs)
    got = np.stack([v.numpy() for v in strategy.experimental_local_results(values)], axis=1)
    assert np.allclose(got, np.array(expected), rtol=1e-5, atol=1e-6), (got, expected)
    for g in strategy.experimental_local_results(grads):
        assert np.all(np.isfinite(g.numpy())) and np.any(g.numpy() != 0)
    print("OK", got.shape)
""")


def test_every_semantic_loss_under_mirrored_strategy(kitm_python):
    # A fresh process: logical devices must be configured before TensorFlow initialises.
    result = kitm_python(["-c", DISTRIBUTED_SCRIPT], timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "OK (6, 2)" in result.stdout

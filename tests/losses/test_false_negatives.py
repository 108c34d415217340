"""False-negative filtering (kitm.losses.false_negatives) on TensorFlow: under global negatives across two replicas of a
MirroredStrategy each loss equals the one-device loss of the whole batch; a filter that flags nothing is the loss as
published; an anchor whose candidates are all flagged keeps only its positives; the settings round-trip through
get_config; what cannot filter is refused by name. The per-anchor oracles on every backend:
tests/backends/test_losses_false_negatives.py."""

import textwrap

import numpy as np
import pytest

from kitm import losses
from kitm.losses.false_negatives import FalseNegativeFilter

MAKERS = {
    "infonce": lambda **k: losses.InfoNCELoss(logit_scale_init=5.0, **k),
    "graded_infonce": lambda **k: losses.GradedInfoNCELoss(0.2, logit_scale_init=5.0, **k),
    "siglip": lambda **k: losses.SigLIPLoss(**k),
    "triplet": lambda **k: losses.TripletLoss(**k),
    "triplet_sum": lambda **k: losses.TripletLoss(max_violation=False, **k),
    "sam": lambda **k: losses.SAMLoss(3.0, **k),
}


def _batch(rows=8, seed=0):
    rng = np.random.default_rng(seed)
    image, text = rng.normal(size=(rows, 5)), rng.normal(size=(rows, 5))
    image /= np.linalg.norm(image, axis=1, keepdims=True)
    text /= np.linalg.norm(text, axis=1, keepdims=True)
    relevance = rng.uniform(size=(rows, rows))
    y_true = {"relevance": relevance.astype(np.float32), "image_index": np.array([0, 0, 1, 2, 3, 4, 5, 6], np.int32)}
    return y_true, {"image": image.astype(np.float32), "text": text.astype(np.float32)}


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_a_filter_that_flags_nothing_is_the_published_loss_and_settings_round_trip(name):
    y_true, y_pred = _batch()
    keep = MAKERS[name]()(y_true, y_pred)
    for mode in ("mask", "positive"):
        loss = MAKERS[name](false_negatives=mode, false_negative_threshold=2.0)  # relevance is below 1
        np.testing.assert_allclose(loss(y_true, y_pred).numpy(), keep.numpy(), rtol=1e-6)
        config = loss.get_config()
        assert (config["false_negatives"], config["false_negative_threshold"]) == (mode, 2.0)
        assert type(loss).from_config(config).false_negative_filter == loss.false_negative_filter


@pytest.mark.parametrize("name", ["infonce", "graded_infonce", "siglip", "triplet", "sam"])
def test_an_anchor_whose_candidates_are_all_flagged_keeps_only_its_positives(name):
    """Every candidate flagged and masked: the softmax of each anchor holds its positives alone (InfoNCE and graded
    InfoNCE: 0 for a lone positive), SigLIP keeps only the positive pairs' terms, the triplet and SAM have no
    negative (0)."""
    y_true, y_pred = _batch()
    y_true = {"relevance": np.ones((8, 8), np.float32)}
    values = MAKERS[name](false_negatives="mask", false_negative_threshold=0.5).compute_terms(y_true, y_pred)
    if name == "siglip":
        z = 10.0 * np.sum(y_pred["image"] * y_pred["text"], axis=1) - 10.0
        np.testing.assert_allclose(values["i2t"].numpy(), 0.5 * np.log1p(np.exp(-z)), rtol=1e-5)
    else:
        for term, value in values.items():
            np.testing.assert_allclose(value.numpy(), 0.0, atol=1e-6, err_msg=term)


def test_what_cannot_filter_is_refused_by_name():
    class Ladder(losses.RetrievalLoss):  # a loss whose class does not declare supports_false_negatives
        pass

    with pytest.raises(ValueError, match="Ladder has no in-batch negatives to filter"):
        Ladder(name="ladder", false_negatives="mask")
    with pytest.raises(ValueError, match="false_negatives must be one of"):
        losses.InfoNCELoss(false_negatives="drop")
    with pytest.raises(ValueError, match="false_negative_margin must be >= 0"):
        FalseNegativeFilter("mask", "above_positive", margin=-0.1)
    y_true, y_pred = _batch()
    for loss in (losses.InfoNCELoss(false_negatives="mask"), losses.TripletLoss(false_negatives="positive")):
        assert loss.needs_relevance
        with pytest.raises(ValueError, match=r"needs y_true\['relevance'\]"):
            loss({"image_index": y_true["image_index"]}, y_pred)


MIRRORED = textwrap.dedent("""
    import numpy as np
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from kitm import losses

    rng = np.random.default_rng(3)
    image, text = rng.normal(size=(8, 5)), rng.normal(size=(8, 5))
    image /= np.linalg.norm(image, axis=1, keepdims=True); text /= np.linalg.norm(text, axis=1, keepdims=True)
    image, text = image.astype(np.float32), text.astype(np.float32)
    relevance = rng.uniform(size=(8, 8)).astype(np.float32)
    np.fill_diagonal(relevance, 0.8)
    relevance[1, 6] = relevance[6, 1] = relevance[2, 5] = 0.95  # across the replicas' halves
    index = np.array([0, 1, 2, 3, 0, 4, 5, 6], np.int32)  # one image on both replicas
    settings = [dict(false_negatives="mask", false_negative_threshold=0.9),
                dict(false_negatives="positive", false_negative_threshold=0.9),
                dict(false_negatives="mask", false_negative_rule="above_positive", false_negative_margin=0.1)]
    makers = [lambda **k: losses.InfoNCELoss(logit_scale_init=5.0, **k),
              lambda **k: losses.GradedInfoNCELoss(0.2, **k), lambda **k: losses.SigLIPLoss(**k),
              lambda **k: losses.TripletLoss(**k), lambda **k: losses.TripletLoss(max_violation=False, **k),
              lambda **k: losses.SAMLoss(3.0, **k)]
    one_device = [[float(make(**s)({"relevance": relevance, "image_index": index}, {"image": image, "text": text}))
                   for make in makers] for s in settings]
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        filtered = [[make(negatives="global", **s) for make in makers] for s in settings]
    parts = [({"image": image[r * 4:(r + 1) * 4], "text": text[r * 4:(r + 1) * 4]},
              {"relevance": relevance[r * 4:(r + 1) * 4], "image_index": index[r * 4:(r + 1) * 4]}) for r in range(2)]
    inputs = strategy.experimental_distribute_values_from_function(lambda ctx: parts[ctx.replica_id_in_sync_group])

    @tf.function
    def run(inputs):
        return strategy.run(lambda batch: tf.stack([[loss(batch[1], batch[0]) for loss in row] for row in filtered]),
                            args=(inputs,))

    got = sum(v.numpy() for v in strategy.experimental_local_results(run(inputs)))
    assert np.allclose(got, np.array(one_device), rtol=1e-5, atol=1e-6), (got, one_device)
    print("OK", got.shape, np.round(got, 4).tolist())
""")


def test_under_global_negatives_two_replicas_filter_as_one_device(kitm_python):
    """Each replica's rows and columns of the flags come from its relevance blocks; summed over the replicas every
    filtered loss is the one-device loss of the whole batch (a fresh process: two logical CPUs)."""
    result = kitm_python(["-c", MIRRORED], timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "OK (3, 6)" in result.stdout

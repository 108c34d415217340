"""The keras-hub tower settings: their checks, freezing (LiT), per-tower learning-rate multipliers and the hand-over
of a joint preset's logit scale to the contrastive losses' settings."""

import types

import keras
import numpy as np
import pytest
import tensorflow as tf

from kitm.errors import KitmConfigError
from kitm.experiment import encoders, experiment_config
from kitm.training.tower_learning_rates import TowerLearningRateAdam


def test_a_joint_preset_makes_both_towers_hub_ones():
    config = encoders.resolve_hub_settings(experiment_config("synthetic", joint_preset="/some/dir"))
    assert config.model.image_encoder == "hub" and config.model.text_encoder == "hub"


@pytest.mark.parametrize("settings, message", [
    ({"joint_preset": "x", "text_preset": "y"}, "joint_preset gives both towers; drop text_preset"),
    ({"joint_preset": "x", "image_encoder": "small_cnn"}, "drop image_encoder=small_cnn"),
    ({"image_encoder": "hub"}, "image_encoder=hub needs image_preset"),
    ({"text_encoder": "hub"}, "text_encoder=hub needs text_preset"),
    ({"text_preset": "y"}, "text_preset is read by text_encoder=hub only"),
    ({"text_encoder": "lstm"}, "text_encoder=lstm: unknown"),
])
def test_contradicting_tower_settings_are_named(settings, message):
    with pytest.raises(KitmConfigError, match=message):
        encoders.resolve_hub_settings(experiment_config("synthetic", **settings))


def _model():
    from kitm.models import DualEncoder

    keras.utils.set_random_seed(0)
    image = keras.Sequential([keras.layers.Flatten(), keras.layers.Dense(4)], name="image_backbone")
    text = keras.Sequential([keras.layers.Dense(4)], name="text_backbone")
    model = DualEncoder(image, text, 3)
    model({"image": tf.zeros([1, 2, 2, 3]), "tokens": tf.zeros([1, 5])})
    return model


def _one_step(model, config):
    from kitm.experiment.objectives import build_objective

    optimizer = encoders.make_optimizer(config, model, 0.1)
    losses, weights = build_objective(config, steps_per_epoch=1)
    model.compile(optimizer, losses=losses, loss_weights=weights)
    x = {"image": tf.random.uniform([4, 2, 2, 3], seed=1), "tokens": tf.random.uniform([4, 5], seed=2)}
    y = {"image_index": tf.range(4), "caption_index": tf.range(4)}
    model.fit(tf.data.Dataset.from_tensors((x, y)), epochs=1, verbose=0)
    return optimizer


def _weights(layer):
    return [np.array(w) for w in layer.weights]


def test_a_frozen_image_tower_is_unchanged_by_a_fit_step_and_the_rest_trains():
    config = experiment_config("synthetic", freeze_image_tower=True, max_violation=False)
    model = _model()
    encoders.apply_tower_training(config, model)
    image, projection, text = _weights(model.image_encoder), _weights(model.image_projection), _weights(
        model.text_encoder)
    _one_step(model, config)
    assert all(np.array_equal(a, b) for a, b in zip(image, _weights(model.image_encoder)))
    assert not all(np.array_equal(a, b) for a, b in zip(projection, _weights(model.image_projection)))
    assert not all(np.array_equal(a, b) for a, b in zip(text, _weights(model.text_encoder)))


def test_tower_learning_rate_multipliers_scale_each_towers_step():
    # Adam's first step moves every weight by about lr x sign(gradient): the tower's step is the multiplier's share.
    steps = {}
    for multiplier in (1.0, 0.1, 0.0):
        config = experiment_config("synthetic", image_tower_lr_multiplier=multiplier, max_violation=False)
        model = _model()
        before = _weights(model.image_encoder)[0]
        text_before = _weights(model.text_encoder)[0]
        optimizer = _one_step(model, config)
        assert isinstance(optimizer, TowerLearningRateAdam) == (multiplier != 1.0)
        steps[multiplier] = (np.abs(_weights(model.image_encoder)[0] - before).max(),
                             np.abs(_weights(model.text_encoder)[0] - text_before).max())
    assert steps[1.0][0] == pytest.approx(0.1, rel=1e-3) and steps[0.1][0] == pytest.approx(0.01, rel=1e-3)
    assert steps[0.0][0] == 0.0
    assert steps[0.1][1] == pytest.approx(0.1, rel=1e-3)  # the text tower keeps the full rate


def test_the_joint_logit_scale_goes_to_the_contrastive_settings():
    import math

    clip = types.SimpleNamespace(family="clip", logit_scale=math.log(50.0), logit_bias=None)
    siglip = types.SimpleNamespace(family="siglip", logit_scale=math.log(8.0), logit_bias=-12.0)
    config = experiment_config("synthetic", loss=["infonce"])
    handed = encoders.hand_over_logit_scale(config, clip)
    assert handed.objective.logit_scale_init == pytest.approx(50.0) and "logit_scale_init" in handed.preset
    handed = encoders.hand_over_logit_scale(config, siglip)
    assert handed.objective.siglip_logit_scale_init == pytest.approx(8.0)
    assert handed.objective.siglip_bias_init == -12.0
    assert handed.objective.logit_scale_init == config.objective.logit_scale_init
    # A value given explicitly wins over the preset's.
    given = experiment_config("synthetic", loss=["infonce"], logit_scale_init=20.0)
    assert encoders.hand_over_logit_scale(given, clip).objective.logit_scale_init == 20.0
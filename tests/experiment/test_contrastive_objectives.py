"""The contrastive objectives in the registry: composable by `loss` with the papers' losses, settings by name."""

from __future__ import annotations

import math

import pytest

import kitm  # noqa: F401  (selects the TensorFlow backend)
from kitm.errors import KitmConfigError
from kitm.experiment import build_objective, experiment_config
from kitm.losses import GradedInfoNCELoss, InfoNCELoss, LadderLoss, SAMLoss, SigLIPLoss


def test_infonce_composes_with_sam():
    config = experiment_config("synthetic", loss=["infonce", "sam"], loss_weights=[1, 0.5], relevance="cider",
                               logit_scale_init=20.0, max_logit_scale=50.0)
    losses, weights = build_objective(config)
    assert list(losses) == ["infonce", "sam"] and weights == {"infonce": 1.0, "sam": 0.5}
    infonce = losses["infonce"]
    assert isinstance(infonce, InfoNCELoss) and isinstance(losses["sam"], SAMLoss)
    assert infonce.logit_scale_init == 20.0 and infonce.max_logit_scale == 50.0
    assert math.isclose(float(infonce.logit_scale), 20.0, rel_tol=1e-6)
    assert infonce.uses_model_optimizer and len(infonce.trainable_variables) == 1


def test_graded_infonce_with_relevance_and_its_defaults():
    losses, weights = build_objective(experiment_config("synthetic", loss=["graded_infonce"], relevance="truth",
                                                        graded_tau=0.05))
    assert list(losses) == ["graded_infonce"] and weights == {"graded_infonce": 1.0}
    graded = losses["graded_infonce"]
    assert isinstance(graded, GradedInfoNCELoss) and graded.tau_relevance == 0.05
    assert math.isclose(graded.logit_scale_init, 1 / 0.07) and graded.max_logit_scale == 100.0


def test_siglip_composes_with_the_ladder():
    config = experiment_config("synthetic", loss=["siglip", "ladder"], loss_weights=[2, 1], relevance="sbert",
                               siglip_bias_init=-5.0, max_logit_scale=0.0)
    losses, weights = build_objective(config)
    assert list(losses) == ["siglip", "ladder"] and weights == {"siglip": 2.0, "ladder": 1.0}
    siglip = losses["siglip"]
    assert isinstance(siglip, SigLIPLoss) and isinstance(losses["ladder"], LadderLoss)
    assert siglip.bias_init == -5.0 and math.isclose(float(siglip.logit_scale), 10.0, rel_tol=1e-6)
    assert siglip.monitor_names == ("logit_scale", "bias") and len(siglip.trainable_variables) == 2
    # max_logit_scale=0 means no clip for the InfoNCE losses.
    infonce, _ = build_objective(experiment_config("synthetic", loss=["infonce"], max_logit_scale=0.0))
    assert infonce["infonce"].max_logit_scale is None


def test_graded_infonce_without_relevance_is_refused_by_name():
    with pytest.raises(KitmConfigError) as raised:
        build_objective(experiment_config("synthetic", loss=["graded_infonce"]))
    assert str(raised.value).startswith("loss=graded_infonce learns from graded relevance: set relevance")
    assert raised.value.for_flags().startswith("--loss=graded_infonce learns from graded relevance: set --relevance")
    # InfoNCE and SigLIP need none.
    for name in ("infonce", "siglip"):
        assert list(build_objective(experiment_config("synthetic", loss=[name]))[0]) == [name]


def test_a_bad_setting_is_named():
    with pytest.raises(KitmConfigError, match="graded_tau"):
        build_objective(experiment_config("synthetic", loss=["graded_infonce"], relevance="truth", graded_tau=0.0))

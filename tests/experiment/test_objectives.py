"""The objective registry reads what a loss can do from its class (kitm.losses.base, "what a loss can do"), for
kitm's losses and a user's alike, and the launcher loads a user's objective module (`--objective_module`)."""

import json
import pathlib
import subprocess
import sys

import pytest

from kitm.errors import KitmConfigError
from kitm.experiment import build_objective, experiment_config, objectives, register_objective
from kitm.losses import TripletLoss

PACKAGE = pathlib.Path(__file__).parent / "objective_package"  # the user's package (not a test module)

# Written from the papers and kitm's methods page, not read from the classes: which losses learn from graded
# relevance, which can gather global negatives (those that read only the similarity matrix and labels), and which
# cannot be replayed by gradient caching (the centres train their own parameters from each batch).
NEEDS_RELEVANCE = {"sam", "ladder", "ladder_adaptive", "graded_infonce"}
GLOBAL_NEGATIVES = {"triplet", "sam", "infonce", "siglip", "graded_infonce"}
NO_GRADIENT_CACHING = {"centers"}
# The in-batch objectives of issue 47 (item 1): their negatives are the batch's other rows.
FALSE_NEGATIVES = {"triplet", "sam", "infonce", "siglip", "graded_infonce"}
KITM_OBJECTIVES = ("triplet", "sam", "ladder", "ladder_adaptive", "angular", "neighborhood", "centers", "infonce",
                   "siglip", "graded_infonce")


@pytest.mark.parametrize("name", KITM_OBJECTIVES)
def test_each_objective_can_do_what_its_loss_class_declares(name):
    objective = objectives.OBJECTIVES[name]
    assert objective.needs_relevance == (name in NEEDS_RELEVANCE)
    assert objective.global_negatives == (name in GLOBAL_NEGATIVES)
    assert objective.gradient_caching == (name not in NO_GRADIENT_CACHING)
    assert objective.false_negatives == (name in FALSE_NEGATIVES)
    declared = objective.resolved_class()
    assert objective.global_negatives == declared.supports_global_negatives  # read there, not declared here too


@pytest.fixture
def user_objectives(monkeypatch):
    """The user's package on the path and imported (it registers double_margin and local_only once per process)."""
    monkeypatch.syspath_prepend(str(PACKAGE))
    import importlib

    return importlib.import_module("kitm_test_objectives")


def test_a_users_loss_with_global_negatives_gathers_like_kitms_own(user_objectives):
    config = experiment_config("synthetic", loss=["double_margin", "triplet"])
    resolved = objectives.resolve_negatives(config, replicas=2)
    assert resolved.training.negatives == "global"  # auto: global, as every loss can gather
    losses, _ = build_objective(resolved)
    assert isinstance(losses["double_margin"], user_objectives.DoubleMarginTripletLoss)
    assert losses["double_margin"].negatives == "global" and losses["double_margin"].margin == pytest.approx(0.4)
    # A class declared unable to gather keeps auto local, and global is refused naming it.
    mixed = experiment_config("synthetic", loss=["local_only", "triplet"])
    assert objectives.resolve_negatives(mixed, replicas=2).training.negatives == "local"
    with pytest.raises(KitmConfigError) as error:
        objectives.resolve_negatives(mixed.replace(negatives="global"), replicas=2)
    assert "--loss=local_only cannot gather" in error.value.for_flags()
    assert build_objective(mixed)[0]["local_only"].negatives == "local"


def test_the_checks_read_relevance_and_gradient_caching_from_the_class():
    class NeedsRelevance(TripletLoss):
        needs_relevance = True

    class TrainsItsOwnState(TripletLoss):
        supports_gradient_caching = False

    register_objective("test_needs_relevance", NeedsRelevance)
    register_objective("test_own_state", TrainsItsOwnState)
    try:
        with pytest.raises(KitmConfigError) as error:
            experiment_config("synthetic", loss=["test_needs_relevance"], relevance="none")
        assert error.value.for_flags().startswith("--loss=test_needs_relevance learns from graded relevance")
        config = experiment_config("synthetic", loss=["test_own_state"], batch_size=8, grad_cache_chunk=4)
        with pytest.raises(KitmConfigError, match="test_own_state trains state of its own from each batch"):
            objectives.check_grad_cache(config, replicas=1)
    finally:
        objectives.OBJECTIVES.pop("test_needs_relevance")
        objectives.OBJECTIVES.pop("test_own_state")


def test_a_registration_says_its_class_and_a_builder_keeps_to_it():
    with pytest.raises(TypeError, match="give loss_class=<the class build returns>"):
        register_objective("test_no_class", lambda config, warmup: TripletLoss())
    with pytest.raises(TypeError, match="loss_class must be a keras.losses.Loss subclass"):
        register_objective("test_not_a_loss", lambda config, warmup: None, loss_class=dict)

    class Declared(TripletLoss):
        pass

    register_objective("test_other_class", lambda config, warmup: TripletLoss(), loss_class=Declared)
    register_objective("test_local_builder", lambda config, warmup: Declared(), loss_class=Declared)
    try:
        with pytest.raises(KitmConfigError, match="its builder returned TripletLoss, not the registered loss_class"):
            build_objective(experiment_config("synthetic", loss=["test_other_class"]))
        config = experiment_config("synthetic", loss=["test_local_builder"], negatives="global")
        with pytest.raises(KitmConfigError, match="pass negatives=loss_negatives\\(config\\)"):
            build_objective(config)
    finally:
        objectives.OBJECTIVES.pop("test_other_class")
        objectives.OBJECTIVES.pop("test_local_builder")
    assert "test_no_class" not in objectives.OBJECTIVES and "test_not_a_loss" not in objectives.OBJECTIVES


def test_an_objective_module_that_cannot_be_imported_is_named():
    with pytest.raises(KitmConfigError) as error:
        experiment_config("synthetic", objective_module=["no_such_package.losses"], loss=["triplet"])
    assert error.value.for_flags().startswith("--objective_module=no_such_package.losses: cannot import it")


@pytest.mark.slow
def test_the_launcher_trains_a_users_loss_from_its_objective_module(tiny_synthetic, tiny_flags, subprocess_env,
                                                                    launch_refused_on, repo_root, tmp_path):
    """A loss defined in the user's package, loaded by --objective_module, gathering global negatives on 2 CPU devices;
    refused, naming the flag, where it cannot gather or is not loaded."""
    env = dict(subprocess_env(), PYTHONPATH=f"{repo_root}:{PACKAGE}")
    common = [*tiny_flags, f"--data_dir={tiny_synthetic}", "--epochs=1", "--eval_every_epochs=0",
              "--projector_samples=0", "--export=false"]
    done = subprocess.run([sys.executable, "-m", "kitm.launch", *common, f"--run_dir={tmp_path / 'run'}",
                           "--objective_module=kitm_test_objectives", "--loss=double_margin,triplet",
                           "--loss_weights=1,0.5", "--negatives=global", "--strategy=mirrored", "--cpu_devices=2"],
                          env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["replicas"] == 2
    history = summary["history"]
    assert "double_margin/i2t" in history and "triplet/i2t" in history, sorted(history)
    # In one interpreter, the unknown loss first: the module, once imported, has registered it.
    unknown, refused = launch_refused_on("tensorflow", [
        [*common, f"--run_dir={tmp_path / 'unknown'}", "--loss=double_margin"],
        [*common, f"--run_dir={tmp_path / 'refused'}", "--objective_module=kitm_test_objectives", "--loss=local_only",
         "--negatives=global"]], python_path=[PACKAGE])
    assert unknown["code"] == 2 and "unknown loss ['double_margin']" in unknown["stderr"], unknown
    assert refused["code"] == 2 and "--loss=local_only cannot gather the other replicas' rows" in refused["stderr"]


def test_false_negative_filtering_reaches_the_losses_and_is_refused_where_it_cannot_work():
    config = experiment_config("synthetic", loss=["infonce", "triplet"], relevance="truth", false_negatives="mask",
                               false_negative_rule="above_positive", false_negative_margin=0.05)
    built, _ = build_objective(config)
    for loss in built.values():
        assert loss.false_negative_filter.get_config() == {
            "false_negatives": "mask", "false_negative_rule": "above_positive", "false_negative_threshold": 0.8,
            "false_negative_margin": 0.05}
    with pytest.raises(KitmConfigError) as error:
        experiment_config("synthetic", loss=["triplet", "ladder"], relevance="truth", false_negatives="positive")
    assert error.value.for_flags().startswith("--false_negatives=positive: --loss=triplet,ladder includes ladder, "
                                              "which has no in-batch negatives to filter")
    with pytest.raises(KitmConfigError) as error:
        experiment_config("synthetic", loss=["infonce"], relevance="none", false_negatives="mask")
    assert "--false_negatives=mask flags candidates by their relevance: set --relevance" in error.value.for_flags()

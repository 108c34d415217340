"""kitm.experiment.config: typed settings with the launcher's names and defaults, the dataset presets, and errors
that name a setting in Python and a flag through the launcher."""

import dataclasses
import pathlib

import pytest
from absl import flags

from kitm import launch
from kitm.errors import KitmConfigError, option, render_options
from kitm.experiment import ExperimentConfig, build_objective, experiment_config, register_objective
from kitm.experiment import objectives
from kitm.experiment.config import SECTION_OF, SETTING_NAMES
from kitm.losses import TripletLoss

FLAGS = flags.FLAGS


def test_every_launcher_flag_is_a_setting_with_the_same_default():
    assert set(launch.KITM_FLAG_NAMES) == set(SETTING_NAMES)
    defaults = ExperimentConfig().settings()
    for name in SETTING_NAMES:
        value = defaults[name]
        expected = [str(item) for item in value] if isinstance(value, list) else value
        assert FLAGS[name].default == expected, name


def test_presets_fill_only_what_was_not_given():
    config = experiment_config("synthetic", image_size=40, epochs=2)
    assert (config.data.image_size, config.training.epochs) == (40, 2)
    assert config.model.image_encoder == "small_cnn" and config.model.weights == "none"  # the world's presets
    assert {"weights", "embedding_dim"} <= config.preset and not {"image_size", "epochs"} & config.preset
    assert config.explicit == {"dataset", "image_size", "epochs"}
    # The centers objective's schedule only with loss=centers.
    assert "num_quantized_centers" not in config.preset
    centers = experiment_config("synthetic", loss=["centers"])
    assert centers.objective.num_quantized_centers == 50 and centers.objective.center_phase_epochs == (9, 1, 3)
    photos = experiment_config("coco")
    assert (photos.model.image_encoder, photos.data.image_size, photos.model.weights) == ("resnet152", 224, "imagenet")


def test_flat_settings_round_trip_and_replace_marks_them_explicit():
    config = experiment_config("synthetic", loss=["triplet", "sam"], loss_weights=[1, 0.5], relevance="truth")
    assert config.objective.loss == ("triplet", "sam") and config.objective.loss_weights == (1, 0.5)
    flat = config.settings()
    assert flat["loss"] == ["triplet", "sam"] and set(flat) == set(SETTING_NAMES)
    assert all(config.get(name) == (tuple(value) if isinstance(value, list) else value)
               for name, value in flat.items())
    bigger = config.replace(batch_size=64)
    assert bigger.training.batch_size == 64 and "batch_size" in bigger.explicit and config.training.batch_size == 128
    assert dataclasses.replace(config, run_dir="x").run_dir == "x"
    assert {section for section in SECTION_OF.values()} == {"data", "model", "objective", "training", "evaluation",
                                                            "export"}


def test_unknown_settings_and_strings_for_sequences_are_named():
    with pytest.raises(KitmConfigError, match="Unknown setting 'epoch'"):
        experiment_config("synthetic", epoch=3)
    with pytest.raises(KitmConfigError, match="loss takes a sequence"):
        experiment_config("synthetic", loss="triplet")


def test_an_error_names_the_setting_in_python_and_the_flag_through_the_launcher():
    # The objective is checked once, when the configuration is made; building it does not check again.
    with pytest.raises(KitmConfigError) as raised:
        experiment_config("synthetic", loss=["sam"])
    assert str(raised.value).startswith("loss=sam learns from graded relevance: set relevance ")
    assert raised.value.for_flags().startswith("--loss=sam learns from graded relevance: set --relevance ")
    with pytest.raises(launch.LaunchError, match="^--loss=sam learns from graded relevance: set --relevance"):
        with launch.flag_errors():
            experiment_config("synthetic", loss=["sam"])
    assert build_objective(experiment_config("synthetic", loss=["sam"], relevance="truth"))[0]
    assert render_options(f"{option('a_b')}=1 and {option('c')}", "--") == "--a_b=1 and --c"


def test_a_registered_objective_is_built_from_python_and_composes_with_the_papers():
    def build(config, warmup):
        return TripletLoss(margin=0.05, max_violation=False, name="wide")

    register_objective("test_wide_triplet", build, loss_class=TripletLoss, key="wide")
    try:
        losses, weights = build_objective(experiment_config("synthetic", loss=["test_wide_triplet", "sam"],
                                                            relevance="truth", loss_weights=[1, 0.5]))
        assert list(losses) == ["wide", "sam"] and losses["wide"].margin == 0.05 and weights["sam"] == 0.5
        with pytest.raises(KitmConfigError, match="already registered"):
            register_objective("test_wide_triplet", build, loss_class=TripletLoss)
    finally:
        objectives.OBJECTIVES.pop("test_wide_triplet")


@pytest.mark.parametrize("settings, message", [
    ({"learning_rate": float("nan")}, "learning_rate=nan: not a finite number; give a finite one in [0, 1]"),
    ({"learning_rate": 1e30}, "learning_rate=1e+30: must be in [0, 1] (Adam moves each weight"),
    ({"finetune_learning_rate": 2.0}, "finetune_learning_rate=2: must be in [0, 1]"),
    ({"sam_tau": float("inf")}, "sam_tau=inf: not a finite number; give a finite one >= 1e-06"),
    ({"ladder_margins": [0.2, float("-inf")]}, "ladder_margins=0.2,-inf: item -inf is not a finite number"),
    ({"angle_degrees": 90.0}, "angle_degrees=90: must be in [1, 89]; the default is 45."),
    ({"batch_size": 1}, "batch_size=1: must be >= 2; the default is 128."),
    ({"negatives": "everywhere"}, "negatives=everywhere: not one of its choices; choose from auto, global, local."),
    ({"epochs": "3"}, "epochs=3: not a whole number (a str)."),
    ({"flip": "false"}, "flip=false: not true or false (a str)."),
])
def test_bounds_and_choices_are_checked_when_the_configuration_is_made(settings, message):
    """In Python the error names the keyword, through the launcher the flag (tests/test_launch.py)."""
    for make in (lambda: experiment_config("synthetic", **settings), lambda: ExperimentConfig().replace(**settings)):
        with pytest.raises(KitmConfigError) as raised:
            make()
        assert str(raised.value).startswith(message)
        assert raised.value.for_flags().startswith("--" + message)
    section = SECTION_OF[next(iter(settings))]
    with pytest.raises(KitmConfigError, match="^" + next(iter(settings))):  # a section made directly checks too
        dataclasses.replace(getattr(ExperimentConfig(), section), **settings)


def test_settings_are_normalised_and_the_bounds_themselves_accepted():
    config = ExperimentConfig().replace(jit_compile=True, epochs=3.0, loss=["triplet"], learning_rate=1,
                                        angle_degrees=89.0, train_fraction=1e-6, neighborhood_alpha=None)
    assert (config.training.jit_compile, config.training.epochs, config.objective.loss) == ("true", 3, ("triplet",))
    assert type(config.training.epochs) is int
    assert ExperimentConfig().replace(data_dir=pathlib.Path("tfrecords/x")).data.data_dir == "tfrecords/x"
    filled = config.fill(embedding_dim=64)
    assert filled.model.embedding_dim == 64 and "embedding_dim" in filled.preset
    assert "embedding_dim" not in filled.explicit

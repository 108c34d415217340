"""The launcher's --loss flags build each paper's objective, and refuse impossible settings by flag name."""

import pathlib

import pytest
from absl import flags

import kitm  # noqa: F401
from kitm import launch
from kitm.experiment import datasets, objectives
from kitm.losses import AdaptiveLadderLoss, AngularLoss, LadderLoss, NeighborhoodAngularLoss, SAMLoss, TripletLoss

FLAGS = flags.FLAGS


def build_objective(steps_per_epoch=1):
    """What the launcher builds for the parsed flags, with the library's errors named by flag."""
    with launch.flag_errors():
        return objectives.build_objective(launch.experiment_config(), steps_per_epoch)


@pytest.fixture
def parse():
    def parse_flags(*args):
        FLAGS.unparse_flags()
        FLAGS(["kitm.launch", *args])
        return build_objective()[0]

    yield parse_flags
    FLAGS.unparse_flags()


def test_each_loss_flag_builds_its_objective(parse):
    triplet = parse("--loss=triplet", "--margin=0.3", "--max_violation=false")["triplet"]
    assert isinstance(triplet, TripletLoss) and (triplet.margin, triplet.max_violation) == (0.3, False)
    sam = parse("--loss=sam", "--relevance=truth", "--sam_tau=3", "--sam_sampling=random", "--sam_weight=0.5")["sam"]
    assert isinstance(sam, SAMLoss)
    assert (sam.tau, sam.sampling, sam.sam_weight, sam.triplet_weight) == (3.0, "random", 0.5, 1.0)
    ladder = parse("--loss=ladder", "--relevance=truth", "--ladder_thresholds=0.6,0.3",
                   "--ladder_margins=0.2,0.01,0.01", "--ladder_betas=1,0.25,0.125")["ladder"]
    assert isinstance(ladder, LadderLoss) and list(ladder.thresholds) == [0.6, 0.3]
    adaptive = parse("--loss=ladder_adaptive", "--relevance=truth", "--ladder_level_bounds=2,5")["ladder"]
    assert isinstance(adaptive, AdaptiveLadderLoss) and tuple(adaptive.level_bounds) == (2, 5)
    assert adaptive.lloyd_runs == 1
    exact = parse("--loss=ladder_adaptive", "--relevance=truth", "--ladder_lloyd_runs=0")["ladder"]
    assert exact.lloyd_runs == 0
    assert isinstance(parse("--loss=angular", "--angle_degrees=40")["angular"], AngularLoss)


def test_relevance_losses_need_a_relevance_source(parse):
    with pytest.raises(launch.LaunchError, match="--loss=sam learns from graded relevance: set --relevance"):
        parse("--loss=sam")


def test_inconsistent_ladder_flags_are_named(parse):
    with pytest.raises(launch.LaunchError, match="--loss=ladder"):
        parse("--loss=ladder", "--relevance=truth", "--ladder_thresholds=0.3,0.6")
    with pytest.raises(launch.LaunchError, match="--ladder_margins=a,b"):
        parse("--loss=ladder", "--relevance=truth", "--ladder_margins=a,b")


def test_several_losses_are_composed_with_their_weights():
    FLAGS.unparse_flags()
    try:
        FLAGS(["kitm.launch", "--loss=triplet,ladder_adaptive,neighborhood", "--loss_weights=1,0.5,2",
               "--relevance=sbert", "--neighborhood_base=triplet"])
        losses, weights = build_objective()
        assert list(losses) == ["triplet", "ladder", "neighborhood"]
        assert weights == {"triplet": 1.0, "ladder": 0.5, "neighborhood": 2.0}
        neighborhood = losses["neighborhood"]
        assert isinstance(neighborhood, NeighborhoodAngularLoss)
        assert (neighborhood.base, neighborhood.alpha, neighborhood.beta) == ("triplet", 0.3, 0.1)
        config = launch.experiment_config()
        assert objectives.uses_neighbor_batching(config)
        assert objectives.required_relevance_slots(config) == ["sbert", "neighbors"]
        assert datasets.default_data_dir(config) == "tfrecords/synthetic_neighbors_sbert"
    finally:
        FLAGS.unparse_flags()


@pytest.mark.parametrize("args, message", [
    (["--loss=triplet,bleu"], "unknown loss"),
    (["--loss=ladder,ladder_adaptive", "--relevance=truth"], "names a loss twice"),
    (["--loss=triplet,angular", "--loss_weights=1"], "gives 1 weights for the 2 losses"),
    (["--loss=triplet", "--loss_weights=-1"], "must be >= 0"),
    (["--loss=triplet,ladder"], "--loss=ladder learns from graded relevance"),
])
def test_bad_loss_combinations_are_named(parse, args, message):
    with pytest.raises(launch.LaunchError, match=message):
        parse(*args)


def test_dataset_defaults_fill_only_flags_nobody_set():
    FLAGS.unparse_flags()
    try:
        FLAGS(["kitm.launch", "--dataset=synthetic", "--image_size=40"])
        config = launch.experiment_config()
        assert config.data.image_size == 40 and config.model.image_encoder == "small_cnn"
        assert config.model.weights == "none"
        assert "weights" in config.preset and "image_size" not in config.preset
        FLAGS.unparse_flags()
        FLAGS(["kitm.launch", f"--flagfile={pathlib.Path(__file__).parents[1] / 'launch' / 'sam.flags'}"])
        config = launch.experiment_config()
        assert (config.data.dataset, config.model.image_encoder, config.data.image_size,
                config.data.relevance) == ("f30k", "resnet152", 224, "cider")
    finally:
        FLAGS.unparse_flags()


@pytest.mark.parametrize("flagfile, keys", [("sam.flags", ["sam"]), ("ladder.flags", ["ladder"]),
                                            ("ladder_adaptive.flags", ["ladder"]),
                                            ("neighborhoods.flags", ["neighborhood"]),
                                            ("neighborhoods_imgnns.flags", ["neighborhood"])])
def test_every_paper_flagfile_builds_its_objective_on_the_synthetic_world(flagfile, keys):
    FLAGS.unparse_flags()
    try:
        FLAGS(["kitm.launch", f"--flagfile={pathlib.Path(__file__).parents[1] / 'launch' / flagfile}",
               "--dataset=synthetic"])
        config = launch.experiment_config()
        losses, _ = build_objective()
        assert list(losses) == keys and config.model.image_encoder == "small_cnn"
        if "neighborhood" in losses:  # the Img NNs flagfile draws neighbours from the image-space rows
            space = "image" if "imgnns" in flagfile else "text"
            assert losses["neighborhood"].neighbor_space == config.objective.neighbor_space == space
            assert objectives.required_relevance_slots(config)[-1] == {"text": "neighbors",
                                                                       "image": "image_neighbors"}[space]
    finally:
        FLAGS.unparse_flags()


def test_hardest_warmup_and_angular_form_flags_reach_every_loss(parse):
    FLAGS.unparse_flags()
    FLAGS(["kitm.launch", "--loss=triplet,sam,ladder", "--relevance=truth", "--hardest_warmup_epochs=1.5"])
    losses, _ = build_objective(steps_per_epoch=10)
    assert {name: loss.hardest_warmup_steps for name, loss in losses.items()} == {"triplet": 15, "sam": 15,
                                                                                  "ladder": 15}
    adaptive = parse("--loss=ladder_adaptive", "--relevance=truth", "--max_violation=false")["ladder"]
    assert adaptive.max_violation is False and adaptive.hardest_warmup_steps == 0
    assert parse("--loss=angular")["angular"].form == "npair"
    assert parse("--loss=angular", "--angular_form=hinge")["angular"].form == "hinge"
    assert parse("--loss=neighborhood", "--angular_form=hinge")["neighborhood"].form == "hinge"


def test_synthetic_defaults_avoid_the_collapsing_configurations():
    """The synthetic world's encoders start from random weights: the sum over negatives everywhere (also the
    ladder's first rung), the N-pair angular form, and the centers phases scaled to the world."""
    FLAGS.unparse_flags()
    try:
        for flagfile in ("ladder.flags", "ladder_adaptive.flags", "sam.flags", "neighborhoods.flags"):
            FLAGS.unparse_flags()
            FLAGS(["kitm.launch", f"--flagfile={pathlib.Path(__file__).parents[1] / 'launch' / flagfile}",
                   "--dataset=synthetic"])
            for loss in build_objective()[0].values():
                assert getattr(loss, "max_violation", False) is False, flagfile
                assert getattr(loss, "form", "npair") == "npair", flagfile
        FLAGS.unparse_flags()
        FLAGS(["kitm.launch", f"--flagfile={pathlib.Path(__file__).parents[1] / 'launch' / 'centers.flags'}",
               "--dataset=synthetic"])
        config = objectives.center_phase_config(launch.experiment_config(), 2100)
        assert config.phase_epochs == (9, 1, 3) and config.learning_rates == (2e-3, 2e-4, 2e-4)
        assert config.triplet_sampling == "all"
        assert (config.num_quantized_centers, config.margin_update_every) == (50, 50)
        # On photos the paper's schedule (the flag defaults, also the photo defaults).
        FLAGS.unparse_flags()
        FLAGS(["kitm.launch", f"--flagfile={pathlib.Path(__file__).parents[1] / 'launch' / 'centers.flags'}"])
        config = objectives.center_phase_config(launch.experiment_config(), 113287)
        assert config.phase_epochs == (30, 15, 10) and config.learning_rates == (2e-4, 2e-5, 2e-5)
        assert config.triplet_sampling == "random" and config.term_weights == (1.0, 1.0, 1.0)
    finally:
        FLAGS.unparse_flags()


def test_the_flags_are_generated_from_the_settings_declarations():
    """One flag per setting of kitm.experiment.config, with its default, help, choices and bounds."""
    import dataclasses
    import typing

    from kitm.experiment import config as settings

    fields = {field.name: (section, field) for section, cls in settings.SECTIONS.items()
              for field in dataclasses.fields(cls)}
    assert sorted(launch.KITM_FLAG_NAMES) == sorted([*fields, "run_dir"]) == sorted(settings.SETTINGS)
    for name, (section, field) in fields.items():
        flag, spec = FLAGS[name], settings.SETTINGS[name]
        hint = typing.get_type_hints(settings.SECTIONS[section])[name]
        default = [str(item) for item in field.default] if isinstance(field.default, tuple) else field.default
        assert flag.default == default, name
        assert field.metadata["help"] and field.metadata["help"] in flag.help, name  # enum help starts <a|b>:
        choices = typing.get_args(hint) if typing.get_origin(hint) is typing.Literal else None
        assert (list(choices) if choices else None) == (getattr(flag.parser, "enum_values", None) or None), name
        assert (spec.lower, spec.upper) == (field.metadata["lower_bound"], field.metadata["upper_bound"]), name
        bounds = settings.bounds_text(spec)
        assert (f"values {bounds}" in flag.help) == bool(bounds), name
        kind = {bool: "BooleanFlag", int: "Flag", float: "Flag", str: "Flag", tuple: "Flag"}[spec.kind]
        assert type(flag).__name__ == ("EnumFlag" if choices else kind), name
        parser = {bool: "BooleanParser", int: "IntegerParser", float: "FloatParser", str: "ArgumentParser",
                  tuple: "ListParser"}[spec.kind]
        assert choices or type(flag.parser).__name__ == parser, name
    assert FLAGS["run_dir"].default is None and FLAGS["run_dir"].help == settings.RUN_DIR_HELP
    assert [name for name in launch.KITM_FLAG_NAMES if FLAGS[name].help.count(".") == 0] == []
    # --negatives' choices are spelled once, in config.Negatives.
    assert FLAGS["negatives"].parser.enum_values == list(typing.get_args(settings.Negatives))


def test_helpfull_lists_every_setting_with_its_help(launch, tmp_path):
    from kitm.experiment.config import SETTINGS

    done = launch(["--helpfull"], cwd=tmp_path, timeout=300)
    assert done.returncode == 1 and not done.stderr, done.stderr[-2000:]  # absl's help exits with status 1
    text = " ".join(done.stdout.split())  # absl wraps the help at 80 columns
    for name, spec in SETTINGS.items():
        assert f"--{name}:" in text or f"--[no]{name}:" in text, name
        assert " ".join(spec.help.split())[:40] in text, name
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("args, message", [
    (["--learning_rate=nan"], "--learning_rate=nan: not a finite number; give a finite one in [0, 1] (the default "
                              "is 0.0002)."),
    (["--learning_rate=1e30"], "--learning_rate=1e+30: must be in [0, 1] (Adam moves each weight by up to about the "
                               "learning rate per step; above 1 the loss diverges); the default is 0.0002."),
    (["--margin=inf"], "--margin=inf: not a finite number; give a finite one >= 0 (the default is 0.2)."),
    (["--loss_weights=1,nan", "--loss=triplet,sam", "--relevance=truth"], "--loss_weights=1,nan: item nan is not a "
                                                                          "finite number"),
    (["--image_size=8"], "--image_size=8: must be >= 16; the default is 64."),
    (["--ladder_level_bounds=2,4.5"], "--ladder_level_bounds=2,4.5: '4.5' is not a whole number"),
])
def test_a_setting_out_of_its_bounds_is_refused_naming_the_flag(args, message):
    FLAGS.unparse_flags()
    try:
        FLAGS(["kitm.launch", *args])  # absl takes the value; the configuration refuses it, once
        with pytest.raises(launch.LaunchError) as raised:
            launch.experiment_config()
        assert str(raised.value).startswith(message)
    finally:
        FLAGS.unparse_flags()


def test_a_non_finite_learning_rate_stops_the_launcher_before_it_writes_anything(tmp_path, monkeypatch,
                                                                                    launch_refused):
    monkeypatch.chdir(tmp_path)
    stderr = launch_refused(["--learning_rate=nan", f"--run_dir={tmp_path / 'run'}"])
    assert stderr.strip() == ("kitm.launch: error: --learning_rate=nan: not a finite number; give a finite one in "
                              "[0, 1] (the default is 0.0002).")
    assert not list(tmp_path.iterdir())  # no run folder, no world built

"""The study's tuning blocks (kitm.study.tuning): each arm's choice by the rule fixed in the spec, against choices
worked out by hand from the module docstring's rule (best mean over the seeds; the default kept within the margin;
ties to the earlier configuration; nothing chosen from part of a grid), and spec errors naming the file and key."""

import pytest

from kitm.study.spec import SpecError, load_spec
from kitm.study.tuning import choices, choose, tuning_markdown

SPEC = """
name = "tune"
seeds = [0, 1]
[[configuration]]
name = "a"
flags = ["--loss=triplet"]
[[configuration]]
name = "a_m0.1"
flags = ["--loss=triplet", "--margin=0.1"]
[[configuration]]
name = "a_lr"
flags = ["--loss=triplet", "--learning_rate=1e-3"]
[[configuration]]
name = "b"
flags = ["--loss=sam"]
[[tuning]]
arm = "a"
configurations = ["a", "a_m0.1", "a_lr"]
[[tuning]]
arm = "b"
configurations = ["b"]
metric = "i2t_medr"
keep_default_within = 0
"""


def _load(tmp_path, text):
    path = tmp_path / "s.toml"
    path.write_text(text)
    return load_spec(path)


def _values(rsum: dict) -> dict:
    return {configuration: {"rsum": seeds} for configuration, seeds in rsum.items()}


SEEDS = {"a": (0, 1), "a_m0.1": (0, 1), "a_lr": (0, 1)}


def test_the_spec_holds_each_arm_with_its_default_first(tmp_path):
    spec = _load(tmp_path, SPEC)
    first, second = spec.tuning
    assert (first.arm, first.default, first.metric, first.keep_default_within) == ("a", "a", "rsum", 0.5)
    assert (second.metric, second.keep_default_within) == ("i2t_medr", 0.0)
    assert spec.as_dict()["tuning"][0]["configurations"] == ["a", "a_m0.1", "a_lr"]


@pytest.mark.parametrize("rsum, chosen, best", [
    # means a 200.0, a_m0.1 200.4, a_lr 199.0: the best is 0.4 above the default, within 0.5: the default stays
    ({"a": {0: 199.0, 1: 201.0}, "a_m0.1": {0: 200.8, 1: 200.0}, "a_lr": {0: 199.0, 1: 199.0}}, "a", "a_m0.1"),
    # a_m0.1's mean 200.6 is 0.6 above: it wins
    ({"a": {0: 199.0, 1: 201.0}, "a_m0.1": {0: 201.2, 1: 200.0}, "a_lr": {0: 199.0, 1: 199.0}}, "a_m0.1", "a_m0.1"),
    # exactly 0.5 above (binary fractions, no rounding): the default stays
    ({"a": {0: 200.0, 1: 200.0}, "a_m0.1": {0: 200.5, 1: 200.5}, "a_lr": {0: 0.0, 1: 0.0}}, "a", "a_m0.1"),
    # a tie between two others far above the default: the earlier one
    ({"a": {0: 100.0, 1: 100.0}, "a_m0.1": {0: 150.0, 1: 150.0}, "a_lr": {0: 140.0, 1: 160.0}}, "a_m0.1",
     "a_m0.1"),
    # the default best
    ({"a": {0: 300.0, 1: 300.0}, "a_m0.1": {0: 200.0, 1: 200.0}, "a_lr": {0: 100.0, 1: 100.0}}, "a", "a"),
])
def test_the_choice_is_the_best_mean_unless_the_default_is_within_the_margin(tmp_path, rsum, chosen, best):
    spec = _load(tmp_path, SPEC)
    choice = choose(spec.tuning[0], _values(rsum), SEEDS)
    assert (choice.chosen, choice.best) == (chosen, best)
    assert choice.means["a"] == pytest.approx(sum(rsum["a"].values()) / 2)


def test_a_gap_of_the_margin_in_decimal_figures_keeps_the_default(tmp_path):
    """Means of 255.6 and 256.1 (one-decimal figures): 0.5 apart on paper, 0.5000000000000284 in floating point."""
    spec = _load(tmp_path, SPEC)
    rsum = {"a": {0: 261.2, 1: 250.0}, "a_m0.1": {0: 250.5, 1: 261.7}, "a_lr": {0: 100.0, 1: 100.0}}
    choice = choose(spec.tuning[0], _values(rsum), SEEDS)
    assert (choice.chosen, choice.best) == ("a", "a_m0.1")
    assert choice.reason == "the default stays: the best (a_m0.1) is better by 0.5, within 0.5"
    rsum["a_m0.1"][1] = 261.8  # 0.55 better: it wins
    choice = choose(spec.tuning[0], _values(rsum), SEEDS)
    assert choice.chosen == "a_m0.1" and choice.reason == "better than the default by 0.55, more than 0.5"


def test_a_metric_no_run_has_is_said_so(tmp_path):
    spec = _load(tmp_path, SPEC.replace('configurations = ["a", "a_m0.1", "a_lr"]',
                                        'configurations = ["a", "a_m0.1", "a_lr"]\nmetric = "rsun"'))
    values = {c: {"rsum": {0: 1.0, 1: 1.0}} for c in SEEDS}
    choice = choose(spec.tuning[0], values, SEEDS)
    assert choice.chosen is None and "no run of the arm has the metric 'rsun'" in choice.reason


def test_nothing_is_chosen_while_a_run_of_the_arm_is_missing(tmp_path):
    spec = _load(tmp_path, SPEC)
    choice = choose(spec.tuning[0], _values({"a": {0: 200.0, 1: 200.0}, "a_m0.1": {0: 900.0}, "a_lr": {}}), SEEDS)
    assert choice.chosen is None and choice.best is None
    assert choice.reason == "not chosen yet: 3 of the arm's 6 runs are in"
    assert choice.missing == {"a": (), "a_m0.1": (1,), "a_lr": (0, 1)} and choice.means["a_lr"] is None
    lines = "\n".join(tuning_markdown([choice]))
    assert "| a | a_m0.1 | 0: 900.00 (missing 1) | 900.00 |  |" in lines
    assert "| a | a_lr | none (missing 0, 1) | n/a |  |" in lines


def test_a_metric_whose_lower_values_are_better_is_minimised(tmp_path):
    spec = _load(tmp_path.joinpath(), SPEC.replace('configurations = ["b"]', 'configurations = ["b", "a_lr"]')
                 .replace('configurations = ["a", "a_m0.1", "a_lr"]', 'configurations = ["a", "a_m0.1"]'))
    values = {"b": {"i2t_medr": {0: 3.0, 1: 3.0}}, "a_lr": {"i2t_medr": {0: 2.0, 1: 3.0}}}
    choice = choose(spec.tuning[1], values, {"b": (0, 1), "a_lr": (0, 1)})
    assert (choice.chosen, choice.best) == ("a_lr", "a_lr")  # medr 2.5 below the default's 3.0, margin 0


def test_the_study_seeds_are_each_configurations_unless_it_names_its_own(tmp_path):
    spec = _load(tmp_path, SPEC.replace('flags = ["--loss=sam"]', 'flags = ["--loss=sam"]\nseeds = [1]'))
    found = choices(spec, {"b": {"i2t_medr": {1: 4.0}}})
    assert found[1].chosen == "b" and found[0].chosen is None
    # Naming the study's seeds is the same as naming none.
    spec = _load(tmp_path, SPEC.replace('flags = ["--loss=triplet", "--margin=0.1"]',
                                        'flags = ["--loss=triplet", "--margin=0.1"]\nseeds = [1, 0]'))
    assert spec.tuning[0].configurations == ("a", "a_m0.1", "a_lr")


@pytest.mark.parametrize("edit, key, message", [
    (lambda s: s.replace('configurations = ["b"]', 'configurations = ["nope"]'), "tuning[1].configurations[0]",
     "'nope' is not a configuration"),
    (lambda s: s.replace('configurations = ["b"]', 'configurations = ["b", "a"]'), "tuning[1].configurations[1]",
     "'a' is already in the arm 'a'"),
    (lambda s: s.replace("keep_default_within = 0", "keep_default_within = -1"), "tuning[1].keep_default_within",
     "must be a number >= 0"),
    (lambda s: s.replace('arm = "b"', 'arm = "a"'), "tuning", "two [[tuning]] blocks have the same arm"),
    (lambda s: s.replace('flags = ["--loss=triplet", "--margin=0.1"]', 'flags = ["--loss=triplet", "--margin=0.1"]\n'
                         'seeds = [1]'), "tuning[0].configurations[1]", "'a_m0.1' runs other seeds than 'a'"),
    (lambda s: s.replace('metric = "i2t_medr"', 'metrics = "x"'), "tuning[1].metrics", "unknown key"),
])
def test_bad_blocks_name_the_file_and_key(tmp_path, edit, key, message):
    with pytest.raises(SpecError) as error:
        _load(tmp_path, edit(SPEC))
    assert str(error.value).startswith(f"{tmp_path / 's.toml'}: {key}: "), str(error.value)
    assert message in str(error.value)

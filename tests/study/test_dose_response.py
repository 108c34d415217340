"""The study's dose-response blocks: parsing (errors naming the spec file and key), the paired rows per level
against hand-computed intervals, the table and the figure."""

import numpy as np
import pytest
from scipy import stats

from kitm.study.dose_response import (dose_response_figure, dose_response_markdown, dose_response_rows)
from kitm.study.plots import _pyplot
from kitm.study.spec import SpecError, load_spec
from kitm.study.statistics import paired_comparison

SPEC = """
name = "dose"
seeds = [0, 1, 2]
baseline = "base_a"
[[configuration]]
name = "base_a"
flags = ["--loss=triplet"]
[[configuration]]
name = "base_b"
flags = ["--loss=triplet", "--margin=0.1"]
[[configuration]]
name = "arm_a"
flags = ["--loss=sam"]
[[configuration]]
name = "arm_b"
flags = ["--loss=sam", "--margin=0.1"]
[[dose_response]]
name = "gain against the level"
x_label = "near-duplicate rate"
levels = [0.0, 0.9]
metrics = ["i2t_NCS@10"]
[[dose_response.arm]]
name = "SAM"
configurations = ["arm_a", "arm_b"]
baselines = ["base_a", "base_b"]
"""


def _load(tmp_path, text):
    path = tmp_path / "s.toml"
    path.write_text(text)
    return load_spec(path), path


def test_a_block_parses_and_one_baseline_name_serves_every_level(tmp_path):
    spec, _ = _load(tmp_path, SPEC)
    (block,) = spec.dose_responses
    assert block.levels == (0.0, 0.9) and block.arms[0].baselines == ("base_a", "base_b")
    spec, _ = _load(tmp_path, SPEC.replace('baselines = ["base_a", "base_b"]', 'baselines = "base_a"'))
    assert spec.dose_responses[0].arms[0].baselines == ("base_a", "base_a")
    assert spec.as_dict()["dose_responses"][0]["arms"][0]["configurations"] == ["arm_a", "arm_b"]


@pytest.mark.parametrize("edit, key, message", [
    (lambda s: s.replace('configurations = ["arm_a", "arm_b"]', 'configurations = ["arm_a"]'),
     "dose_response[0].arm[0].configurations", "1 names for 2 levels"),
    (lambda s: s.replace('baselines = ["base_a", "base_b"]', 'baselines = ["base_a", "nope"]'),
     "dose_response[0].arm[0].baselines[1]", "'nope' is not a configuration"),
    (lambda s: s.replace("levels = [0.0, 0.9]", "levels = [0.0]"), "dose_response[0].levels", "at least two"),
    (lambda s: s.replace('x_label = "near-duplicate rate"', 'xlabel = "x"'), "dose_response[0].xlabel",
     "unknown key"),
])
def test_bad_blocks_name_the_file_and_key(tmp_path, edit, key, message):
    with pytest.raises(SpecError) as error:
        _load(tmp_path, edit(SPEC))
    assert str(error.value).startswith(f"{tmp_path / 's.toml'}: {key}: "), str(error.value)
    assert message in str(error.value)


def test_rows_are_the_paired_improvements_at_each_level_and_the_table_and_figure_show_them(tmp_path):
    spec, _ = _load(tmp_path, SPEC)
    (block,) = spec.dose_responses
    values = {"base_a": {0: 60.0, 1: 61.0, 2: 62.0}, "arm_a": {0: 60.5, 1: 61.2, 2: 62.6},
              "base_b": {0: 50.0, 1: 50.0}, "arm_b": {}}

    def compare(configuration, baseline, metric):
        if not values[configuration] and not values[baseline]:
            return None
        return paired_comparison(values[configuration], values[baseline])

    rows = dose_response_rows(block, compare)
    assert [(row["level"], row["n"]) for row in rows] == [(0.0, 3), (0.9, 0)]
    differences = np.array([0.5, 0.2, 0.6])  # by hand: arm_a - base_a per seed
    half = stats.t.ppf(0.975, 2) * differences.std(ddof=1) / np.sqrt(3)
    assert rows[0]["mean"] == pytest.approx(differences.mean())
    assert (rows[0]["low"], rows[0]["high"]) == pytest.approx((differences.mean() - half, differences.mean() + half))
    assert rows[1]["mean"] is None or rows[1]["n"] == 0
    table = dose_response_markdown(block, rows, lambda metric: 2)
    assert table[2] == "| metric | arm | near-duplicate rate = 0 | near-duplicate rate = 0.9 |"
    assert table[4].startswith("| i2t_NCS@10 | SAM | +0.43 [")
    figure = dose_response_figure(block, rows, _pyplot())
    assert figure is not None
    _pyplot().close(figure)
    assert dose_response_figure(block, [dict(row, mean=None) for row in rows], _pyplot()) is None

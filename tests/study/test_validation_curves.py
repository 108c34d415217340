"""kitm.study.validation_curves: per-epoch validation figures over seeds, from runs' evaluations.jsonl, into the
report (oracle: numpy means and scipy's t quantile on hand-made histories)."""

import json
import math

import numpy as np
import pytest
from scipy import stats

from kitm.study import cli
from kitm.study.validation_curves import collect_curves, curve_rows, curves_markdown, peak, read_history


SPEC = """
name = "toy"
out_dir = "{out}"
seeds = [0, 1, 2]
baseline = "base"
[evaluation]
split = "test"
[[configuration]]
name = "base"
flags = ["--loss=triplet"]
[[configuration]]
name = "other"
flags = ["--loss=triplet", "--margin=0.1"]
"""


def _history(path, records):
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


def test_read_history_keeps_the_last_line_of_a_repeated_epoch(tmp_path):
    # A run killed after validating epoch 2 and resumed from a backup before it validates epoch 2 again.
    path = _history(tmp_path / "evaluations.jsonl", [
        {"epoch": 1, "val_rsum": 100.0}, {"epoch": 2, "val_rsum": 150.0}, {"epoch": 2, "val_rsum": 151.5},
        {"epoch": 3, "val_rsum": 170.0, "val_i2t_R@1": 20.0}])
    assert read_history(path) == ({1: 100.0, 2: 151.5, 3: 170.0}, [])
    history, problems = read_history(path, "val_i2t_R@1")  # another metric: only the lines that have it
    assert history == {3: 20.0} and len(problems) == 3


@pytest.mark.parametrize("line, message", [
    ('{"epoch": 2, "val_rs', "line 2: not JSON"),  # torn by a kill
    ('{"val_rsum": 1.0}', "line 2: no integer 'epoch' >= 1"),
    ('{"epoch": 0, "val_rsum": 1.0}', "line 2: no integer 'epoch' >= 1"),
    ('{"epoch": 2}', "line 2: no finite number for 'val_rsum'"),
    ('{"epoch": 2, "val_rsum": NaN}', "line 2: no finite number for 'val_rsum'"),  # json.dumps writes NaN
    ('[1, 2]', "line 2: no integer 'epoch' >= 1"),
])
def test_a_bad_line_is_skipped_and_named(tmp_path, line, message):
    path = tmp_path / "evaluations.jsonl"
    path.write_text('{"epoch": 1, "val_rsum": 1.0}\n' + line + '\n{"epoch": 3, "val_rsum": 3.0}\n')
    history, problems = read_history(path)
    assert history == {1: 1.0, 3: 3.0}
    assert len(problems) == 1 and problems[0].startswith(f"{path}, {message}") and problems[0].endswith("skipped.")


def test_curve_rows_against_numpy_and_scipy():
    histories = {0: {1: 100.0, 2: 150.0, 3: 160.0}, 1: {1: 104.0, 2: 146.0, 3: 158.0}, 2: {1: 99.0, 2: 151.0}}
    rows = curve_rows(histories)
    assert [row["epoch"] for row in rows] == [1, 2, 3] and [row["n"] for row in rows] == [3, 3, 2]
    epoch2 = np.array([150.0, 146.0, 151.0])
    half = stats.t.ppf(0.975, 2) * epoch2.std(ddof=1) / math.sqrt(3)
    assert rows[1]["mean"] == pytest.approx(epoch2.mean())
    assert (rows[1]["low"], rows[1]["high"]) == pytest.approx((epoch2.mean() - half, epoch2.mean() + half))
    assert rows[2]["per_seed"] == {0: 160.0, 1: 158.0}
    assert peak(rows)["epoch"] == 2  # epoch 3 is higher but seed 2 never reached it
    single = curve_rows({4: {2: 10.0}})
    assert single == [{"epoch": 2, "n": 1, "mean": 10.0, "low": None, "high": None, "per_seed": {4: 10.0}}]
    assert peak([]) is None
    # Ties: the earlier epoch is the peak (the shorter schedule reaches the same figure).
    assert peak(curve_rows({0: {1: 5.0, 2: 7.0, 3: 7.0}}))["epoch"] == 2


def test_collect_curves_warns_on_missing_and_broken_histories(tmp_path):
    for name in ("a0", "a1", "a2", "b0", "c0"):
        (tmp_path / name).mkdir()
    _history(tmp_path / "a0" / "evaluations.jsonl", [{"epoch": 2, "val_rsum": 10.0}])
    _history(tmp_path / "a1" / "evaluations.jsonl", [{"epoch": 2, "val_rsum": 12.0}])
    (tmp_path / "c0" / "evaluations.jsonl").write_text("{broken\n")
    curves, warnings = collect_curves([("a", 0, tmp_path / "a0"), ("a", 1, tmp_path / "a1"),
                                       ("a", 2, tmp_path / "a2"), ("b", 0, tmp_path / "b0"),
                                       ("c", 0, tmp_path / "c0")])
    assert list(curves) == ["a"] and curves["a"][0]["mean"] == pytest.approx(11.0)
    # `b` never validated (no warning); `a` lacks seed 2's history; `c`'s only line is torn.
    assert len(warnings) == 2
    assert str(tmp_path / "c0" / "evaluations.jsonl") in warnings[0] and "line 1: not JSON" in warnings[0]
    assert warnings[1] == "validation history: configuration 'a' has none for seed(s) 2; its curve is over 2 seed(s)"


def test_the_peak_compares_epochs_every_seed_reached():
    # Seed 1's history stops at epoch 4 (a run killed and its later lines lost): epoch 6's mean is seed 0 alone.
    rows = curve_rows({0: {2: 10.0, 4: 12.0, 6: 20.0}, 1: {2: 10.0, 4: 11.0}})
    assert [row["n"] for row in rows] == [2, 2, 1] and peak(rows)["epoch"] == 4


def test_markdown_marks_each_configurations_peak():
    curves = {"long": curve_rows({0: {2: 10.0, 4: 12.0, 6: 11.0}, 1: {2: 10.0, 4: 14.0, 6: 11.0}}),
              "short": curve_rows({0: {2: 9.0, 4: 9.5}})}
    lines = curves_markdown(curves)
    assert lines[0] == "## Validation during training"
    table = {line.split(" | ")[0]: line for line in lines if line.startswith("| ") and line[2].isdigit()}
    assert "**13.0 [" in table["| 4"] and "(2)**" in table["| 4"] and "**9.5 (1)**" in table["| 4"]
    assert table["| 6"].endswith("|  |")  # `short` never validated epoch 6
    assert curves_markdown({}) == []


def test_the_study_report_shows_the_curves(tmp_path, capsys):
    spec_path = tmp_path / "study.toml"
    spec_path.write_text(SPEC.format(out=tmp_path / "study"))
    study = tmp_path / "study"
    for configuration in ("base", "other"):
        for seed in (0, 1, 2):
            directory = study / "runs" / configuration / f"seed_{seed}"
            directory.mkdir(parents=True)
            (directory / "study_eval.json").write_text(json.dumps({"flat": {"i2t_R@1": 20.0 + seed}, "rsum": 1.0}))
            if configuration == "other":  # no history at its done runs: `other` has no curve
                continue
            _history(directory / "evaluations.jsonl", [{"epoch": e, "val_rsum": 100.0 + 10 * e - e * e + seed}
                                                       for e in (2, 4, 6, 8)])
    # A run still training (no study_eval.json yet) has a partial history: it waits until the run is done.
    running = study / "runs" / "other" / "seed_2"
    _history(running / "evaluations.jsonl", [{"epoch": 2, "val_rsum": 1.0}])
    (running / "study_eval.json").unlink()
    assert cli.main([f"--spec={spec_path}", "--report_only", "--no-progress"]) == 0
    report = json.loads((study / "report.json").read_text())
    curves = report["validation_curves"]
    assert curves["metric"] == "val_rsum" and list(curves["curves"]) == ["base"]
    by_epoch = {row["epoch"]: row for row in curves["curves"]["base"]}
    assert by_epoch[4]["mean"] == pytest.approx(100.0 + 40 - 16 + 1.0) and by_epoch[4]["n"] == 3
    markdown = (study / "report.md").read_text()
    assert "## Validation during training" in markdown and "| 4 | **125.0 [" in markdown
    assert (study / "plots" / "validation_curves.png").stat().st_size > 5000
    assert "plots/validation_curves.png" in report["plots"]

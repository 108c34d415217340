"""Configurations that train another study's choice on validation (kitm.study.tuned): the chosen flags then the
configuration's own, a configuration waiting while its arm's grid misses a run (neither run nor reported), and
spec errors naming the file and key. The tuning study's runs are kitm.eval-shaped JSON files written here."""

import json

import pytest

from kitm.study import cli
from kitm.study.spec import SpecError, load_spec
from kitm.study.tuned import resolve, waiting

COMMON = 'common_flags = ["--dataset=synthetic", "--epochs=2"]\n'

TUNING = """
name = "tune"
out_dir = "{out}"
seeds = [0, 1]
""" + COMMON + """
[evaluation]
split = "val"
[[configuration]]
name = "a"
flags = ["--loss=triplet"]
[[configuration]]
name = "a_m0.1"
flags = ["--loss=triplet", "--margin=0.1"]
[[configuration]]
name = "b"
flags = ["--loss=sam"]
[[configuration]]
name = "b_w3"
flags = ["--loss=sam", "--sam_weight=3"]
[[tuning]]
arm = "a"
configurations = ["a", "a_m0.1"]
[[tuning]]
arm = "b"
configurations = ["b", "b_w3"]
"""

CLAIMS = """
name = "claims"
out_dir = "{out}"
seeds = [0, 1, 2]
tuned_by = "{tuning}"
""" + COMMON + """
[[configuration]]
name = "w0.a"
tuned_arm = "a"
[[configuration]]
name = "w2.a"
tuned_arm = "a"
flags = ["--data_dir=tfrecords/w2", "--margin=0.3"]
[[configuration]]
name = "w0.b"
tuned_arm = "b"
[[configuration]]
name = "plain"
flags = ["--loss=angular"]
[[claim]]
name = "b beats a"
configuration = "w0.b"
baseline = "w0.a"
improves = ["rsum"]
[[claim]]
name = "a in world 2"
configuration = "w2.a"
baseline = "w0.a"
improves = ["rsum"]
"""


def _run(out, configuration, seed, rsum):
    """A finished run of the tuning study: its kitm.eval report (no status file: made outside the study)."""
    directory = out / "runs" / configuration / f"seed_{seed}"
    directory.mkdir(parents=True)
    (directory / "study_eval.json").write_text(json.dumps({"flat": {"i2t_R@1": 1.0}, "rsum": rsum}))


@pytest.fixture
def studies(tmp_path):
    """The tuning spec with arm a complete (a_m0.1 better by 2.0 rsum) and arm b missing b_w3's seed 1."""
    tuning_out = tmp_path / "tune"
    for configuration, values in {"a": (200.0, 202.0), "a_m0.1": (203.0, 203.0), "b": (150.0, 150.0)}.items():
        for seed, rsum in enumerate(values):
            _run(tuning_out, configuration, seed, rsum)
    _run(tuning_out, "b_w3", 0, 190.0)
    tuning = tmp_path / "tune.toml"
    tuning.write_text(TUNING.format(out=tuning_out))
    claims = tmp_path / "claims.toml"
    claims.write_text(CLAIMS.format(out=tmp_path / "claims", tuning=tuning))
    return tmp_path, claims


def test_a_tuned_configuration_trains_the_chosen_flags_then_its_own(studies):
    _, claims = studies
    spec, records = resolve(load_spec(claims))
    assert spec.configuration("w0.a").flags == ("--loss=triplet", "--margin=0.1")
    # its own flags after the chosen ones, so that its --margin overrides the chosen margin
    assert spec.configuration("w2.a").flags == ("--loss=triplet", "--margin=0.1", "--data_dir=tfrecords/w2",
                                                "--margin=0.3")
    assert spec.configuration("plain").flags == ("--loss=angular",)
    by_name = {record.configuration: record for record in records}
    assert set(by_name) == {"w0.a", "w2.a", "w0.b"}
    assert (by_name["w0.a"].chosen, by_name["w0.a"].arm) == ("a_m0.1", "a")
    assert "better than the default by 2" in by_name["w0.a"].reason


def test_a_configuration_whose_arm_misses_a_run_waits(studies):
    _, claims = studies
    spec, records = resolve(load_spec(claims))
    assert waiting(records) == {"w0.b"}
    record = next(r for r in records if r.configuration == "w0.b")
    assert record.chosen is None
    assert "waits for" in record.reason and "'b'" in record.reason and "3 of the arm's 4 runs" in record.reason
    assert spec.configuration("w0.b").flags == ()  # unresolved: no command is made from it


def test_the_study_neither_runs_nor_reports_a_waiting_configuration(studies, capsys):
    _, claims = studies
    assert cli.main([f"--spec={claims}", "--dry_run"]) == 0
    printed = capsys.readouterr().out
    assert "w0.b seed" not in printed
    assert "# w0.b: waits, not run" in printed
    # the resolved command: common flags, the chosen configuration's, then the configuration's own
    line = next(line for line in printed.splitlines() if "kitm.launch" in line and "w2.a/seed_0" in line)
    assert "--dataset=synthetic --epochs=2 --loss=triplet --margin=0.1 --data_dir=tfrecords/w2 --margin=0.3" in line


def test_the_report_names_each_tuned_configuration_and_what_waits(studies):
    tmp_path, claims = studies
    assert cli.main([f"--spec={claims}", "--report_only", "--no-progress"]) == 0
    report = json.loads((tmp_path / "claims" / "report.json").read_text())
    records = {r["configuration"]: r for r in report["tuned_configurations"]}
    assert records["w2.a"]["chosen"] == "a_m0.1" and records["w0.b"]["chosen"] is None
    assert not any(run["configuration"] == "w0.b" for run in report["runs"])
    assert "w0.b" not in report["aggregates"] and "w2.a" in report["aggregates"]  # no empty column for it
    assert [claim["name"] for claim in report["claims"]] == ["a in world 2"]  # the other compares w0.b
    assert any("claim 'b beats a' is not judged yet: w0.b wait(s)" in warning for warning in report["warnings"])
    assert any("wait for their arm's choice" in warning and "w0.b" in warning for warning in report["warnings"])
    markdown = (tmp_path / "claims" / "report.md").read_text()
    assert "| w2.a | a | a_m0.1 |" in markdown and "| w0.b | b | (waits) |" in markdown


def test_tuned_arm_needs_tuned_by(tmp_path):
    spec = tmp_path / "s.toml"
    spec.write_text('name = "s"\nseeds = [0, 1]\n[[configuration]]\nname = "x"\ntuned_arm = "a"\n')
    with pytest.raises(SpecError, match=r"s\.toml: configuration\[0\]\.tuned_arm: needs the top-level `tuned_by`"):
        load_spec(spec)


def test_an_arm_the_tuning_study_does_not_have_is_named(studies):
    _, claims = studies
    claims.write_text(claims.read_text().replace('tuned_arm = "b"', 'tuned_arm = "c"'))
    with pytest.raises(SpecError, match=r"configuration\[2\]\.tuned_arm: 'c' is not a \[\[tuning\]\] arm of .*"
                                        r"tune\.toml \(its arms: a, b\)"):
        resolve(load_spec(claims))


def test_studies_with_other_common_flags_are_refused(studies):
    _, claims = studies
    claims.write_text(claims.read_text().replace('"--epochs=2"]', '"--epochs=3"]'))
    with pytest.raises(SpecError, match=r"claims\.toml: tuned_by: .*tune\.toml's common_flags differ"):
        resolve(load_spec(claims))


def test_a_missing_tuning_spec_is_named(studies):
    tmp_path, claims = studies
    (tmp_path / "tune.toml").unlink()
    with pytest.raises(SpecError, match=r"claims\.toml: tuned_by: .*tune\.toml: no such spec file"):
        resolve(load_spec(claims))


def test_runs_of_a_configuration_that_waits_again_are_named(studies):
    """An arm whose grid grows again (its choice undone) leaves evaluated runs that the report cannot show: it
    says which."""
    tmp_path, claims = studies
    run = tmp_path / "claims" / "runs" / "w0.b" / "seed_1"
    run.mkdir(parents=True)
    (run / "study_eval.json").write_text(json.dumps({"flat": {}, "rsum": 1.0}))
    assert cli.main([f"--spec={claims}", "--report_only", "--no-progress"]) == 0
    report = json.loads((tmp_path / "claims" / "report.json").read_text())
    assert any("wait for their arm's choice are not in the figures: w0.b/seed_1" in w for w in report["warnings"])

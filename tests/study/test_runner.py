"""kitm.study: spec validation, the runner's resume and failure handling (with a stand-in interpreter), reports
built from hand-made eval JSONs (a study through the real launcher and kitm.eval: tests/end_to_end/test_study.py)."""

import dataclasses
import json
import math
import os
import re
import shutil
import sys
import textwrap

import numpy as np
import pytest
from scipy import stats

from kitm.study import cli, commands, runs
from kitm.study.runner import remaining_text, run_all, run_one
from kitm.study.spec import SpecError, load_spec


SPEC = """
name = "toy"
out_dir = "{out}"
seeds = [0, 1, 2]
baseline = "base"
common_flags = ["--dataset=synthetic", "--epochs=1"]
[evaluation]
split = "test"
relevance = "truth"
[[configuration]]
name = "base"
flags = ["--loss=triplet"]
[[configuration]]
name = "better"
flags = ["--loss=triplet", "--margin=0.1"]
[[claim]]
name = "better improves NCS and keeps R@1"
configuration = "better"
improves = ["i2t_NCS@10", "t2i_NCS@10"]
keeps = ["i2t_R@1"]
keep_tolerance = 1.0
[[claim]]
name = "better improves R@1"
configuration = "better"
improves = ["i2t_R@1"]
"""


def _write_spec(tmp_path, text=SPEC, **fields):
    path = tmp_path / "study.toml"
    path.write_text(textwrap.dedent(text).format(out=tmp_path / "study", **fields))
    return path


def _payload(figures):
    """A kitm.eval report as the study reads it: the flat figures plus rsum (sum of R@K both ways)."""
    flat = dict(figures)
    rsum = sum(value for name, value in flat.items() if "_R@" in name and "IR_R" not in name)
    return {"flat": flat, "rsum": rsum}


def _figures(r1, ncs, medr=3.0):
    return {"i2t_R@1": r1, "i2t_R@5": r1 + 20, "i2t_R@10": r1 + 30, "t2i_R@1": r1 - 5, "t2i_R@5": r1 + 15,
            "t2i_R@10": r1 + 25, "i2t_NCS@1": ncs - 2, "i2t_NCS@5": ncs - 1, "i2t_NCS@10": ncs, "t2i_NCS@1": ncs + 1,
            "t2i_NCS@5": ncs + 2, "t2i_NCS@10": ncs + 3, "i2t_medr": medr, "t2i_medr": medr + 1,
            "i2t_meanr": medr * 3, "t2i_meanr": medr * 3 + 2, "i2t_CS@3": 0.4, "t2i_CS@3": 0.35}


def _fake_run(study, configuration, seed, figures):
    directory = study / "runs" / configuration / f"seed_{seed}"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "study_eval.json").write_text(json.dumps(_payload(figures)))
    return directory


# Hand-made figures: `better` gains NCS clearly (+3.0, +3.4, +2.7), keeps R@1 within a point (+0.2, -0.3, +0.1).
BASE = {0: _figures(30.0, 60.0), 1: _figures(31.5, 61.0), 2: _figures(29.0, 59.0)}
BETTER = {0: _figures(30.2, 63.0, 2.0), 1: _figures(31.2, 64.4, 2.0), 2: _figures(29.1, 61.7, 2.0)}


# ---------------------------------------------------------------------------------------------------- the spec

def test_spec_parses_with_defaults(tmp_path):
    spec = load_spec(_write_spec(tmp_path))
    assert spec.name == "toy" and spec.seeds == (0, 1, 2) and spec.baseline == "base"
    assert spec.configuration_names == ("base", "better")
    assert spec.evaluation.relevance == "truth" and spec.evaluation.extra_args == ()
    assert spec.claims[0].keep_tolerance == {"i2t_R@1": 1.0}
    assert spec.claims[1].baseline == "base" and spec.metrics is None
    assert spec.verdict_rules.collapse_threshold is None and not spec.verdict_rules.random_effect


def test_verdict_rules_parse(tmp_path):
    """The third claims study's registered rules (collapse, the world as a random effect) are read from the spec."""
    path = _write_spec(tmp_path)
    path.write_text(path.read_text() + "\n[verdict_rules]\ncollapse_threshold = 0.999\nrandom_effect = true\n")
    rules = load_spec(path).verdict_rules
    assert rules.collapse_threshold == 0.999 and rules.collapse_share == 0.5 and rules.random_effect


def _add_to_better(line):
    """A spec edit: one more key in the `better` configuration's table."""
    better = 'flags = ["--loss=triplet", "--margin=0.1"]'
    return lambda s: s.replace(better, f"{better}\n{line}")


@pytest.mark.parametrize("edit, key, message", [
    (lambda s: s.replace("seeds = [0, 1, 2]\n", ""), "seeds", "missing"),
    (lambda s: s.replace("seeds = [0, 1, 2]", "seeds = [0, 1, 1]"), "seeds", "repeats"),
    (lambda s: s.replace("seeds = [0, 1, 2]", "seeds = [0, -1]"), "seeds[1]", "integer >= 0"),
    (lambda s: s.replace('baseline = "base"', 'baseline = "nope"'), "baseline", "not a configuration"),
    (lambda s: s.replace('name = "toy"', 'name = "toy"\nsead = 3'), "sead", "unknown key"),
    (lambda s: s.replace('name = "better"', 'name = "base"'), "configuration[1].name", "names two"),
    (lambda s: s.replace('name = "better"', 'name = "a/b"'), "configuration[1].name", "names a folder"),
    (lambda s: s.replace('flags = ["--loss=triplet"]', 'flags = ["--loss=triplet", "--seed=3"]'),
     "configuration[0].flags[1]", "--seed is set by the study"),
    (lambda s: s.replace('flags = ["--loss=triplet"]', 'flags = ["loss=triplet"]'),
     "configuration[0].flags[0]", "is not a flag"),
    (lambda s: s.replace('flags = ["--loss=triplet"]', 'flags = ["--flagfile=launch/nothing.flags"]'),
     "configuration[0].flags[0]", "does not exist"),
    (lambda s: s.replace('relevance = "truth"', 'relevance = "bleu"'), "evaluation.relevance", "not one of"),
    (lambda s: s.replace('relevance = "truth"', 'relevance = "truth"\nextra_args = ["--out=x.json"]'),
     "evaluation.extra_args[0]", "--out is set by the study"),
    (lambda s: s.replace("keep_tolerance = 1.0\n", ""), "claim[0].keep_tolerance", "missing"),
    (lambda s: s.replace("keep_tolerance = 1.0", "keep_tolerance = -1.0"), "claim[0].keep_tolerance", ">= 0"),
    (lambda s: s.replace("keep_tolerance = 1.0", 'keep_tolerance = {"t2i_R@1" = 1.0}'),
     "claim[0].keep_tolerance.t2i_R@1", "is not one of the claim's 'keeps'"),
    (lambda s: s.replace("keep_tolerance = 1.0", "keep_tolerance = {}"), "claim[0].keep_tolerance",
     "no tolerance for i2t_R@1"),
    (lambda s: s.replace('configuration = "better"\nimproves = ["i2t_R@1"]', 'configuration = "base"\n'
                                                                            'improves = ["i2t_R@1"]'),
     "claim[1].baseline", "with itself"),
    (lambda s: s.replace('configuration = "better"\nimproves = ["i2t_R@1"]', 'configuration = "better"'),
     "claim[1]", "at least one metric"),
    (lambda s: s + "[[claim]]\nname = 'x'\nconfiguration = 'gone'\nimproves = ['rsum']\n",
     "claim[2].configuration", "not a configuration"),
    (_add_to_better("seeds = [0, 5]"),
     "configuration[1].seeds", "seeds [5] are not among the study's seeds [0, 1, 2]"),
    (_add_to_better("seeds = []"),
     "configuration[1].seeds", "non-empty list"),
    (_add_to_better("seeds = [1, 1]"),
     "configuration[1].seeds", "repeats a seed"),
    (lambda s: s + "\n[verdict_rules]\ncollapse_threshold = 1.5\n", "verdict_rules.collapse_threshold",
     "must be in (0, 1]"),
    (lambda s: s + "\n[verdict_rules]\nrandom_effects = true\n", "verdict_rules.random_effects", "unknown key"),
    (_add_to_better("seeds = [2]"),
     "claim[0]", "'better' and 'base' share 1 seed(s) ([2]); a paired comparison needs 2 or more"),
])
def test_spec_errors_name_the_file_and_key(tmp_path, edit, key, message):
    path = tmp_path / "study.toml"
    path.write_text(edit(SPEC.format(out=tmp_path / "study")))
    with pytest.raises(SpecError) as error:
        load_spec(path)
    assert str(error.value).startswith(f"{path}: {key}"), str(error.value)
    assert message in str(error.value)


def test_keep_tolerance_per_metric(tmp_path):
    path = _write_spec(tmp_path, SPEC.replace('keeps = ["i2t_R@1"]\nkeep_tolerance = 1.0',
                                              'keeps = ["i2t_R@1", "i2t_medr"]\n'
                                              'keep_tolerance = {{"i2t_R@1" = 1.0, i2t_medr = 0.5}}'))
    assert load_spec(path).claims[0].keep_tolerance == {"i2t_R@1": 1.0, "i2t_medr": 0.5}


def test_bad_spec_through_the_cli_is_one_line_with_status_2(tmp_path, capsys):
    path = tmp_path / "bad.toml"
    path.write_text("name = 'x'\nseeds = [0]\n[[configuration]]\nname = 'a'\nflags = '--loss=triplet'\n")
    assert cli.main([f"--spec={path}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"kitm.study: error: {path}: configuration[0].flags: must be a list") and "\n" not in err
    path.write_text("name = 'x'\nseeds = [0\n")
    assert cli.main([f"--spec={path}"]) == 2
    assert "not valid TOML" in capsys.readouterr().err
    assert cli.main([f"--spec={tmp_path / 'absent.toml'}"]) == 2
    assert "no such spec file" in capsys.readouterr().err
    assert cli.main([f"--spec={_write_spec(tmp_path)}", "--only=base,nope"]) == 2
    assert "nope" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ the commands

def test_dry_run_prints_commands_in_absl_order_and_writes_nothing(tmp_path, capsys):
    spec_path = _write_spec(tmp_path)
    study = tmp_path / "study"
    _fake_run(study, "base", 0, BASE[0])
    assert cli.main([f"--spec={spec_path}", "--dry_run", "--seeds=0,1"]) == 0
    out = capsys.readouterr().out.splitlines()
    run_dir = study / "runs" / "better" / "seed_1"
    assert "# base seed 0: done -> skip (evaluated)" in out
    assert commands.display(["-m", "kitm.launch", "--dataset=synthetic", "--epochs=1", "--loss=triplet",
                             "--margin=0.1", "--seed=1", f"--run_dir={run_dir}", "--progress=false"]) in out
    assert commands.display(["-m", "kitm.eval", f"--run_dir={run_dir}", "--split=test", "--relevance=truth",
                             f"--out={run_dir / 'study_eval.json'}", "--no-progress"]) in out
    assert not any("seed 2" in line for line in out)
    assert not (study / "report.md").exists() and not (study / "runs" / "better").exists()


def test_a_configuration_with_its_own_seeds_runs_only_those(tmp_path, capsys):
    # A side arm (a dose-response level, say) needs fewer seeds than the claims: its runs are neither planned
    # nor counted missing at the other seeds, and --seeds still narrows both.
    spec_path = _write_spec(tmp_path, SPEC.replace('flags = ["--loss=triplet", "--margin=0.1"]',
                                                   'flags = ["--loss=triplet", "--margin=0.1"]\nseeds = [0, 2]'))
    spec = load_spec(spec_path)
    assert spec.configuration("better").seeds == (0, 2) and spec.configuration("base").seeds is None
    plans = runs.plan_runs(spec, tmp_path / "study", spec.configuration_names, spec.seeds)
    assert [(p.configuration, p.seed) for p in plans] == [("base", 0), ("better", 0), ("base", 1), ("base", 2),
                                                          ("better", 2)]
    assert cli.main([f"--spec={spec_path}", "--dry_run", "--seeds=1,2"]) == 0
    out = capsys.readouterr().out
    assert "# better seed 2" in out and "better seed 1" not in out and "# base seed 1" in out
    assert spec.as_dict()["configurations"][1]["seeds"] == [0, 2]
    assert cli.main([f"--spec={spec_path}", "--dry_run", "--seeds=1", "--only=better"]) == 0
    assert "no run is selected by --seeds=1 (of the configurations asked, better runs seeds [0, 2])" \
        in capsys.readouterr().err
    # `better` ran at seed 1 before its seeds were narrowed: the report says so instead of dropping it silently.
    for seed in (0, 1, 2):
        _fake_run(tmp_path / "study", "base", seed, BASE[seed])
        _fake_run(tmp_path / "study", "better", seed, BETTER[seed])
    assert cli.main([f"--spec={spec_path}", "--report_only", "--no-progress"]) == 0
    assert "not in the figures: better/seed_1" in capsys.readouterr().err
    assert "better/seed_1" in (tmp_path / "study" / "report.md").read_text()


def test_flagfile_overrides_of_common_flags_are_warned(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "paper.flags").write_text("# a paper's flags\n--dataset=f30k\n--loss=sam\n--epochs=1\n")
    text = SPEC.replace('flags = ["--loss=triplet", "--margin=0.1"]', 'flags = ["--flagfile=paper.flags"]')
    spec = load_spec(_write_spec(tmp_path, text))
    warnings = commands.overridden_common_flags(spec)
    assert warnings == ["configuration 'better': --dataset=f30k (from paper.flags) overrides the common flag "
                        "--dataset=synthetic"]
    text = SPEC.replace('flags = ["--loss=triplet", "--margin=0.1"]',
                        'flags = ["--flagfile=paper.flags", "--dataset=synthetic"]')
    assert commands.overridden_common_flags(load_spec(_write_spec(tmp_path, text))) == []
    # written in the configuration's own flags, an override is on purpose (another world's data): no warning
    text = SPEC.replace('flags = ["--loss=triplet", "--margin=0.1"]', 'flags = ["--loss=triplet", "--dataset=coco"]')
    assert commands.overridden_common_flags(load_spec(_write_spec(tmp_path, text))) == []


def test_source_fingerprint_is_stable():
    fingerprint = commands.source_fingerprint()
    assert len(fingerprint) == 16 and int(fingerprint, 16) >= 0
    assert commands.source_fingerprint() == fingerprint


def test_subprocess_environment(tmp_path, repo_root):
    spec = load_spec(_write_spec(tmp_path, SPEC + '[environment]\nCUDA_VISIBLE_DEVICES = ""\n'))
    env = commands.subprocess_environment(spec, base={"TF_CPP_MIN_LOG_LEVEL": "0", "PYTHONPATH": "/x"})
    assert env["HF_HUB_OFFLINE"] == "1" and env["TF_CPP_MIN_LOG_LEVEL"] == "0"  # the caller's choice is kept
    assert env["CUDA_VISIBLE_DEVICES"] == ""
    assert env["PYTHONPATH"].split(os.pathsep) == [str(repo_root), "/x"]  # this checkout's kitm first


# -------------------------------------------------------------------------- the runner, with a stand-in python

FAKE_PYTHON = """#!{python}
# Stands in for the interpreter: `-m kitm.launch ... --run_dir=D` writes D/summary.json, `-m kitm.eval ...
# --out=F` writes F; FAKE_FAIL=launch|eval makes that stage exit 3. Every call is counted in FAKE_CALLS.
import json, os, pathlib, sys
module = sys.argv[2]
args = dict(a[2:].split("=", 1) for a in sys.argv[3:] if "=" in a)
with open(os.environ["FAKE_CALLS"], "a") as calls:
    calls.write(module + "\\n")
print("fake", module, "running")
if os.environ.get("FAKE_FAIL") == module.split(".")[1]:
    print("Traceback: something broke in", module, file=sys.stderr)
    sys.exit(3)
if module == "kitm.launch":
    pathlib.Path(args["run_dir"], "summary.json").write_text(json.dumps({{"seconds": {{"total": 1.5}},
        "flags": {{"seed": int(args["seed"])}}}}))
else:
    pathlib.Path(args["out"]).write_text(json.dumps({{"flat": {{"i2t_R@1": 10.0}}, "rsum": 10.0}}))
"""


@pytest.fixture
def fake_python(tmp_path, monkeypatch):
    script = tmp_path / "fake_python"
    script.write_text(FAKE_PYTHON.format(python=sys.executable))
    script.chmod(0o755)
    calls = tmp_path / "calls.txt"
    calls.touch()
    monkeypatch.setenv("FAKE_CALLS", str(calls))
    return script, calls


def test_runner_fails_resumes_evaluates_and_skips(tmp_path, fake_python, monkeypatch):
    script, calls = fake_python
    spec = load_spec(_write_spec(tmp_path))
    plan = runs.plan_runs(spec, tmp_path / "study", ["base"], [0])[0]

    monkeypatch.setenv("FAKE_FAIL", "launch")
    outcome = run_one(plan, dict(os.environ), str(script))
    assert outcome.action == "failed" and outcome.failed_stage == "launch" and outcome.returncode == 3
    status = json.loads(plan.status_json.read_text())
    assert status["state"] == "failed" and "something broke in kitm.launch" in status["log_tail"]
    assert runs.run_state(plan) == runs.FAILED
    assert "fake kitm.launch running" in plan.launch_log.read_text()

    monkeypatch.setenv("FAKE_FAIL", "eval")  # the launcher now succeeds, the evaluation fails
    outcome = run_one(plan, dict(os.environ), str(script))
    assert outcome.failed_stage == "eval" and plan.summary_json.is_file() and not plan.eval_json.exists()

    monkeypatch.delenv("FAKE_FAIL")  # trained: only the evaluation runs again
    outcome = run_one(plan, dict(os.environ), str(script))
    assert outcome.action == "evaluated" and runs.run_state(plan) == runs.DONE
    assert calls.read_text().split() == ["kitm.launch", "kitm.launch", "kitm.eval", "kitm.eval"]
    status = json.loads(plan.status_json.read_text())
    assert [(a["stage"], a["returncode"]) for a in status["attempts"]] == [("launch", 3), ("launch", 0), ("eval", 3),
                                                                          ("eval", 0)]
    assert status["state"] == "done" and status["log_tail"] is None
    assert all(a["seconds"] > 0 for a in status["attempts"])
    assert {a["kitm_source"] for a in status["attempts"]} == {commands.source_fingerprint()}
    commits = {a["kitm_commit"] for a in status["attempts"]}  # this checkout's commit (None outside git)
    assert len(commits) == 1 and (commits == {None} or re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", commits.pop()))

    assert run_one(plan, dict(os.environ), str(script)).action == "skipped"  # evaluated: nothing runs
    assert len(calls.read_text().split()) == 4
    assert not list(plan.directory.glob("*.tmp"))  # every file was renamed into place


def test_run_all_says_where_it_is_and_what_is_left(tmp_path, fake_python, capsys):
    script, _ = fake_python
    spec = load_spec(_write_spec(tmp_path))
    plans = runs.plan_runs(spec, tmp_path / "study", spec.configuration_names, [0, 1])
    assert run_one(plans[1], dict(os.environ), str(script)).action == "trained"  # done before the study starts
    outcomes = run_all(plans, dict(os.environ), progress=False, interpreter=str(script))
    assert [o.action for o in outcomes] == ["trained", "skipped", "trained", "trained"]
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("kitm.study: [")]
    assert lines[0].startswith("kitm.study: [1/4] base seed 0: trained in ") and "; 2 runs to do, about " in lines[0]
    assert lines[1].startswith("kitm.study: [2/4] better seed 0: already evaluated, skipped; 2 runs to do")
    assert "; 1 run to do" in lines[2] and lines[3].endswith(" s")  # nothing left: no estimate


def test_remaining_text():
    assert remaining_text([], 5) == "" and remaining_text([60.0], 0) == ""
    assert remaining_text([60.0, 180.0], 10) == "; 10 runs to do, about 20 min at 2.0 min a run so far"
    assert remaining_text([120.0], 100) == "; 100 runs to do, about 3.3 h at 2.0 min a run so far"


def test_changed_spec_makes_runs_stale(tmp_path, fake_python, capsys):
    script, _ = fake_python
    spec_path = _write_spec(tmp_path)
    spec = load_spec(spec_path)
    plan = runs.plan_runs(spec, tmp_path / "study", ["base"], [0])[0]
    assert run_one(plan, dict(os.environ), str(script)).action == "trained"
    spec_path.write_text(spec_path.read_text().replace('"--epochs=1"', '"--epochs=2"'))
    assert cli.main([f"--spec={spec_path}", "--only=base", "--seeds=0"]) == 2
    err = capsys.readouterr().err
    assert "other launch commands" in err and str(plan.directory) in err
    assert cli.main([f"--spec={spec_path}", "--report_only", "--seeds=0"]) == 0  # reported as stale, not used
    report = json.loads((tmp_path / "study" / "report.json").read_text())
    assert [r["state"] for r in report["runs"]] == ["stale", "missing"]


def test_pinned_flags_go_first_and_keep_runs_recorded_before_them(tmp_path, fake_python):
    """A default changed under a study (kitm.study.spec, pinned_flags): the spec pins the old value; runs recorded
    without the pin are the same runs (done, not stale), new commands carry it first (so that a configuration's
    own flag, later, overrides it), and any other change still makes a run stale."""
    script, _ = fake_python
    spec_path = _write_spec(tmp_path)
    plan = runs.plan_runs(load_spec(spec_path), tmp_path / "study", ["base"], [0])[0]
    assert run_one(plan, dict(os.environ), str(script)).action == "trained"
    spec_path.write_text(spec_path.read_text().replace(
        'common_flags = [', 'pinned_flags = ["--fused_update=false"]\ncommon_flags = ['))
    pinned = runs.plan_runs(load_spec(spec_path), tmp_path / "study", ["base"], [0])[0]
    assert pinned.launch_args[:3] == ("-m", "kitm.launch", "--fused_update=false")
    assert runs.run_state(pinned) == runs.DONE
    assert run_one(pinned, dict(os.environ), str(script)).action == "skipped"
    spec_path.write_text(spec_path.read_text().replace('"--epochs=1"', '"--epochs=2"'))
    assert runs.run_state(runs.plan_runs(load_spec(spec_path), tmp_path / "study", ["base"], [0])[0]) == runs.STALE
    with pytest.raises(SpecError, match=r"pinned_flags\[0\]"):
        load_spec(_write_spec(tmp_path, SPEC.replace('common_flags = [', 'pinned_flags = ["--seed=3"]\ncommon_flags = [')))


def test_changed_evaluation_reevaluates(tmp_path, fake_python):
    script, calls = fake_python
    spec_path = _write_spec(tmp_path)
    plan = runs.plan_runs(load_spec(spec_path), tmp_path / "study", ["base"], [0])[0]
    run_one(plan, dict(os.environ), str(script))
    spec_path.write_text(spec_path.read_text().replace('relevance = "truth"', 'relevance = "cider"'))
    plan = runs.plan_runs(load_spec(spec_path), tmp_path / "study", ["base"], [0])[0]
    assert runs.run_state(plan) == runs.TRAINED
    assert run_one(plan, dict(os.environ), str(script)).action == "evaluated"
    assert calls.read_text().split() == ["kitm.launch", "kitm.eval", "kitm.eval"]


# ------------------------------------------------------------------------------ reports from hand-made figures

@pytest.fixture
def fake_study(tmp_path):
    spec_path = _write_spec(tmp_path)
    study = tmp_path / "study"
    for seed, figures in BASE.items():
        _fake_run(study, "base", seed, figures)
    for seed, figures in BETTER.items():
        _fake_run(study, "better", seed, figures)
    return spec_path, study


def test_report_only_from_hand_made_runs(fake_study, capsys):
    spec_path, study = fake_study
    assert cli.main([f"--spec={spec_path}", "--report_only", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "claim 'better improves NCS and keeps R@1': holds" in out
    report = json.loads((study / "report.json").read_text())
    assert len(report["runs"]) == 6 and all(r["state"] == "done" for r in report["runs"])

    # Aggregates: mean, sample std and t half-width from the formulas.
    values = np.array([BETTER[s]["t2i_NCS@10"] for s in range(3)])
    aggregate = report["aggregates"]["better"]["t2i_NCS@10"]
    assert aggregate["n"] == 3 and aggregate["mean"] == pytest.approx(values.mean())
    assert aggregate["std"] == pytest.approx(values.std(ddof=1))
    assert aggregate["half_width"] == pytest.approx(stats.t.ppf(0.975, 2) * values.std(ddof=1) / math.sqrt(3))
    assert report["aggregates"]["base"]["rsum"]["mean"] == pytest.approx(
        np.mean([_payload(BASE[s])["rsum"] for s in range(3)]))

    # Paired comparisons against scipy.
    a = np.array([BETTER[s]["i2t_NCS@10"] for s in range(3)])
    b = np.array([BASE[s]["i2t_NCS@10"] for s in range(3)])
    comparison = report["comparisons"]["better"]["metrics"]["i2t_NCS@10"]
    assert comparison["difference"]["mean"] == pytest.approx((a - b).mean())
    assert comparison["t_test_p"] == pytest.approx(stats.ttest_rel(a, b).pvalue)
    assert comparison["wilcoxon_p"] == pytest.approx(stats.wilcoxon(a - b, method="exact").pvalue)
    medr = report["comparisons"]["better"]["metrics"]["i2t_medr"]  # 3 -> 2: better, though the difference is < 0
    assert medr["lower_is_better"] and medr["difference"]["mean"] == pytest.approx(-1.0)
    assert medr["improvement"]["mean"] == pytest.approx(1.0)
    assert "i2t_medr" in report["lower_is_better"]

    # Claims: NCS up and R@1 kept -> holds; R@1 "improves" is not shown -> inconclusive.
    verdicts = {claim["name"]: claim for claim in report["claims"]}
    holds = verdicts["better improves NCS and keeps R@1"]
    assert holds["verdict"] == "holds"
    assert [(p["kind"], p["metric"], p["verdict"]) for p in holds["parts"]] == [
        ("improves", "i2t_NCS@10", "supports"), ("improves", "t2i_NCS@10", "supports"),
        ("keeps", "i2t_R@1", "supports")]
    assert verdicts["better improves R@1"]["verdict"] == "inconclusive"

    # Default metrics: R@K, NCS@K, CS@K both ways, rsum (no SR in these runs).
    assert report["metrics"][:3] == ["i2t_R@1", "i2t_R@5", "i2t_R@10"] and report["metrics"][-1] == "rsum"
    assert "i2t_NCS@10" in report["metrics"] and "t2i_CS@3" in report["metrics"]
    assert "i2t_medr" not in report["metrics"] and "i2t_medr" in report["available_metrics"]

    markdown = (study / "report.md").read_text()
    for text in ("## Claims", "### better improves NCS and keeps R@1: **holds**", "## Figures",
                 "## Paired differences against the baseline `base`", "## Verdict rules", "## Regenerate",
                 "(min 0.25)", "python -m kitm.study --spec=", "--report_only"):
        assert text in markdown, text
    assert f"| i2t_R@1 | {np.mean([BASE[s]['i2t_R@1'] for s in range(3)]):.2f} ± " in markdown
    assert "![every claim part's paired improvement](plots/claims.png)" in markdown
    for name in ("i2t_R@1.png", "rsum.png", "t2i_CS@3.png", "recall_curves.png", "ncs_curves.png", "claims.png"):
        assert (study / "plots" / name).stat().st_size > 5000, name
    assert (study / "spec.toml").read_text() == spec_path.read_text()
    assert not list(study.rglob("*.tmp"))


def test_report_with_failed_missing_and_single_seed_runs(fake_study, capsys):
    spec_path, study = fake_study
    # better seed 2 failed, base seed 1 was never run: the comparison pairs seed 0 only.
    failed = study / "runs" / "better" / "seed_2"
    (failed / "study_eval.json").unlink()
    (failed / "study_status.json").write_text(json.dumps({
        "state": "failed", "failed_stage": "launch", "returncode": 1, "log_tail": "ValueError: boom",
        "launch_args": runs.plan_runs(load_spec(spec_path), study, ["better"], [2])[0].launch_args,
        "eval_args": [], "attempts": [{"stage": "launch", "seconds": 12.5, "returncode": 1}]}))
    (study / "runs" / "base" / "seed_1" / "study_eval.json").unlink()
    (study / "runs" / "better" / "seed_1" / "study_eval.json").unlink()
    assert cli.main([f"--spec={spec_path}", "--report_only"]) == 1  # a failed run: exit status 1
    assert "1 run(s) failed: better/seed_2" in capsys.readouterr().err
    report = json.loads((study / "report.json").read_text())
    states = {(r["configuration"], r["seed"]): r["state"] for r in report["runs"]}
    assert states[("better", 2)] == "failed" and states[("base", 1)] == "missing"
    assert report["failed_runs"] == ["better/seed_2"]
    comparison = report["comparisons"]["better"]["metrics"]["i2t_NCS@10"]
    assert comparison["seeds"] == [0] and comparison["difference"]["half_width"] is None  # NaN -> null
    assert report["aggregates"]["better"]["i2t_R@1"]["n"] == 1
    assert {c["verdict"] for c in report["claims"]} == {"inconclusive"}
    markdown = (study / "report.md").read_text()
    assert "## Failed runs" in markdown and "ValueError: boom" in markdown
    assert "± n/a" in markdown and "not every run is in the figures: 1 failed, 2 missing" in markdown
    assert "| better | 2 | failed | 12.5 |" in markdown


def _write_summary(study, configuration, seed, data_dir, flags=None):
    """The launcher's summary.json of a hand-made run: the records it trained on, its flags."""
    (study / "runs" / configuration / f"seed_{seed}" / "summary.json").write_text(json.dumps({
        "dataset": {"dir": str(data_dir), "name": "synthetic", "splits": {"test": 6}},
        "flags": {"dataset": "synthetic", "seed": seed, **(flags or {})}, "seconds": {"total": 3.0}}))


def test_report_flags_runs_on_different_worlds(fake_study):
    spec_path, study = fake_study
    for configuration, scenes in (("base", 60), ("better", 90)):
        data = study.parent / f"data_{configuration}"
        data.mkdir()
        (data / "dataset.json").write_text(json.dumps({"source": {"num_scenes": scenes, "seed": 0}}))
        for seed in range(3):
            _write_summary(study, configuration, seed, data, {
                "synthetic_num_scenes": 60, "loss": "triplet", "margin": 0.2 if configuration == "base" else 0.1})
        for seed in range(3):  # and by two versions of the kitm sources
            plan = runs.plan_runs(load_spec(spec_path), study, [configuration], [seed])[0]
            commit = {"base": "a" * 40, "better": None}[configuration]  # `better`'s was not recorded
            runs.write_status(plan, {**runs.new_status(plan, sys.executable), "state": "done", "attempts": [
                {"stage": "launch", "seconds": 1.0, "returncode": 0, "kitm_source": f"code_{configuration}",
                 "kitm_commit": commit}]})
    assert cli.main([f"--spec={spec_path}", "--report_only", "--no-progress"]) == 0
    report = json.loads((study / "report.json").read_text())
    versions = [w for w in report["warnings"] if "2 different versions of the kitm sources" in w]
    assert len(versions) == 1
    assert "code_base (commit aaaaaaaaaaaa): 3 run(s), seeds 0-2, base" in versions[0]
    assert "code_better (commit not recorded): 3 run(s), seeds 0-2, better" in versions[0]
    assert report["runs"][0]["kitm_commit"] == "a" * 40
    assert len(report["datasets"]) == 2
    assert [d["seeds_by_configuration"] for d in report["datasets"]] == [{"base": [0, 1, 2]}, {"better": [0, 1, 2]}]
    worlds = [w for w in report["warnings"] if "2 different datasets" in w]
    assert len(worlds) == 1 and "60 scenes, seed 0" in worlds[0] and "): base: seeds 0-2 | " in worlds[0]
    assert worlds[0].endswith("): better: seeds 0-2")
    assert any("asked for --synthetic_num_scenes=60 but trained on the 90-scene world" in w
               for w in report["warnings"])
    assert report["flag_differences"] == {"better": {"margin": {"baseline": 0.2, "configuration": 0.1}}}
    # scored on another world's test set: no paired difference with the baseline (its seeds pair other queries)
    assert report["not_compared_with_baseline"] == ["better"] and report["comparisons"] == {}
    markdown = (study / "report.md").read_text()
    assert "Not compared with `base`: better (scored on other test data than the baseline" in markdown
    assert "### better - base" not in markdown


def test_a_datasets_runs_are_described_by_configurations_sharing_their_seeds():
    from kitm.study.analysis import runs_described

    dataset = {"seeds_by_configuration": {"w2.a": [2, 0, 1], "w2.b": [0, 1, 2], "w2.c": [4], "w2.d": [0, 1, 3]}}
    assert runs_described(dataset) == "w2.a, w2.b: seeds 0-2; w2.c: seed 4; w2.d: seeds 0-1, 3"


def test_a_configuration_scored_partly_on_other_data_is_not_paired_with_the_baseline(fake_study):
    """`better`'s seed 2 was scored on another world: its seeds would pair runs on different queries."""
    spec_path, study = fake_study
    for configuration, seed, world in [("base", 0, "a"), ("base", 1, "a"), ("base", 2, "a"),
                                       ("better", 0, "a"), ("better", 1, "a"), ("better", 2, "b")]:
        _write_summary(study, configuration, seed, study.parent / f"world_{world}")
    assert cli.main([f"--spec={spec_path}", "--report_only", "--no-progress"]) == 0
    report = json.loads((study / "report.json").read_text())
    assert report["not_compared_with_baseline"] == ["better"] and report["comparisons"] == {}


def test_metric_plot_is_legible(fake_study, tmp_path):
    """The bar plots come out at a readable size (their look was checked by eye when they were written)."""
    spec_path, study = fake_study
    assert cli.main([f"--spec={spec_path}", "--report_only", "--no-progress"]) == 0
    from PIL import Image

    with Image.open(study / "plots" / "i2t_NCS@10.png") as image:
        width, height = image.size
    assert width > 400 and height > 300
    # report.json is for programs: one line, no indentation (megabytes in git for a study of hundreds of runs)
    text = (study / "report.json").read_text()
    assert text.count("\n") == 1 and ', "' not in text and json.loads(text)["plots"]


def test_a_study_of_many_configurations_has_no_per_metric_plots(fake_study, monkeypatch):
    """Above MAX_PLOTTED_CONFIGURATIONS, bar charts (one bar each) and curve legends are unreadable: left out,
    and the report says so; the claims figure stays."""
    from kitm.study import plots

    spec_path, study = fake_study
    monkeypatch.setattr(plots, "MAX_PLOTTED_CONFIGURATIONS", 1)
    assert cli.main([f"--spec={spec_path}", "--report_only", "--no-progress"]) == 0
    names = {path.name for path in (study / "plots").iterdir()}
    assert "claims.png" in names and not names & {"i2t_NCS@10.png", "recall_curves.png", "ncs_curves.png"}
    markdown = (study / "report.md").read_text()
    assert "drawn for at most 1 configurations, and this study has 2" in markdown
    # report.json aggregates, compares and lists per run the shown metrics only; the runs' eval JSON keep the rest
    report = json.loads((study / "report.json").read_text())
    shown = set(report["metrics"])
    assert set(report["aggregated_metrics"]) == shown < set(report["available_metrics"])
    assert set(report["aggregates"]["better"]) == shown == set(report["comparisons"]["better"]["metrics"])
    assert report["runs"][0]["figures"] and set(report["runs"][0]["figures"]) <= shown
    assert "launch_command" not in report["runs"][0] and report["not_compared_with_baseline"] == []
    assert "i2t_medr" not in report["aggregates"]["base"]
    # the markdown lists one seed's commands per configuration, naming the other seeds
    commands = markdown.split("Each configuration's commands", 1)[1]
    assert commands.count("python -m kitm.launch") == 2
    assert "# base, seed 0; seeds 1-2: the same with their --seed and seed_<n> folder" in commands


def test_a_small_study_aggregates_every_metric_in_its_json_report(fake_study):
    spec_path, study = fake_study
    assert cli.main([f"--spec={spec_path}", "--report_only", "--no-progress"]) == 0
    report = json.loads((study / "report.json").read_text())
    assert report["aggregated_metrics"] == report["available_metrics"]
    assert "i2t_medr" in report["aggregates"]["base"] and "i2t_medr" in report["runs"][0]["figures"]
    assert report["runs"][0]["launch_command"].startswith("python -m kitm.launch")


# ---------------------------------------------------------------------------------------------- end to end


def test_version_warning_names_the_files_changed_between_recorded_commits(tmp_path, monkeypatch):
    from kitm.study import analysis
    from kitm.study.results import RunResult

    def result(configuration, seed, source, commit):
        return RunResult(configuration, seed, tmp_path, "done", {}, 1.0, 1.0, 1.0, None, None, None, source, "", "",
                         kitm_commit=commit)

    calls = []
    monkeypatch.setattr(analysis, "changed_files", lambda a, b: calls.append((a, b)) or ["kitm/eval/cli.py"])
    results = [result("base", s, "v1", "1" * 40) for s in (0, 1, 2, 4)] + [result("sam", 5, "v2", "2" * 40)]
    [warning] = analysis._code_warnings(results)
    assert "v1 (commit 111111111111): 4 run(s), seeds 0-2, 4, base" in warning
    assert "v2 (commit 222222222222): 1 run(s), seeds 5, sam" in warning
    assert warning.endswith("kitm files changed from 111111111111 to 222222222222: kitm/eval/cli.py")
    assert calls == [("1" * 40, "2" * 40)]
    assert analysis._code_warnings(results[:4]) == []  # one version: nothing to say


def test_provenance_in_a_git_checkout(tmp_path):
    import shutil
    import subprocess

    from kitm.study.provenance import changed_files, source_commit

    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    package = tmp_path / "repo" / "kitm"
    package.mkdir(parents=True)

    def git(*args):
        return subprocess.run(["git", "-C", str(tmp_path / "repo"), "-c", "user.name=t", "-c", "user.email=t@t",
                               *args], check=True, capture_output=True, text=True).stdout.strip()

    git("init", "-q")
    (package / "loss.py").write_text("a = 1\n")
    (package / "cli.py").write_text("b = 1\n")
    git("add", ".")
    git("commit", "-qm", "one")
    first = git("rev-parse", "HEAD")
    assert source_commit(package) == first
    (package / "cli.py").write_text("b = 2\n")
    assert source_commit(package) == first + "+dirty"
    git("commit", "-qam", "two")
    second = git("rev-parse", "HEAD")
    assert changed_files(first, second, package) == ["kitm/cli.py"]
    assert changed_files(first, "f" * 40, package) is None  # not in this checkout
    assert source_commit(tmp_path) is None  # not a checkout at all


def test_provenance_outside_git_is_none(monkeypatch):
    from kitm.study import provenance

    monkeypatch.setattr(provenance, "_git", lambda *args, **kwargs: None)
    assert provenance.source_commit() is None and provenance.changed_files("a" * 40, "b" * 40) is None
    assert provenance.changed_files("a" * 40 + "+dirty", "b" * 40) is None


def test_a_pinned_data_dir_silences_the_scene_count_warning(tmp_path):
    from kitm.study.analysis import _data_warnings
    from kitm.study.results import RunResult

    def result(command):
        return RunResult("base", 0, tmp_path, "done", {}, 1.0, 1.0, 1.0, None,
                         {"dataset": "synthetic", "synthetic_num_scenes": 3000},
                         {"dir": "tfrecords/pinned", "name": "synthetic", "source": {"num_scenes": 1000}}, None,
                         command, "")

    assert _data_warnings([result("python -m kitm.launch --dataset=synthetic --data_dir=tfrecords/pinned")], []) == []
    assert "asked for --synthetic_num_scenes=3000" in _data_warnings([result("python -m kitm.launch")], [])[0]


def test_collect_from_copies_the_runs_done_in_another_checkout(fake_study, tmp_path, monkeypatch, capsys):
    """--collect_from: the runs done in the other checkout and not here arrive as their JSON files, without
    indentation and with the same content (summary.json without the launcher's test scores); no per-query file
    unless --per_query; failed, missing and local runs are left alone; a run the other checkout made with another
    command (a changed spec) is not done there."""
    spec_path, study = fake_study  # every run of `study` is done
    other = tmp_path / "other"
    monkeypatch.chdir(tmp_path)
    relative = study.relative_to(tmp_path)
    spec_text = spec_path.read_text().replace(f'out_dir = "{study}"', f'out_dir = "{relative}"')
    spec_path.write_text(spec_text)
    plans = runs.plan_runs(load_spec(spec_path), relative, ["base", "better"], [0, 1, 2])
    shutil.copytree(study, other / relative)  # the other checkout: the same runs, done there
    for plan in plans:  # give them statuses recorded with the spec's commands (done) and a per-query file
        source = other / plan.directory
        runs.write_status(dataclasses.replace(plan, directory=source), {**runs.new_status(plan, "python"),
                                                                        "state": "done"})
        (source / "study_eval.per_query.npz").write_bytes(b"npz")
        (source / "summary.json").write_text(json.dumps({"flags": {"seed": plan.seed}, "test_split": "test",
                                                         "test": {"rsum": 3.0}, "test_per_query": "x"}))
    failed = other / plans[1].directory / "study_status.json"
    failed.write_text(json.dumps({**json.loads(failed.read_text()), "state": "failed"}))
    (other / plans[1].directory / "study_eval.json").unlink()
    changed = other / plans[2].directory / "study_status.json"
    changed.write_text(json.dumps({**json.loads(changed.read_text()), "launch_args": ["-m", "kitm.launch"]}))
    shutil.rmtree(study / "runs")
    keep_here = study / "runs" / "base" / "seed_0"  # done here already: left as it is
    shutil.copytree(other / plans[0].directory, keep_here)
    (keep_here / "study_eval.json").write_text('{"flat": {"i2t_R@1": 1.0}, "rsum": 1.0}')

    assert cli.main([f"--spec={spec_path}", f"--collect_from={other}"]) == 0
    captured = capsys.readouterr()
    assert "3 run(s) collected from" in captured.out and "4 of 6 runs done here" in captured.out
    assert "1 run(s) done in" in captured.err and "with other commands" in captured.err and "base/seed_1" in captured.err
    for plan in plans[3:]:
        for name in ("study_eval.json", "study_status.json"):
            text = (plan.directory / name).read_text()
            assert "\n" not in text.strip() and json.loads(text) == json.loads((other / plan.directory / name).read_text())
        kept = json.loads((plan.directory / "summary.json").read_text())  # all but the launcher's test scores
        there = json.loads((other / plan.directory / "summary.json").read_text())
        assert kept == {"flags": {"seed": plan.seed}, "test_split": "test"} and there["test"] == {"rsum": 3.0}
        assert not (plan.directory / "study_eval.per_query.npz").exists()
        assert runs.run_state(plan) == runs.DONE
    assert not plans[1].directory.exists() and not plans[2].directory.exists()
    assert json.loads((keep_here / "study_eval.json").read_text())["rsum"] == 1.0
    # a local folder that is not done (a killed copy, an old evaluation): its old files go before the copy
    (plans[3].directory / "study_eval.json").write_text('{"flat": {}, "rsum": 0.0}')
    (plans[3].directory / "study_status.json").unlink()
    (plans[3].directory / "study_eval.per_query.npz").write_bytes(b"old")
    status = json.loads((plans[3].directory / "study_eval.json").read_text())
    runs.write_status(plans[3], {**runs.new_status(plans[3], "python"), "eval_args": ["other"], "state": "done"})
    assert runs.run_state(plans[3]) != runs.DONE
    assert cli.main([f"--spec={spec_path}", f"--collect_from={other}", "--only=better"]) == 0
    assert runs.run_state(plans[3]) == runs.DONE and not (plans[3].directory / "study_eval.per_query.npz").exists()
    assert json.loads((plans[3].directory / "study_eval.json").read_text()) != status
    shutil.rmtree(plans[3].directory)
    assert cli.main([f"--spec={spec_path}", f"--collect_from={other}", "--per_query", "--only=better"]) == 0
    assert (plans[3].directory / "study_eval.per_query.npz").read_bytes() == b"npz"
    # a run whose evaluation exists while its status still says running is not collected yet
    shutil.rmtree(plans[5].directory)
    running = other / plans[5].directory / "study_status.json"
    running.write_text(json.dumps({**json.loads(running.read_text()), "state": "running"}))
    assert cli.main([f"--spec={spec_path}", f"--collect_from={other}"]) == 0
    assert not plans[5].directory.exists()
    assert cli.main([f"--spec={spec_path}", f"--collect_from={tmp_path / 'nowhere'}"]) == 2
    assert "no such folder" in capsys.readouterr().err
    assert cli.main([f"--spec={spec_path}", f"--collect_from={other}", f"--out={study}"]) == 2  # absolute
    assert "needs the study folder relative to the checkout" in capsys.readouterr().err

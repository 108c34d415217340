"""End to end: `python -m kitm.study` runs two configurations through the real launcher and kitm.eval, reports them,
and a second call finds everything done. One seed: what several seeds add (the aggregates over seeds, the paired
intervals, the verdicts) is tested on hand-made runs in tests/study (test_runner.py, test_decisions.py), without
training a model per seed."""

import json
import textwrap
import time

import pytest

TINY_COMMON = ["--dataset=synthetic", "--synthetic_num_scenes=120", "--image_size=32", "--epochs=1", "--batch_size=16",
               "--eval_every_epochs=0", "--projector_samples=0", "--embedding_dim=32", "--word_dim=16",
               "--text_units=16", "--captions_per_step=sample", "--export=true"]


@pytest.mark.slow
def test_two_configurations_end_to_end(tmp_path, kitm_python):
    data_dir = tmp_path / "data"
    spec = tmp_path / "e2e.toml"
    spec.write_text(textwrap.dedent(f"""
        name = "e2e"
        out_dir = "study"
        seeds = [0]
        baseline = "triplet"
        common_flags = {json.dumps([*TINY_COMMON, f"--data_dir={data_dir}"])}
        [evaluation]
        relevance = "truth"
        [[configuration]]
        name = "triplet"
        flags = ["--loss=triplet"]
        [[configuration]]
        name = "small_margin"
        flags = ["--loss=triplet", "--margin=0.1"]
        [[claim]]
        name = "a smaller margin keeps R@1"
        configuration = "small_margin"
        keeps = ["i2t_R@1"]
        keep_tolerance = 100.0
    """))

    def study(*extra):
        return kitm_python(["-m", "kitm.study", f"--spec={spec}", "--no-progress", *extra], cwd=tmp_path, timeout=900)

    started = time.monotonic()
    result = study()
    first = time.monotonic() - started
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    out = tmp_path / "study"
    report = json.loads((out / "report.json").read_text())
    assert len(report["runs"]) == 2 and all(r["state"] == "done" for r in report["runs"])
    assert all(r["seconds"]["launch"] > 0 and r["seconds"]["eval"] > 0 for r in report["runs"])
    assert {"i2t_R@1", "t2i_NCS@10", "rsum"} <= set(report["aggregates"]["triplet"])
    assert report["aggregates"]["small_margin"]["i2t_R@1"]["n"] == 1
    assert report["flag_differences"]["small_margin"]["margin"] == {"baseline": 0.2, "configuration": 0.1}
    if not any("versions of the kitm sources" in w for w in report["warnings"]):  # a checkout edited meanwhile
        assert report["flag_differences"] == {"small_margin": {"margin": {"baseline": 0.2, "configuration": 0.1}}}
    assert len({r["kitm_source"] for r in report["runs"]} - {None}) >= 1
    assert len(report["datasets"]) == 1 and report["datasets"][0]["source"]["num_scenes"] == 120
    assert report["claims"][0]["verdict"] == "inconclusive"  # one seed: no paired interval (the mechanics only)
    for name in ("report.md", "plots/i2t_R@1.png", "plots/recall_curves.png", "plots/ncs_curves.png",
                 "runs/triplet/seed_0/launch.log", "runs/small_margin/seed_0/eval.log"):
        assert (out / name).is_file(), name
    # Every run trains exactly once: the runs' summaries name their own seed and the study's run folder.
    summary = json.loads((out / "runs" / "small_margin" / "seed_0" / "summary.json").read_text())
    assert summary["flags"]["seed"] == 0 and summary["flags"]["margin"] == 0.1

    started = time.monotonic()
    again = study()
    second = time.monotonic() - started
    assert again.returncode == 0, again.stderr[-3000:]
    # nothing trained or evaluated again (the count, not a timing: timed tests flake on a busy machine)
    assert again.stderr.count("already evaluated, skipped") == 2
    assert ": trained in" not in again.stderr and ": evaluated in" not in again.stderr, again.stderr[-2000:]
    print(f"end-to-end study: {first:.1f} s, second invocation {second:.1f} s")

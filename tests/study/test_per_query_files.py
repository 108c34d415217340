"""kitm.study.per_query_files: the compact per-query format round-trips two-level arrays bit for bit and others to
float32 (keeping each array's sum), reads kitm.eval's full format too, a compaction killed before its rename leaves the full file, and the
bootstrap of a constructed pair gives the same interval from the compact and the full files."""

import os

import numpy as np
import pytest

from kitm.study import bootstrap, per_query_files
from kitm.study.per_query_files import compact_file, read_per_query


def _full(rng, images=40, captions=200):
    """A full per-query file's arrays as kitm.eval writes them (float64), with a kept and a dropped of each kind."""
    hits = lambda n, p, value=100.0: value * (rng.random(n) < p)  # noqa: E731
    with_nan = rng.normal(0.1, 0.2, images)
    with_nan[[3, 17]] = np.nan
    return {
        "i2t_R@1": hits(images, 0.3), "i2t_R@5": hits(images, 0.6), "i2t_R@10": hits(images, 0.8),
        "t2i_R@1": hits(captions, 0.25), "t2i_R@5": hits(captions, 0.55), "t2i_R@10": hits(captions, 0.75),
        "i2t_IR_R@1": hits(images, 0.3, 20.0),  # dropped
        "fold100_i2t_R@1": np.where(np.arange(images) < 30, hits(images, 0.4), np.nan),  # two-level with NaN
        "fold100_t2i_R@1": np.full(captions, 100.0),  # one level only
        "i2t_NCS@10": rng.uniform(30, 100, images), "t2i_NCS@10": rng.uniform(30, 100, captions),
        "i2t_CS@100": with_nan, "t2i_CS@100": rng.normal(0.2, 0.1, images),
        "i2t_SR@5": 20.0 * rng.integers(0, 6, images),  # six levels: float32, exact
        "t2i_mAP_at_R": np.where(rng.random(captions) < 0.1, np.nan, rng.uniform(0, 100, captions)),
        "i2t_map": rng.uniform(0, 100, images), "t2i_NWAY_R1@5": hits(captions, 0.5),  # kept, as bits
    }


def _write_full(path, arrays):
    np.savez_compressed(path, **arrays)  # kitm.eval.report.write_per_query's format
    return path


def test_round_trip_two_level_float32_and_nan(tmp_path):
    full = _full(np.random.default_rng(0))
    path = _write_full(tmp_path / "study_eval.per_query.npz", full)
    assert compact_file(path) is True
    assert per_query_files.is_compact(path) and compact_file(path) is False  # compact already: left alone
    back = read_per_query(path)
    assert set(back) == set(full) - {"i2t_IR_R@1", "i2t_map"}
    members = per_query_files.encode(full)
    kinds = dict(zip(members["names"].tolist(), members["kinds"].tolist()))
    for name, values in back.items():
        assert values.dtype == np.float64 and values.shape == full[name].shape, name
        if kinds[name] == per_query_files.TWO_LEVELS:
            assert values.tobytes() == full[name].tobytes(), name  # bit for bit, NaN included
        else:
            np.testing.assert_array_equal(values.astype(np.float32).astype(np.float64), values)  # float32 numbers
            np.testing.assert_allclose(values, full[name], rtol=2.0 ** -23, atol=0, equal_nan=True)  # < 1 ulp
            defined = full[name][np.isfinite(full[name])]  # the sum is kept to half the largest float32 ulp
            bound = np.spacing(np.abs(defined).max().astype(np.float32)) / 2 / defined.size
            assert abs(np.nanmean(values) - np.nanmean(full[name])) <= bound * 1.001, name
    assert {name for name, kind in kinds.items() if kind == per_query_files.TWO_LEVELS} == {
        "i2t_R@1", "i2t_R@5", "i2t_R@10", "t2i_R@1", "t2i_R@5", "t2i_R@10", "fold100_i2t_R@1", "fold100_t2i_R@1",
        "t2i_NWAY_R1@5"}
    assert np.isnan(back["fold100_i2t_R@1"][30:]).all() and np.isnan(back["i2t_CS@100"][[3, 17]]).all()
    np.testing.assert_array_equal(back["i2t_SR@5"], full["i2t_SR@5"])  # float32 numbers already: exact
    assert bootstrap.load_per_query(path).keys() == back.keys()


def test_two_level_detection_edge_cases():
    assert per_query_files._two_levels(np.array([np.nan, np.nan])) == (0.0, 0.0)
    assert per_query_files._two_levels(np.array([0.0, 20.0, np.nan, 20.0])) == (0.0, 20.0)
    assert per_query_files._two_levels(np.array([0.0, -0.0, 1.0])) is None  # -0.0 would come back as 0.0
    assert per_query_files._two_levels(np.array([0.0, 1.0, 2.0])) is None
    members = per_query_files.encode({"i2t_R@1": np.array([np.nan, np.nan, np.nan])})
    assert np.isnan(per_query_files.decode(members)["i2t_R@1"]).all()


def test_float32_keeps_the_sum_and_moves_few_values():
    rng = np.random.default_rng(4)
    values = np.concatenate([rng.uniform(30, 100, 4990), np.arange(10.0)])  # the last ten are float32 numbers
    values[5] = np.nan
    nearest = values.astype(np.float32)
    rounded = per_query_files.to_float32(values)
    assert rounded.dtype == np.float32 and np.isnan(rounded[5])
    moved = np.flatnonzero(rounded != nearest)
    assert 0 < moved.size < 200 and (moved < 4990).all()  # few, and never an exact value
    assert (np.abs(rounded.astype(np.float64) - values) <= np.spacing(nearest).astype(np.float64))[
        np.isfinite(values)].all()
    error = lambda r: abs(np.nanmean(r.astype(np.float64)) - np.nanmean(values))  # noqa: E731
    assert error(rounded) <= np.spacing(np.float32(100)) / 2 / 4999 < error(nearest)  # half an ulp over the sum
    exact = np.array([0.0, 20.0, 40.0, np.nan])
    np.testing.assert_array_equal(per_query_files.to_float32(exact), exact.astype(np.float32))


def test_reads_the_full_format_and_extra_names(tmp_path):
    full = _full(np.random.default_rng(1))
    path = _write_full(tmp_path / "study_eval.per_query.npz", full)
    back = bootstrap.load_per_query(path)
    assert set(back) == set(full)
    for name, values in full.items():
        assert back[name].dtype == np.float64 and back[name].tobytes() == values.tobytes()
    assert per_query_files.kept("i2t_map", extra=["i2t_map"]) and not per_query_files.kept("i2t_map")
    assert bootstrap.load_per_query(tmp_path / "missing.per_query.npz") is None


@pytest.mark.parametrize("stage", ["write", "rename"])
def test_a_compaction_killed_midway_leaves_the_full_file(tmp_path, monkeypatch, stage):
    path = _write_full(tmp_path / "study_eval.per_query.npz", _full(np.random.default_rng(2)))
    before = path.read_bytes()

    class Killed(BaseException):  # as a KeyboardInterrupt or SystemExit would: not an Exception
        pass

    if stage == "write":
        def savez(handle, **members):
            handle.write(b"PK\x03\x04 half a zip")
            raise Killed
        monkeypatch.setattr(per_query_files.np, "savez_compressed", savez)
    else:
        def replace(source, target):
            raise Killed
        monkeypatch.setattr(per_query_files.os, "replace", replace)
    with pytest.raises(Killed):
        compact_file(path)
    assert path.read_bytes() == before and not per_query_files.is_compact(path)
    assert os.listdir(tmp_path) == [path.name]  # no temporary left behind
    monkeypatch.undo()
    assert compact_file(path) and per_query_files.is_compact(path)  # the next run compacts it
    assert os.listdir(tmp_path) == [path.name]


def test_bootstrap_of_a_pair_is_the_same_from_compact_and_full_files(tmp_path):
    rng = np.random.default_rng(3)
    paths = {}
    for label in ("candidate", "baseline"):
        for seed in range(3):
            folder = tmp_path / label / f"seed_{seed}"
            folder.mkdir(parents=True)
            paths[label, seed] = _write_full(folder / "study_eval.per_query.npz", _full(rng))
    full = {key: bootstrap.load_per_query(path) for key, path in paths.items()}
    for path in paths.values():
        assert compact_file(path)
    compact = {key: bootstrap.load_per_query(path) for key, path in paths.items()}
    for metric in ("rsum", "fold100_i2t_R@1", "i2t_NCS@10", "t2i_NCS@10", "i2t_CS@100", "t2i_mAP_at_R"):
        results = [bootstrap.paired_bootstrap([data["candidate", s] for s in range(3)],
                                              [data["baseline", s] for s in range(3)], metric, resamples=300)
                   for data in (full, compact)]
        a, b = (result.as_dict() for result in results)
        if metric in ("rsum", "fold100_i2t_R@1"):  # two-level arrays only: identical
            assert a == b, metric
        else:
            flat_a = [a["pooled"][k] for k in ("difference", "low", "high", "se")] + [
                row[k] for row in a["per_seed"] for k in ("difference", "low", "high")]
            flat_b = [b["pooled"][k] for k in ("difference", "low", "high", "se")] + [
                row[k] for row in b["per_seed"] for k in ("difference", "low", "high")]
            np.testing.assert_allclose(flat_b, flat_a, rtol=1e-5, atol=1e-9, err_msg=metric)


FAKE_PYTHON = """#!{python}
# Stands in for the interpreter: `-m kitm.launch ... --run_dir=D` writes D/summary.json; `-m kitm.eval ...
# --out=F` writes F and, as kitm.eval does, the full per-query file beside it.
import json, pathlib, sys
import numpy as np
module = sys.argv[2]
args = dict(a[2:].split("=", 1) for a in sys.argv[3:] if "=" in a)
if module == "kitm.launch":
    pathlib.Path(args["run_dir"], "summary.json").write_text(json.dumps({{"flags": {{"seed": int(args["seed"])}}}}))
else:
    out = pathlib.Path(args["out"])
    out.write_text(json.dumps({{"flat": {{"i2t_R@1": 50.0, "i2t_NCS@10": 0.1}}, "rsum": 50.0}}))
    np.savez_compressed(out.with_name(out.stem + ".per_query.npz"), **{{"i2t_R@1": np.array([0.0, 100.0]),
        "i2t_NCS@10": np.array([0.1, 0.1]), "i2t_map": np.array([1.0, 2.0])}})
"""

SPEC = """
name = "toy"
out_dir = "{out}"
seeds = [0]
baseline = "base"
common_flags = ["--dataset=synthetic", "--epochs=1"]
[evaluation]
split = "test"
relevance = "truth"
[[configuration]]
name = "base"
flags = ["--loss=triplet"]
"""


def test_the_runner_compacts_the_per_query_file_after_the_evaluation(tmp_path):
    import sys

    from kitm.study import runs
    from kitm.study.runner import run_one
    from kitm.study.spec import load_spec

    script = tmp_path / "fake_python"
    script.write_text(FAKE_PYTHON.format(python=sys.executable))
    script.chmod(0o755)
    spec_path = tmp_path / "study.toml"
    spec_path.write_text(SPEC.format(out=tmp_path / "study"))
    plan = runs.plan_runs(load_spec(spec_path), tmp_path / "study", ["base"], [0])[0]
    assert run_one(plan, dict(os.environ), str(script)).action == "trained"
    path = bootstrap.per_query_path(plan.eval_json)
    assert per_query_files.is_compact(path) and runs.run_state(plan) == runs.DONE
    back = bootstrap.load_per_query(path)
    assert set(back) == {"i2t_R@1", "i2t_NCS@10"}
    np.testing.assert_array_equal(back["i2t_R@1"], [0.0, 100.0])
    assert abs(np.mean(back["i2t_NCS@10"]) - 0.1) < 1e-8
    assert sorted(p.name for p in plan.directory.iterdir() if "per_query" in p.name) == [path.name]


def test_pruning_keeps_the_named_arrays_bit_for_bit_and_drops_the_rest(tmp_path):
    full = _full(np.random.default_rng(3))
    path = _write_full(tmp_path / "study_eval.per_query.npz", full)
    compact_file(path)
    before = read_per_query(path)
    keep = {"i2t_R@1", "t2i_NCS@10", "i2t_CS@100", "fold100_i2t_R@1", "not_in_the_file"}
    assert per_query_files.prune_file(path, keep) is True
    after = read_per_query(path)
    assert set(after) == keep - {"not_in_the_file"}
    for name, values in after.items():  # float32 and two-level arrays, NaN included, exactly as before
        assert values.tobytes() == before[name].tobytes(), name
    assert per_query_files.prune_file(path, keep) is False  # nothing left to drop: not rewritten
    assert not [p for p in tmp_path.iterdir() if p.name != path.name]  # no temporary file left behind
    # kitm.eval's full format is pruned into the compact one
    path = _write_full(tmp_path / "full.per_query.npz", full)
    assert per_query_files.prune_file(path, {"t2i_R@5"}) is True
    assert per_query_files.is_compact(path) and read_per_query(path)["t2i_R@5"].tobytes() == full["t2i_R@5"].tobytes()


def test_the_claims_read_the_components_of_their_parts_views_and_controls(tmp_path):
    from kitm.study.spec import load_spec

    spec = tmp_path / "s.toml"
    spec.write_text('name = "s"\nseeds = [0, 1]\n[[configuration]]\nname = "a"\n[[configuration]]\nname = "b"\n'
                    '[[configuration]]\nname = "c"\n[[claim]]\nname = "x"\nconfiguration = "b"\nbaseline = "a"\n'
                    'improves = ["rsum", "t2i_NCS@10"]\nkeeps = ["i2t_R@1"]\nkeep_tolerance = 2.0\nviews = ["fold100_t2i_R@1"]\n'
                    'truth_control = "c"\ntruth_control_metrics = ["i2t_CS@100"]\n')
    assert bootstrap.claim_arrays(load_spec(spec)) == {
        "i2t_R@1", "i2t_R@5", "i2t_R@10", "t2i_R@1", "t2i_R@5", "t2i_R@10", "t2i_NCS@10", "fold100_t2i_R@1",
        "i2t_CS@100"}


def test_pruning_a_study_without_claims_is_refused_and_changes_nothing(tmp_path, monkeypatch, capsys):
    from kitm.study import cli

    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.toml").write_text('name = "s"\nout_dir = "study"\nseeds = [0]\n[[configuration]]\nname = "a"\n')
    run = tmp_path / "study" / "runs" / "a" / "seed_0"
    run.mkdir(parents=True)
    (run / "study_eval.json").write_text('{"flat": {"i2t_R@1": 1.0}, "rsum": 1.0}')
    path = _write_full(run / "study_eval.per_query.npz", _full(np.random.default_rng(0)))
    before = path.read_bytes()
    assert cli.main(["--spec=s.toml", "--prune_per_query", "--no-progress"]) == 2
    assert "no claim of the spec reads per-query arrays" in capsys.readouterr().err
    assert path.read_bytes() == before

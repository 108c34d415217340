"""The report's extended mAP@R / R-Precision, R@K on folds, and the per-query file contract."""

import json
import os

import numpy as np
import pytest

from kitm.eval import build_report, build_report_per_query, evaluate, flat_figures, map_at_r, r_precision
from kitm.eval.cli import main
from kitm.eval.report import per_query_path
from kitm.study.metrics import parse_metric, units

# 4 images, one caption each (cpi=1): rows images, columns captions. Worked out by hand below.
FOLD_SIMS = np.array([
    [0.50, 0.40, 0.90, 0.10],
    [0.60, 0.50, 0.20, 0.30],
    [0.95, 0.10, 0.80, 0.70],
    [0.00, 0.00, 0.20, 0.30],
])


def test_folds_hand_computed():
    report, per_query = build_report_per_query(FOLD_SIMS, captions_per_image=1, ks=(1, 2), fold_images=2,
                                               fold_size=None)
    folds = report["folds"]
    assert (folds["fold_images"], folds["num_folds"], folds["images_left_out"]) == (2, 2, 0)
    # i2t, fold 0 (images 0, 1 vs captions 0, 1): image 0 [0.5, 0.4] hit; image 1 [0.6, 0.5] miss at 1, hit at 2.
    # Fold 1 (images 2, 3 vs captions 2, 3): image 2 [0.8, 0.7] hit; image 3 [0.2, 0.3] hit.
    assert folds["i2t"]["recall_vse"] == {1: 75.0, 2: 100.0}
    # t2i, fold 0: caption 0 [0.5, 0.6] miss, caption 1 [0.4, 0.5] hit; fold 1: caption 2 [0.8, 0.2] hit,
    # caption 3 [0.7, 0.3] miss.
    assert folds["t2i"]["recall_vse"] == {1: 50.0, 2: 100.0}
    assert folds["rsum"] == 75 + 100 + 50 + 100
    # The whole-set figures are unchanged by folds: image 0 loses to caption 2, image 2 to caption 0.
    assert report["all"]["i2t"]["recall_vse"][1] == 25.0
    flat = flat_figures(report)
    assert flat["fold2_i2t_R@1"] == 75.0 and flat["i2t_R@1"] == 25.0 and flat["fold2_rsum"] == 325.0
    np.testing.assert_array_equal(per_query["fold2_i2t_R@1"], [100, 0, 100, 100])
    np.testing.assert_array_equal(per_query["fold2_t2i_R@1"], [0, 100, 100, 0])


def test_folds_leave_out_the_images_after_the_last_complete_fold():
    rng = np.random.default_rng(0)
    sims = rng.normal(size=(5, 10))
    report, per_query = build_report_per_query(sims, captions_per_image=2, ks=(1,), fold_images=2, fold_size=None)
    assert (report["folds"]["num_folds"], report["folds"]["images_left_out"]) == (2, 1)
    assert np.isnan(per_query["fold2_i2t_R@1"][4]) and np.isnan(per_query["fold2_t2i_R@1"][8:]).all()
    first_four = build_report(sims[:4, :8], captions_per_image=2, ks=(1,), fold_images=2, fold_size=None)
    assert report["folds"]["i2t"] == first_four["folds"]["i2t"]
    # Folds use the cut-offs that fit a fold (a caption query ranks its fold's 3 images): R@1 only.
    report = build_report(sims, captions_per_image=2, ks=(1, 5), fold_images=3, fold_size=None)
    assert list(report["folds"]["i2t"]["recall_vse"]) == [1] and list(report["all"]["i2t"]["recall_vse"]) == [1, 5]
    with pytest.raises(ValueError, match="fold_images=3"):
        build_report(sims, captions_per_image=2, ks=(5,), fold_images=3, fold_size=None)
    with pytest.raises(ValueError, match="larger than the 5 images"):
        build_report(sims, captions_per_image=2, ks=(1,), fold_images=6, fold_size=None)


def test_extended_positives_follow_the_threshold():
    rng = np.random.default_rng(1)
    sims = rng.normal(size=(6, 12))  # cpi = 2
    relevance = rng.random((12, 6))  # [captions, images]
    result = evaluate(sims, captions_per_image=2, relevance=relevance, ks=(1,), positive_threshold=0.7)
    truth = np.zeros((6, 12), bool)
    truth[np.repeat(np.arange(6), 2), np.arange(12)] = True
    i2t_positive = truth | (relevance.T >= 0.7)
    t2i_positive = truth.T | (relevance >= 0.7)
    assert result["i2t"]["map_at_r"] == map_at_r(sims, i2t_positive)
    assert result["i2t"]["r_precision"] == r_precision(sims, i2t_positive)
    assert result["t2i"]["map_at_r"] == map_at_r(sims.T, t2i_positive)
    # Without a threshold: the ground truth alone, from its ranks (t2i: one positive, so mAP@R = R-P = R@1).
    plain = evaluate(sims, captions_per_image=2, ks=(1,))
    assert plain["i2t"]["map_at_r"] == pytest.approx(map_at_r(sims, truth), abs=1e-12)
    assert plain["i2t"]["r_precision"] == pytest.approx(r_precision(sims, truth), abs=1e-12)
    assert plain["t2i"]["map_at_r"] == plain["t2i"]["r_precision"] == plain["t2i"]["recall_vse"][1]
    with pytest.raises(ValueError, match="give `relevance` too"):
        evaluate(sims, captions_per_image=2, ks=(1,), positive_threshold=0.5)


def test_per_query_values_average_to_every_reported_figure():
    rng = np.random.default_rng(2)
    sims = np.round(rng.normal(size=(30, 90)), 1)  # ties included
    relevance = np.round(rng.random((90, 30)), 1)
    report, per_query = build_report_per_query(sims, captions_per_image=3, relevance=relevance, ks=(1, 5),
                                               fold_images=10, positive_threshold=0.8)
    flat = flat_figures(report)
    means = {name for name in flat if not name.endswith(("_medr", "_meanr", "rsum"))}
    assert set(per_query) == means
    for name, values in per_query.items():
        assert values.dtype == np.float64 and values.ndim == 1
        assert float(np.nanmean(values)) == flat[name], name
    assert per_query["i2t_R@1"].shape == (30,) and per_query["t2i_R@1"].shape == (90,)
    assert set(np.unique(per_query["t2i_R@5"])) <= {0.0, 100.0}
    assert per_query["i2t_NWAY_R1@20"].shape == (90,)  # one query per (caption, image) pair
    assert {"i2t_mAP_at_R", "t2i_R_precision", "i2t_CS@3", "t2i_NCS@5", "i2t_SR@1", "fold10_t2i_IR_R@5",
            "i2t_map"} <= set(per_query)


def test_cli_writes_the_per_query_file_beside_the_report(tmp_path):
    rng = np.random.default_rng(3)
    np.save(tmp_path / "sims.npy", rng.normal(size=(8, 16)))
    np.save(tmp_path / "relevance.npy", rng.random((16, 8)))
    out = tmp_path / "report.json"
    assert main([f"--sims={tmp_path / 'sims.npy'}", f"--relevance_matrix={tmp_path / 'relevance.npy'}",
                 "--captions_per_image=2", "--fold_images=4", "--positive_threshold=0.9", "--ks=1,2",
                 f"--out={out}", "--no-progress"]) == 0
    payload = json.loads(out.read_text())
    assert payload["settings"]["positive_threshold"] == 0.9 and payload["settings"]["fold_images"] == 4
    path = per_query_path(out)
    assert path.name == "report.per_query.npz" and payload["per_query"] == path.name
    assert sorted(os.listdir(tmp_path)) == ["relevance.npy", "report.json", "report.per_query.npz", "sims.npy"]
    with np.load(path) as arrays:
        assert set(arrays.files) == {n for n in payload["flat"] if not n.endswith(("_medr", "_meanr", "rsum"))}
        for name in arrays.files:
            assert float(np.nanmean(arrays[name])) == payload["flat"][name], name
    assert "fold4_rsum" in payload["flat"] and "fold4_i2t_R@2" in payload["flat"]


def test_cli_errors_name_the_flag(tmp_path, capsys):
    np.save(tmp_path / "sims.npy", np.eye(4))
    assert main([f"--sims={tmp_path / 'sims.npy'}", "--captions_per_image=1", "--fold_images=5",
                 "--no-progress"]) == 2
    assert "--fold_images=5 is larger than the 4 images" in capsys.readouterr().err
    assert main([f"--sims={tmp_path / 'sims.npy'}", "--captions_per_image=1", "--positive_threshold=0.5",
                 "--no-progress"]) == 2
    assert "--positive_threshold=0.5" in capsys.readouterr().err


def test_study_metric_names():
    assert parse_metric("i2t_mAP_at_R") == ("i2t", "mAP_at_R", None)
    assert parse_metric("t2i_R_precision") == ("t2i", "R_precision", None)
    assert parse_metric("fold100_i2t_R@1") == ("i2t", "fold100_R", 1)
    assert parse_metric("fold100_t2i_IR_R@10") == ("t2i", "fold100_IR_R", 10)
    assert parse_metric("fold100_rsum") == (None, "fold100_rsum", None)
    assert parse_metric("i2t_R@1") == ("i2t", "R", 1)
    assert units("fold100_i2t_R@1") == units("i2t_mAP_at_R") == "percent"

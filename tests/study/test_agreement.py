"""kitm.study.agreement: Kendall tau-b of relevance sources against the truth, checked with scipy row by row."""

import numpy as np
import pytest
from scipy import stats

from kitm.study.agreement import relevance_agreement, tau_b_figures


def test_tau_b_figures_match_scipy_row_by_row_with_ties():
    rng = np.random.default_rng(0)
    truth = rng.integers(0, 4, size=(12, 5)).astype(float)  # many ties, as exact relevance has
    source = truth + rng.normal(scale=1.0, size=truth.shape)
    source[3] = 0.5  # a constant row: no tau-b, left out
    figures = tau_b_figures(source, truth)
    per_caption = [stats.kendalltau(source[c], truth[c], variant="b").statistic for c in range(12)]
    per_image = [stats.kendalltau(source[:, i], truth[:, i], variant="b").statistic for i in range(5)]
    np.testing.assert_allclose(figures["per_caption"], np.nanmean(per_caption), rtol=1e-12)
    np.testing.assert_allclose(figures["per_image"], np.nanmean(per_image), rtol=1e-12)
    np.testing.assert_allclose(figures["all_pairs"], stats.kendalltau(source.ravel(), truth.ravel()).statistic,
                               rtol=1e-12)
    assert figures["rows_without_tau"] == int(np.isnan(per_caption).sum() + np.isnan(per_image).sum()) >= 1
    same = tau_b_figures(truth + np.arange(5) * 1e-3, truth + np.arange(5) * 1e-3)
    assert same["all_pairs"] == pytest.approx(1.0) and same["per_caption"] == pytest.approx(1.0)
    assert tau_b_figures(-source, source)["all_pairs"] == pytest.approx(-1.0)
    with pytest.raises(ValueError, match="one shape"):
        tau_b_figures(np.zeros((2, 3)), np.zeros((3, 2)))


def test_relevance_agreement_on_a_synthetic_split(tiny_synthetic):
    result = relevance_agreement(tiny_synthetic, "test", sources=("cider",))
    assert (result["captions"], result["images"]) == (60, 12)
    cider = result["sources"]["cider"]
    assert -1 <= cider["all_pairs"] <= 1 and cider["all_pairs"] > 0.1  # CIDEr-D follows the truth, imperfectly


def test_study_report_carries_the_agreement_and_caches_it(tiny_synthetic, tmp_path):
    from kitm.study.cli import main

    spec = tmp_path / "study.toml"
    spec.write_text(f"""name = "agree"
out_dir = "{tmp_path / 'out'}"
seeds = [0]
[[configuration]]
name = "triplet"
flags = ["--loss=triplet"]
[agreement]
data_dir = "{tiny_synthetic}"
sources = ["cider"]
""")
    assert main([f"--spec={spec}", "--report_only", "--no-progress"]) == 0
    report = (tmp_path / "out" / "report.md").read_text()
    assert "## Relevance sources against the reference" in report and "`cider`" in report
    cached = (tmp_path / "out" / "agreement.json").read_text()
    assert main([f"--spec={spec}", "--report_only", "--no-progress"]) == 0
    assert (tmp_path / "out" / "agreement.json").read_text() == cached  # reused, not recomputed
    spec.write_text(spec.read_text().replace('sources = ["cider"]', 'sources = ["bleu"]'))
    assert main([f"--spec={spec}", "--report_only"]) == 2  # a bad source is named


def test_prepare_steps_run_once_and_a_failure_is_named(tmp_path):
    from kitm.study.cli import CliError, _prepare
    from kitm.study.spec import load_spec

    marker = tmp_path / "world" / "dataset.json"
    spec_path = tmp_path / "study.toml"
    spec_path.write_text(f"""name = "prep"
seeds = [0]
[[configuration]]
name = "triplet"
[[prepare]]
creates = "{marker}"
command = ["-c", "import pathlib, sys; p = pathlib.Path(sys.argv[1]); p.parent.mkdir(); p.write_text('built')", "{marker}"]
""")
    spec = load_spec(spec_path)
    _prepare(spec, tmp_path / "out")
    assert marker.read_text() == "built" and "exit status 0" in (tmp_path / "out" / "prepare_0.log").read_text()
    _prepare(spec, tmp_path / "out")  # exists: not run again (mkdir would fail)
    marker.unlink()
    marker.parent.rmdir()
    spec_path.write_text(spec_path.read_text().replace("p.write_text('built')", "sys.exit(3)"))
    with pytest.raises(CliError, match=r"prepare\[0\].*status 3 without creating"):
        _prepare(load_spec(spec_path), tmp_path / "out")

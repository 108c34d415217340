"""kitm.study.claims_figure: the forest plot of every claim part's paired improvement."""

import types

import matplotlib

matplotlib.use("Agg", force=True)
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from kitm.study import claims as claim_rules  # noqa: E402
from kitm.study.claims_figure import _limits, claims_figure, forest_rows  # noqa: E402
from kitm.study.statistics import Interval  # noqa: E402


def _part(metric, kind, mean, half, verdict, paper_effect=None, tolerance=None, n=5):
    improvement = Interval(n, mean, half, half) if n >= 2 else Interval(n, mean, float("nan"), float("nan"))
    return types.SimpleNamespace(metric=metric, kind=kind, verdict=verdict, paper_effect=paper_effect,
                                 tolerance=tolerance, comparison=types.SimpleNamespace(improvement=improvement))


def _claim(name, configuration, baseline, *parts):
    return types.SimpleNamespace(name=name, configuration=configuration, baseline=baseline, parts=parts)


CLAIMS = [
    _claim("SAM improves NCS and keeps R@1", "sam", "triplet",
           _part("i2t_NCS@10", claim_rules.IMPROVES, 0.15, 0.05, claim_rules.SUPPORTS, paper_effect=0.2),
           _part("i2t_R@1", claim_rules.KEEPS, 0.3, 0.4, claim_rules.SUPPORTS, tolerance=2.0)),
    _claim("SAM 10%", "sam_10pct", "triplet_10pct",
           _part("i2t_NCS@10", claim_rules.IMPROVES, -0.3, 0.07, claim_rules.CONTRADICTS, paper_effect=7.3),
           _part("i2t_R@1", claim_rules.KEEPS, 1.0, 0.0, claim_rules.INCONCLUSIVE, tolerance=2.0, n=1)),
]


def test_rows_per_metric_with_their_verdicts_and_labels():
    rows = forest_rows(CLAIMS)
    assert list(rows) == ["i2t_NCS@10", "i2t_R@1"]
    assert [r["label"] for r in rows["i2t_NCS@10"]] == ["sam vs triplet", "sam_10pct vs triplet_10pct"]
    first = rows["i2t_NCS@10"][0]
    assert (first["low"], first["high"]) == pytest.approx((0.10, 0.20)) and first["verdict"] == "supports"
    assert len(rows["i2t_R@1"]) == 1  # the one-seed part has no interval: no row
    assert forest_rows([]) == {}


def test_limits_keep_zero_the_tolerance_and_near_paper_effects_but_not_far_ones():
    rows = forest_rows(CLAIMS)
    low, high = _limits(rows["i2t_NCS@10"])
    assert low < -0.37 and 0.2 < high < 7.3  # 7.3 would squeeze the intervals: marked at the edge instead
    low, high = _limits(rows["i2t_R@1"])
    assert low < -2.0 and high > 0.7


def test_figure_has_a_panel_per_metric():
    figure = claims_figure(CLAIMS, plt)
    assert len(figure.axes) == 2
    ticks = {t.get_text(): y for t, y in zip(figure.axes[0].get_yticklabels(), figure.axes[0].get_yticks())}
    # The spec's first claim on top.
    assert ticks["sam vs triplet (improves, n=5)"] > ticks["sam_10pct vs triplet_10pct (improves, n=5)"]
    assert any("paper 7.3" in t.get_text() for t in figure.axes[0].texts)
    plt.close(figure)
    assert claims_figure([], plt) is None

"""kitm.study's statistics and verdict rules against oracles written from the formulas (numpy/scipy directly, never
kitm.study calling itself), plus hand-computed cases."""

import math

import numpy as np
import pytest
from scipy import stats

from kitm.study import claims, statistics
from kitm.study.metrics import default_metrics, lower_is_better, parse_metric, run_figures
from kitm.study.statistics import (
    Interval,
    paired_comparison,
    t_interval,
    wilcoxon_smallest_p,
)


def _oracle_interval(values):
    x = np.asarray(values, dtype=np.float64)
    n = x.size
    mean = x.sum() / n
    std = math.sqrt(((x - mean) ** 2).sum() / (n - 1))
    return mean, std, stats.t.ppf(0.975, n - 1) * std / math.sqrt(n)


def test_t_interval_hand_computed():
    interval = t_interval([1.0, 2.0, 3.0])
    assert interval.n == 3
    assert interval.mean == pytest.approx(2.0)
    assert interval.std == pytest.approx(1.0)
    # t(0.975, 2) = 4.302653 (Student's table), s = 1, n = 3.
    assert interval.half_width == pytest.approx(4.302653 / math.sqrt(3), abs=1e-6)
    assert (interval.low, interval.high) == pytest.approx((2 - 2.484138, 2 + 2.484138), abs=1e-6)


@pytest.mark.parametrize("values", [[30.1, 31.7, 29.4, 30.9], [0.12, -0.03], [55.0, 55.0, 55.0],
                                    list(np.random.default_rng(3).normal(40, 2, size=7))])
def test_t_interval_matches_formula(values):
    mean, std, half = _oracle_interval(values)
    interval = t_interval(values)
    assert interval.n == len(values)
    assert interval.mean == pytest.approx(mean, rel=1e-12)
    assert interval.std == pytest.approx(std, rel=1e-12, abs=1e-12)
    assert interval.half_width == pytest.approx(half, rel=1e-12, abs=1e-12)
    # The same interval as scipy's own t interval construction.
    if std > 0:
        low, high = stats.t.interval(0.95, len(values) - 1, loc=mean, scale=stats.sem(values))
        assert (interval.low, interval.high) == pytest.approx((low, high), rel=1e-10)


def test_one_value_has_no_interval_and_none_has_no_mean():
    one = t_interval([42.0])
    assert one.n == 1 and one.mean == 42.0
    assert math.isnan(one.std) and math.isnan(one.half_width) and not one.defined
    empty = t_interval([])
    assert empty.n == 0 and math.isnan(empty.mean) and not empty.defined


def test_t_interval_rejects_non_finite():
    with pytest.raises(ValueError, match="finite"):
        t_interval([1.0, float("nan")])


def test_paired_comparison_matches_ttest_rel_and_wilcoxon():
    candidate = {0: 33.2, 1: 35.0, 2: 31.9, 3: 34.4, 4: 36.1, 5: 32.8}
    baseline = {0: 30.0, 1: 33.5, 2: 31.0, 3: 32.2, 4: 33.0, 5: 32.1}
    seeds = sorted(candidate)
    a = np.array([candidate[s] for s in seeds])
    b = np.array([baseline[s] for s in seeds])
    comparison = paired_comparison(candidate, baseline)
    d = a - b
    mean, std, half = _oracle_interval(d)
    assert comparison.seeds == tuple(seeds)
    assert comparison.difference.mean == pytest.approx(mean, rel=1e-12)
    assert comparison.difference.std == pytest.approx(std, rel=1e-12)
    assert comparison.difference.half_width == pytest.approx(half, rel=1e-12)
    assert comparison.t_test_p == pytest.approx(stats.ttest_rel(a, b).pvalue, rel=1e-9)
    assert comparison.wilcoxon_p == pytest.approx(stats.wilcoxon(a, b, method="exact").pvalue, rel=1e-12)
    assert comparison.improvement == comparison.difference  # higher is better


def test_paired_comparison_uses_only_common_seeds():
    candidate = {0: 10.0, 1: 12.0, 2: 11.0, 7: 99.0}  # seed 7: no baseline run
    baseline = {0: 9.0, 1: 10.5, 2: 11.5, 3: 0.0}  # seed 3: no candidate run
    comparison = paired_comparison(candidate, baseline)
    assert comparison.seeds == (0, 1, 2)
    d = np.array([1.0, 1.5, -0.5])
    assert comparison.difference.mean == pytest.approx(d.mean())
    assert comparison.t_test_p == pytest.approx(stats.ttest_rel([10.0, 12.0, 11.0], [9.0, 10.5, 11.5]).pvalue)


def test_paired_comparison_with_one_or_no_common_seed():
    one = paired_comparison({0: 5.0, 1: 6.0}, {1: 4.0})
    assert one.seeds == (1,) and one.difference.mean == 2.0 and not one.difference.defined
    assert math.isnan(one.t_test_p)
    none = paired_comparison({0: 5.0}, {1: 4.0})
    assert none.seeds == () and none.difference.n == 0 and math.isnan(none.wilcoxon_p)
    assert claims.improves_verdict(none.improvement) == claims.INCONCLUSIVE


def test_degenerate_differences():
    zero = paired_comparison({0: 1.0, 1: 2.0, 2: 3.0}, {0: 1.0, 1: 2.0, 2: 3.0})
    assert zero.t_test_p == 1.0 and zero.wilcoxon_p == 1.0 and zero.difference.half_width == 0.0
    shifted = paired_comparison({0: 2.0, 1: 3.0, 2: 4.0}, {0: 1.0, 1: 2.0, 2: 3.0})
    assert shifted.t_test_p == 0.0  # t is infinite
    assert shifted.wilcoxon_p == pytest.approx(0.25)  # the exact test's floor with three seeds


def test_wilcoxon_floor_is_two_over_two_to_the_n():
    for n in range(1, 9):
        d = np.arange(1.0, n + 1)  # every difference positive: the most extreme outcome
        assert wilcoxon_smallest_p(n) == pytest.approx(min(1.0, stats.wilcoxon(d, method="exact").pvalue))
    assert wilcoxon_smallest_p(3) == 0.25


def test_lower_is_better_turns_the_improvement():
    assert lower_is_better("i2t_medr") and lower_is_better("t2i_meanr")
    assert not lower_is_better("i2t_R@1") and not lower_is_better("rsum") and not lower_is_better("t2i_NCS@10")
    # medr falls from about 5 to about 3: the difference is negative, the improvement positive.
    candidate = {0: 3.0, 1: 3.5, 2: 2.5}
    baseline = {0: 5.0, 1: 5.0, 2: 5.5}
    comparison = paired_comparison(candidate, baseline, lower_is_better=True)
    d = np.array([-2.0, -1.5, -3.0])
    mean, _, half = _oracle_interval(d)
    assert comparison.difference.mean == pytest.approx(mean)
    assert comparison.improvement.mean == pytest.approx(-mean)
    assert (comparison.improvement.low, comparison.improvement.high) == pytest.approx((-mean - half, -mean + half))
    assert claims.improves_verdict(comparison.improvement) == claims.SUPPORTS


def _interval(low, high, n=3):
    return Interval(n=n, mean=(low + high) / 2, std=1.0, half_width=(high - low) / 2)


def test_improves_rule():
    assert claims.improves_verdict(_interval(0.1, 2.0)) == claims.SUPPORTS
    assert claims.improves_verdict(_interval(-3.0, -0.2)) == claims.CONTRADICTS
    assert claims.improves_verdict(_interval(-0.5, 2.0)) == claims.INCONCLUSIVE
    assert claims.improves_verdict(_interval(0.0, 2.0)) == claims.INCONCLUSIVE  # touching 0 is not above it
    assert claims.improves_verdict(Interval(1, 5.0, math.nan, math.nan)) == claims.INCONCLUSIVE


def test_keeps_rule():
    assert claims.keeps_verdict(_interval(-0.8, 0.5), 1.0) == claims.SUPPORTS
    assert claims.keeps_verdict(_interval(-1.0, 0.5), 1.0) == claims.SUPPORTS  # lower bound == -tolerance
    assert claims.keeps_verdict(_interval(-3.0, -1.5), 1.0) == claims.CONTRADICTS
    assert claims.keeps_verdict(_interval(-2.0, 0.3), 1.0) == claims.INCONCLUSIVE
    assert claims.keeps_verdict(_interval(0.2, 0.4), 0.0) == claims.SUPPORTS
    assert claims.keeps_verdict(Interval(1, 0.0, math.nan, math.nan), 1.0) == claims.INCONCLUSIVE
    with pytest.raises(ValueError):
        claims.keeps_verdict(_interval(0, 1), -1.0)


def test_claim_verdict_combines_parts():
    assert claims.claim_verdict([claims.SUPPORTS, claims.SUPPORTS]) == claims.HOLDS
    assert claims.claim_verdict([claims.SUPPORTS, claims.CONTRADICTS]) == claims.MIXED
    assert claims.claim_verdict([claims.INCONCLUSIVE, claims.CONTRADICTS]) == claims.DOES_NOT_HOLD
    assert claims.claim_verdict([claims.SUPPORTS, claims.INCONCLUSIVE]) == claims.INCONCLUSIVE
    assert claims.claim_verdict([]) == claims.INCONCLUSIVE


def _judge(candidate, baseline, improves=(), keeps=(), tolerance=1.0):
    def compare(configuration, reference, metric):
        if metric not in candidate and metric not in baseline:
            return None
        return paired_comparison(candidate.get(metric, {}), baseline.get(metric, {}),
                                 lower_is_better=lower_is_better(metric))

    return claims.judge_claim("c", "new", "old", list(improves), list(keeps), {m: tolerance for m in keeps}, compare)


def test_judge_claim_holds_does_not_hold_and_inconclusive():
    old = {"i2t_NCS@10": {0: 60.0, 1: 61.0, 2: 59.5}, "i2t_R@1": {0: 30.0, 1: 31.0, 2: 29.0},
           "i2t_medr": {0: 4.0, 1: 4.0, 2: 5.0}}
    better_ncs = {0: 63.0, 1: 64.2, 2: 62.4}  # +3.0, +3.2, +2.9: interval well above 0
    same_r1 = {0: 30.2, 1: 30.8, 2: 29.1}  # +0.2, -0.2, +0.1: within 1 point
    worse_r1 = {0: 25.0, 1: 26.2, 2: 24.1}  # about -5: beyond the tolerance
    noisy_r1 = {0: 33.0, 1: 27.0, 2: 29.0}
    holds = _judge({"i2t_NCS@10": better_ncs, "i2t_R@1": same_r1}, old, ["i2t_NCS@10"], ["i2t_R@1"])
    assert [p.verdict for p in holds.parts] == [claims.SUPPORTS, claims.SUPPORTS]
    assert holds.verdict == claims.HOLDS
    broken = _judge({"i2t_NCS@10": better_ncs, "i2t_R@1": worse_r1}, old, ["i2t_NCS@10"], ["i2t_R@1"])
    assert broken.parts[1].verdict == claims.CONTRADICTS and broken.verdict == claims.MIXED
    unclear = _judge({"i2t_NCS@10": better_ncs, "i2t_R@1": noisy_r1}, old, ["i2t_NCS@10"], ["i2t_R@1"])
    assert unclear.parts[1].verdict == claims.INCONCLUSIVE and unclear.verdict == claims.INCONCLUSIVE
    # medr (lower is better) rising by 2-3 ranks: "improves" is contradicted.
    worse_medr = _judge({"i2t_medr": {0: 6.0, 1: 7.0, 2: 7.5}}, old, ["i2t_medr"])
    assert worse_medr.verdict == claims.DOES_NOT_HOLD
    missing = _judge({}, old, ["i2t_SR@5"])
    assert missing.verdict == claims.INCONCLUSIVE and "no run" in missing.parts[0].note


def test_metric_names_and_default_list():
    assert parse_metric("i2t_R@10") == ("i2t", "R", 10)
    assert parse_metric("t2i_IR_R@5") == ("t2i", "IR_R", 5)
    assert parse_metric("i2t_NWAY_R1@20") == ("i2t", "NWAY_R1", 20)
    assert parse_metric("t2i_medr") == ("t2i", "medr", None)
    assert parse_metric("rsum") == (None, "rsum", None)
    available = ["i2t_R@1", "i2t_R@10", "i2t_R@5", "t2i_R@1", "t2i_R@5", "t2i_R@10", "i2t_IR_R@1", "i2t_medr",
                 "i2t_NCS@10", "i2t_NCS@1", "t2i_NCS@1", "t2i_CS@30", "t2i_CS@3", "rsum"]
    assert default_metrics(available) == ["i2t_R@1", "i2t_R@5", "i2t_R@10", "t2i_R@1", "t2i_R@5", "t2i_R@10",
                                          "i2t_NCS@1", "i2t_NCS@10", "t2i_NCS@1", "t2i_CS@3", "t2i_CS@30", "rsum"]
    assert run_figures({"flat": {"i2t_R@1": 10, "t2i_R@1": 20.5}, "rsum": 30.5}) == \
        {"i2t_R@1": 10.0, "t2i_R@1": 20.5, "rsum": 30.5}
    with pytest.raises(ValueError, match="flat"):
        run_figures({"rsum": 1.0})


def test_run_figures_reads_neighborhood_preservation_in_percent():
    figures = run_figures({"flat": {"i2t_R@1": 10.0}, "rsum": 10.0,
                           "neighbourhood_preservation": {"reference": "sbert", "k": 20, "text": 0.25, "image": 0.5}})
    assert figures == {"i2t_R@1": 10.0, "rsum": 10.0, "NP_text": 25.0, "NP_image": 50.0, "NP_text@20": 25.0,
                       "NP_image@20": 50.0}
    assert default_metrics(figures)[-2:] == ["NP_text", "NP_image"]


def test_blocked_interval_is_the_least_squares_mean_of_block_means():
    """Oracle: ordinary least squares with one indicator per block (the fixed-effect model d = mu_w + e), the
    contrast c = (1/W, ..., 1/W) and its standard error sigma^2 c' (X'X)^-1 c, with unequal block sizes."""
    rng = np.random.default_rng(3)
    blocks = [rng.normal(1, 1, 10), rng.normal(3, 0.5, 12), rng.normal(-1, 2, 7)]
    interval = statistics.blocked_interval(blocks)
    x = np.zeros((29, 3))
    x[np.arange(29), np.repeat(np.arange(3), [10, 12, 7])] = 1
    y = np.concatenate(blocks)
    beta, rss, *_ = np.linalg.lstsq(x, y, rcond=None)
    sigma2 = rss[0] / (29 - 3)
    contrast = np.full(3, 1 / 3)
    se = math.sqrt(sigma2 * contrast @ np.linalg.inv(x.T @ x) @ contrast)
    assert interval.mean == pytest.approx(contrast @ beta)
    assert interval.half_width == pytest.approx(stats.t.ppf(0.975, 26) * se)
    assert interval.n == 29 and interval.std == pytest.approx(math.sqrt(sigma2))
    # one block: the ordinary t interval; the spread between blocks is not error
    assert statistics.blocked_interval([blocks[0]]).half_width == pytest.approx(statistics.t_interval(blocks[0]).half_width)
    shifted = statistics.blocked_interval([blocks[0], blocks[0] + 100])
    assert shifted.std == pytest.approx(np.std(blocks[0], ddof=1))
    # edge cases: nothing, one difference per block (no spread within blocks), empty blocks left out
    assert statistics.blocked_interval([]).n == 0 and not statistics.blocked_interval([[1.0], [2.0]]).defined
    assert statistics.blocked_interval([[], [1.0, 3.0]]).mean == pytest.approx(2.0)
    comparison = statistics.blocked_comparison([("a", {0: 2.0, 1: 3.0}, {0: 1.0, 1: 1.0, 2: 5.0}),
                                                ("b", {0: 0.0, 1: 1.0}, {0: 1.0, 1: 1.0})])
    assert comparison.seeds == ("a/0", "a/1", "b/0", "b/1") and comparison.difference.mean == pytest.approx(0.5)
    assert math.isnan(comparison.wilcoxon_p) and 0 < comparison.t_test_p < 1


def test_random_effect_interval_is_the_t_interval_of_the_block_means():
    """The world as a random effect: a t interval on W - 1 degrees of freedom over the worlds' mean differences
    (hand-computed: block means 1, 2, 6; mean 3; s_b = sqrt(7); t(0.975, 2) = 4.3027)."""
    blocks = [[0.5, 1.5], [2.0, 2.0, 2.0], [5.0, 7.0]]
    interval = statistics.random_effect_interval(blocks)
    assert interval.n == 3 and interval.mean == pytest.approx(3.0)
    assert interval.std == pytest.approx(math.sqrt(7.0))
    assert interval.half_width == pytest.approx(stats.t.ppf(0.975, 2) * math.sqrt(7.0) / math.sqrt(3.0))
    # the same differences with the world as a fixed block give a narrower interval (the worlds' spread is not error)
    assert statistics.blocked_interval(blocks).half_width < interval.half_width
    assert math.isnan(statistics.random_effect_interval([[1.0, 2.0]]).half_width)
    assert statistics.random_effect_interval([]).n == 0

"""kitm.study deciding a claim: the five verdicts and their precedence, the power of the paired t-test against
scipy's noncentral t and a simulation, the per-query paired bootstrap against a loop written from its definition,
the spec keys behind them, and a report built from hand-made runs with per-query files."""

import json
import math

import numpy as np
import pytest
from scipy import stats

from kitm.study import bootstrap, claims, cli, statistics
from kitm.study.spec import SpecError, load_spec
from kitm.study.statistics import (
    Interval,
    PairedComparison,
    detectable_effect,
    paired_t_power,
    power_of,
    seeds_needed,
)
from kitm.study.tuned import resolve as resolve_tuned

# ------------------------------------------------------------------------------------------------------- power


def _oracle_power(effect, sd, n, alpha=0.05):
    df = n - 1
    t_c = stats.t.ppf(1 - alpha / 2, df)
    nc = effect * math.sqrt(n) / sd
    # scipy gives NaN for a far lower tail (below ~1e-20; it is at most Phi(-nc)): zero to double precision
    return stats.nct.sf(t_c, df, nc) + np.nan_to_num(stats.nct.cdf(-t_c, df, nc))


@pytest.mark.parametrize("effect, sd, n", [(0.5, 1.0, 34), (0.037, 0.0089, 4), (1.0, 2.0, 3), (2.5, 1.3, 5),
                                           (-0.8, 1.0, 12), (0.1, 1.0, 2), (3.0, 1.56, 4)])
def test_power_is_the_noncentral_t_tail_mass(effect, sd, n):
    assert paired_t_power(effect, sd, n) == pytest.approx(_oracle_power(abs(effect), sd, n), rel=1e-10, abs=1e-12)
    # one-sided view of the same number: P(T > t_c) dominates, the other tail is at most alpha / 2
    t_c = stats.t.ppf(0.975, n - 1)
    assert paired_t_power(effect, sd, n) >= stats.nct.sf(t_c, n - 1, abs(effect) * math.sqrt(n) / sd)


def test_power_agrees_with_a_simulated_paired_t_test():
    rng = np.random.default_rng(0)
    n, effect, sd, trials = 6, 1.2, 1.0, 40_000
    d = rng.normal(effect, sd, size=(trials, n))
    t = d.mean(axis=1) / (d.std(axis=1, ddof=1) / math.sqrt(n))
    rejected = np.mean(np.abs(t) > stats.t.ppf(0.975, n - 1))
    # binomial standard error sqrt(p (1 - p) / trials) <= 0.0025: 5 of them
    assert paired_t_power(effect, sd, n) == pytest.approx(rejected, abs=0.0125)
    assert paired_t_power(0.0, sd, n) == pytest.approx(0.05, abs=1e-12)  # no effect: the test's level


@pytest.mark.parametrize("d, n", [(0.2, 199), (0.5, 34), (0.8, 15), (1.0, 10)])
def test_seeds_needed_textbook_values(d, n):
    # Two-sided paired (one-sample) t-test, alpha 0.05, power 0.8 (Cohen 1988; G*Power): d = 0.5 needs 34 pairs.
    assert seeds_needed(d, 1.0) == n
    assert seeds_needed(3.0 * d, 3.0) == n  # only effect / sd matters
    assert _oracle_power(d, 1.0, n) >= 0.8 > _oracle_power(d, 1.0, n - 1)


def test_detectable_effect_inverts_the_power():
    for n in (2, 3, 4, 6, 10, 40):
        delta = detectable_effect(1.0, n)
        assert _oracle_power(delta, 1.0, n) == pytest.approx(0.8, abs=1e-9)
        assert detectable_effect(0.25, n) == pytest.approx(0.25 * delta, rel=1e-9)
    sizes = [detectable_effect(1.0, n) for n in range(2, 30)]
    assert all(a > b for a, b in zip(sizes, sizes[1:]))  # more seeds, smaller detectable effects
    powers = [paired_t_power(e, 1.0, 5) for e in np.linspace(0, 4, 41)]
    assert all(a < b for a, b in zip(powers, powers[1:]))
    assert all(paired_t_power(1.0, 1.0, n) < paired_t_power(1.0, 1.0, n + 1) for n in range(2, 30))


def test_power_edge_cases():
    assert math.isnan(paired_t_power(1.0, 1.0, 1)) and math.isnan(detectable_effect(1.0, 1))
    assert math.isnan(paired_t_power(1.0, math.nan, 4)) and math.isnan(detectable_effect(math.nan, 4))
    assert paired_t_power(0.3, 0.0, 3) == 1.0 and detectable_effect(0.0, 4) == 0.0 and seeds_needed(0.3, 0.0) == 2
    assert seeds_needed(0.0, 1.0) is None and seeds_needed(math.nan, 1.0) is None
    assert seeds_needed(0.01, 1.0, max_seeds=1000) is None
    assert paired_t_power(60.0, 1.0, 11) == 1.0  # scipy's NaN far tail is bounded by Phi(-nc) and taken as 0
    power = power_of(Interval(4, 0.01, 0.0089, 0.014), 0.037)
    assert power.seeds_for_effect == seeds_needed(0.037, 0.0089) == 3
    assert power.power_at_effect == pytest.approx(_oracle_power(0.037, 0.0089, 4))
    assert math.isnan(power_of(Interval(1, 0.5, math.nan, math.nan), 1.0).detectable)


# ----------------------------------------------------------------------------------------------------- verdicts

def _part(low, high, kind=claims.IMPROVES, paper=None, tolerance=None, metric="i2t_CS@100", n=4):
    if n < 2:
        interval = Interval(n, low, math.nan, math.nan)
    else:
        interval = Interval(n, (low + high) / 2, (high - low) / 2 / stats.t.ppf(0.975, n - 1) * math.sqrt(n),
                            (high - low) / 2)
    comparison = PairedComparison(tuple(range(n)), interval, False, math.nan, math.nan)
    verdict = claims.improves_verdict(interval) if kind == claims.IMPROVES else claims.keeps_verdict(interval,
                                                                                                     tolerance)
    return claims.ClaimPart(kind, metric, tolerance, comparison, verdict, paper_effect=paper,
                            power=power_of(interval, paper))


def _control(*intervals):
    return claims.TruthControl("truth", "base", tuple(_part(lo, hi, metric=f"m{i}") for i, (lo, hi) in
                                                      enumerate(intervals)))


def _keep(low, high, tolerance=2.0):
    return _part(low, high, claims.KEEPS, tolerance=tolerance, metric="i2t_R@1")


def test_each_of_the_six_outcomes():
    holds = claims.claim_outcome([_part(0.01, 0.05, paper=0.03), _keep(-1.5, 1.0)], _control((0.01, 0.04)))
    assert holds[0] == claims.HOLDS
    wrong = claims.claim_outcome([_part(-0.05, -0.01, paper=0.03), _keep(-2.5, 1.0)])
    assert wrong[0] == claims.DOES_NOT_HOLD and "lies below 0" in wrong[1]
    lost = claims.claim_outcome([_part(-0.02, 0.05), _keep(-5.0, -3.0)])
    assert lost[0] == claims.DOES_NOT_HOLD and "below -2.00" in lost[1] and lost[2] == 1
    # one part holds, another is contradicted: mixed, naming both, the key part the contradicted one
    mixed = claims.claim_outcome([_part(0.01, 0.05), _keep(-5.0, -3.0)])
    assert mixed[0] == claims.MIXED and mixed[2] == 1
    assert mixed[1].startswith("holds on i2t_CS@100") and "does not hold on i2t_R@1" in mixed[1]
    split = claims.claim_outcome([_part(0.002, 0.003, metric="i2t_CS@100"), _part(-0.002, -0.001, metric="t2i_CS@100"),
                                  _keep(-0.5, 0.3)])
    assert split[0] == claims.MIXED and "t2i_CS@100" in split[1].split("does not hold on")[1]
    assert "i2t_R@1 -0.10 [-0.50, 0.30] keeps within 2.00" in split[1]
    below = claims.claim_outcome([_part(-0.0208, 0.0074, paper=0.037), _keep(-1.3, 1.3)], _control((0.01, 0.04)))
    assert below[0] == claims.BELOW_PAPER and "excludes the paper's 0.0370" in below[1]
    untestable = claims.claim_outcome([_part(-0.02, 0.05, paper=0.037)], _control((0.01, 0.04), (-0.01, 0.02)))
    assert untestable[0] == claims.UNTESTABLE and "m1" in untestable[1] and "m0" not in untestable[1]
    unclear = claims.claim_outcome([_part(-0.02, 0.05, paper=0.037), _keep(-2.5, 1.0)], _control((0.01, 0.04)))
    assert unclear[0] == claims.INCONCLUSIVE
    needed = seeds_needed(0.037, _part(-0.02, 0.05).power.sd)
    assert f"i2t_CS@100: {needed} seeds for the paper's 0.0370" in unclear[1]


def test_precedence_when_several_apply():
    failing = _control((-0.01, 0.02))
    # a contradicted part wins over everything: a failing control, a part below the paper's effect
    result = claims.claim_outcome([_part(-0.05, -0.01), _part(0.0, 0.01, paper=0.03)], failing)
    assert result[0] == claims.DOES_NOT_HOLD
    # a holding claim holds even where the truth control fails, and says so; smaller-than-paper gains are a caveat
    result = claims.claim_outcome([_part(0.001, 0.01, paper=0.03)], failing)
    assert result[0] == claims.HOLDS and "smaller than the paper's" in result[1] and "truth control" in result[1]
    # a failing control makes an excluded paper effect uninformative: untestable, with the exclusion in the reason
    result = claims.claim_outcome([_part(-0.01, 0.01, paper=0.03)], failing)
    assert result[0] == claims.UNTESTABLE and "excludes the paper's" in result[1]
    # one part excluding the paper's gain decides "below" even when others are undecided or have no paper effect
    result = claims.claim_outcome([_part(-0.05, 0.09, paper=0.03), _part(-0.01, 0.01, paper=0.03, metric="b")])
    assert result[0] == claims.BELOW_PAPER and result[2] == 1
    # a control without an interval is no evidence either way
    one_seed = claims.TruthControl("truth", "base", (_part(0.01, 0.01, n=1),))
    assert one_seed.verdict == claims.CONTROL_UNAVAILABLE
    result = claims.claim_outcome([_part(-0.01, 0.05)], one_seed)
    assert result[0] == claims.INCONCLUSIVE and "has no interval" in result[1]
    assert claims.claim_outcome([], None)[0] == claims.INCONCLUSIVE


def test_without_paper_effect_or_control_the_earlier_rules_apply():
    rng = np.random.default_rng(1)
    for _ in range(60):
        parts = []
        for _ in range(rng.integers(1, 4)):
            low = rng.normal(0, 1)
            high = low + abs(rng.normal(0, 1))
            parts.append(_part(low, high) if rng.random() < 0.5 else _keep(low, high, 1.0))
        outcome = claims.claim_outcome(parts)[0]
        assert outcome == claims.claim_verdict([p.verdict for p in parts])
        assert outcome in (claims.HOLDS, claims.MIXED, claims.DOES_NOT_HOLD, claims.INCONCLUSIVE)
        verdicts = [p.verdict for p in parts]
        if outcome == claims.MIXED:
            assert claims.SUPPORTS in verdicts and claims.CONTRADICTS in verdicts


# ---------------------------------------------------------------------------------------------------- bootstrap

def _loop_bootstrap(candidate, baseline, metric, resamples, rng_seed):
    """The definition, one resample at a time: same query indices for both sides and every seed."""
    parts = bootstrap.components(metric)
    sizes = {}
    for name, query_set in parts.items():
        sizes[query_set] = len(candidate[0][name])
    # each query set's generator, seeded [rng_seed, its position among the sorted set names], all rows at once
    indices = {q: np.random.default_rng([rng_seed, i]).integers(0, size, size=(resamples, size))
               for i, (q, size) in enumerate(sorted(sizes.items()))}
    out = np.zeros((len(candidate), resamples))
    for b in range(resamples):
        for s, (run, reference) in enumerate(zip(candidate, baseline)):
            for name, query_set in parts.items():
                idx = indices[query_set][b]
                out[s, b] += np.nanmean(run[name][idx]) - np.nanmean(reference[name][idx])
    return out


def test_identical_runs_give_a_zero_interval_and_a_constant_shift_an_exact_one():
    rng = np.random.default_rng(2)
    runs = [{"i2t_NCS@10": rng.uniform(0, 100, 50)} for _ in range(3)]
    same = bootstrap.paired_bootstrap(runs, runs, "i2t_NCS@10", resamples=300)
    assert same.pooled == 0 and same.pooled_low == 0 and same.pooled_high == 0 and same.pooled_se == 0
    assert set(same.low) == {0.0} and set(same.high) == {0.0}
    shifted = [{"i2t_NCS@10": run["i2t_NCS@10"] + 2.5} for run in runs]
    moved = bootstrap.paired_bootstrap(shifted, runs, "i2t_NCS@10", resamples=300)
    assert moved.pooled == pytest.approx(2.5) and (moved.pooled_low, moved.pooled_high) == pytest.approx((2.5, 2.5))


def test_known_shift_with_noise_matches_the_standard_error():
    rng = np.random.default_rng(3)
    queries, shift, noise = 400, 1.5, 4.0
    baseline = [{"t2i_R@5": rng.uniform(0, 100, queries)} for _ in range(2)]
    candidate = [{"t2i_R@5": run["t2i_R@5"] + shift + rng.normal(0, noise, queries)} for run in baseline]
    result = bootstrap.paired_bootstrap(candidate, baseline, "t2i_R@5")
    assert result.queries == {"t2i": queries} and result.resamples == 2000
    d = [c["t2i_R@5"] - b["t2i_R@5"] for c, b in zip(candidate, baseline)]
    assert result.observed == pytest.approx([x.mean() for x in d])
    assert result.pooled_low < shift < result.pooled_high
    # the pooled difference averages two seeds' independent noise over the same queries: SE = noise / sqrt(2 Q)
    assert result.pooled_se == pytest.approx(noise / math.sqrt(2 * queries), rel=0.1)
    for low, high, x in zip(result.low, result.high, d):  # per seed: about mean +- 1.96 sd / sqrt(Q)
        assert high - low == pytest.approx(2 * 1.96 * x.std() / math.sqrt(queries), rel=0.12)


def test_vectorised_bootstrap_equals_the_loop_with_nans_rsum_and_chunks(monkeypatch):
    rng = np.random.default_rng(4)

    def run():
        arrays = {f"i2t_R@{k}": rng.integers(0, 2, 30) * 100.0 for k in (1, 5, 10)}
        arrays.update({f"t2i_R@{k}": rng.integers(0, 2, 150) * 100.0 for k in (1, 5, 10)})
        cs = rng.uniform(-1, 1, 30)
        cs[rng.random(30) < 0.2] = np.nan  # all-tied queries have no tau
        arrays["i2t_CS@10"] = cs
        return arrays

    candidate, baseline = [run(), run()], [run(), run()]
    monkeypatch.setattr(bootstrap, "CHUNK_ELEMENTS", 100)  # many chunks of a few resamples
    for metric in ("rsum", "i2t_CS@10", "t2i_R@5"):
        result = bootstrap.paired_bootstrap(candidate, baseline, metric, resamples=60, rng_seed=7)
        loop = _loop_bootstrap(candidate, baseline, metric, 60, 7)
        assert np.allclose(result.low, np.percentile(loop, 2.5, axis=1))
        assert np.allclose(result.high, np.percentile(loop, 97.5, axis=1))
        pooled = loop.mean(axis=0)
        assert (result.pooled_low, result.pooled_high) == pytest.approx(tuple(np.percentile(pooled, [2.5, 97.5])))
        assert result.pooled_se == pytest.approx(pooled.std(ddof=1))
        expected = [sum(np.nanmean(c[n]) - np.nanmean(b[n]) for n in bootstrap.components(metric))
                    for c, b in zip(candidate, baseline)]
        assert result.observed == pytest.approx(expected)
    assert bootstrap.paired_bootstrap(candidate, baseline, "rsum", resamples=5).queries == {"i2t": 30, "t2i": 150}


def test_bootstrap_orientation_and_errors():
    low = [{"i2t_meanr": np.array([2.0, 4.0, 6.0])}]
    high = [{"i2t_meanr": np.array([3.0, 5.0, 7.0])}]
    assert bootstrap.paired_bootstrap(low, high, "i2t_meanr", resamples=10).pooled == pytest.approx(1.0)  # rank fell
    with pytest.raises(ValueError, match="same test queries"):
        bootstrap.paired_bootstrap(low, [{"i2t_meanr": np.ones(4)}], "i2t_meanr")
    with pytest.raises(ValueError, match="same positive number"):
        bootstrap.paired_bootstrap(low, [], "i2t_meanr")
    assert bootstrap.per_query_path("a/b/study_eval.json").as_posix() == "a/b/study_eval.per_query.npz"


# --------------------------------------------------------------------------------------------------------- spec

SPEC = """
name = "toy"
out_dir = "{out}"
seeds = [0, 1, 2]
baseline = "base"
[evaluation]
relevance = "truth"
[[configuration]]
name = "base"
flags = ["--loss=triplet"]
[[configuration]]
name = "better"
flags = ["--loss=triplet", "--margin=0.1"]
[[configuration]]
name = "better_truth"
flags = ["--loss=triplet", "--margin=0.1", "--relevance=truth"]
[[claim]]
name = "better improves NCS and keeps R@1"
configuration = "better"
improves = ["i2t_NCS@10", "t2i_NCS@10"]
keeps = ["i2t_R@1"]
keep_tolerance = 1.0
paper_effect = {{"i2t_NCS@10" = 2.0, "t2i_NCS@10" = 4.0}}
paper_effect_source = "Someone et al. 2020, Table 2"
truth_control = "better_truth"
"""


def test_spec_keys_parse(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(SPEC.format(out=tmp_path / "study"))
    claim = load_spec(path).claims[0]
    assert claim.paper_effect == {"i2t_NCS@10": 2.0, "t2i_NCS@10": 4.0}
    assert claim.paper_effect_source == "Someone et al. 2020, Table 2"
    assert claim.truth_control == "better_truth" and claim.truth_control_metrics == ("i2t_NCS@10", "t2i_NCS@10")
    assert claim.as_dict()["paper_effect"] == {"i2t_NCS@10": 2.0, "t2i_NCS@10": 4.0}
    path.write_text(SPEC.format(out=tmp_path / "study") + 'truth_control_metrics = ["i2t_SR@10"]\n')
    assert load_spec(path).claims[0].truth_control_metrics == ("i2t_SR@10",)


@pytest.mark.parametrize("edit, key, message", [
    (lambda s: s.replace('"t2i_NCS@10" = 4.0', '"i2t_R@1" = 4.0'), "claim[0].paper_effect.i2t_R@1",
     "is not one of the claim's 'improves'"),
    (lambda s: s.replace('"t2i_NCS@10" = 4.0', '"t2i_NCS@10" = -4.0'), "claim[0].paper_effect.t2i_NCS@10", "> 0"),
    (lambda s: s.replace('paper_effect = {"i2t_NCS@10" = 2.0, "t2i_NCS@10" = 4.0}', "paper_effect = 2.0"),
     "claim[0].paper_effect", "must be a table"),
    (lambda s: s.replace('paper_effect_source = "Someone et al. 2020, Table 2"\n', ""),
     "claim[0].paper_effect_source", "missing"),
    (lambda s: s.replace('paper_effect = {"i2t_NCS@10" = 2.0, "t2i_NCS@10" = 4.0}\n', ""),
     "claim[0].paper_effect_source", "without 'paper_effect'"),
    (lambda s: s.replace('truth_control = "better_truth"', 'truth_control = "nope"'), "claim[0].truth_control",
     "'nope' is not a configuration"),
    (lambda s: s.replace('truth_control = "better_truth"', 'truth_control = "base"'), "claim[0].truth_control",
     "baseline"),
    (lambda s: s.replace('truth_control = "better_truth"', 'truth_control_metrics = ["rsum"]'),
     "claim[0].truth_control_metrics", "without 'truth_control'"),
    (lambda s: s + "truth_control_metrics = []\n", "claim[0].truth_control_metrics", "at least one metric"),
])
def test_spec_errors_name_the_file_and_key(tmp_path, edit, key, message):
    path = tmp_path / "s.toml"
    path.write_text(edit(SPEC.format(out=tmp_path / "study")))
    with pytest.raises(SpecError) as error:
        load_spec(path)
    assert str(error.value).startswith(f"{path}: {key}: "), str(error.value)
    assert message in str(error.value)


def test_the_repository_studies_load_and_the_claims_study_fixes_its_effects_before_the_runs(repo_root, monkeypatch):
    monkeypatch.chdir(repo_root)  # flagfile paths are relative to the repository root
    for name in ("centers_tuning", "neighborhood_batching"):
        spec = load_spec(repo_root / "studies" / f"{name}.toml")
        assert all(claim.paper_effect == {} and claim.truth_control is None for claim in spec.claims)
    claims = load_spec(repo_root / "studies" / "claims.toml")
    assert len(claims.seeds) >= 20
    papers = [claim for claim in claims.claims if not claim.name.startswith("Dose-response")]  # no paper measured it
    assert len(papers) >= 9
    for claim in papers:  # every paper's claim names where the paper reports its parts; where the paper gives a
        # gain for an "improves" part it is fixed here (Img NNs' neighbourhood preservation is not reported)
        assert claim.paper_cells, claim.name
        if claim.paper_effect:
            assert claim.paper_effect_source, claim.name
        assert set(claim.paper_effect) <= set(claim.improves)
    ladders = [claim for claim in papers if claim.name.startswith("Ladder")]
    assert ladders and all({"i2t_CS@1000", "t2i_CS@1000", "i2t_CS@100", "t2i_CS@100"} <= set(c.improves)
                           for c in ladders)
    centers = next(claim for claim in papers if claim.name.startswith("Semantic centers"))
    assert centers.improves == ("rsum",) and "fold100_rsum" in centers.views  # the 1K split decides, folds shown
    neighbourhoods = [claim for claim in papers if claim.name.startswith("Semantic neighbourhoods")]
    assert all({"NP_text@200", "NP_image@200"} <= set(c.improves) for c in neighbourhoods)


def test_the_second_claims_study_trains_every_arm_as_tuned_on_three_worlds(repo_root, monkeypatch):
    """studies/claims_worlds.toml (issue 31, items 2-4): every configuration a tuned arm, at least 10 seeds, every
    claim pooled over worlds 0, 2 and 3 with each world's own pair, the paper's regimes among the claims."""
    monkeypatch.chdir(repo_root)
    spec = load_spec(repo_root / "studies" / "claims_worlds.toml")
    assert len(spec.seeds) >= 10 and all(c.tuned_arm for c in spec.configurations)
    resolved, records = resolve_tuned(spec)  # reads the committed tuning runs; arms still tuning wait
    assert {r.configuration for r in records} == set(spec.configuration_names)
    tuning = load_spec(repo_root / "studies" / "claims_tuning.toml")
    for record in records:
        if record.chosen is not None:  # the chosen configuration's flags first, then the world's own
            chosen = tuning.configuration(record.chosen).flags
            assert resolved.configuration(record.configuration).flags[:len(chosen)] == chosen
    for claim in spec.claims:
        assert claim.paper_cells and [label for label, _, _ in claim.block_pairs] == ["world 0", "world 2", "world 3"]
        for label, configuration, baseline in claim.block_pairs:
            prefix = f"w{label.split()[-1]}."
            assert configuration.startswith(prefix) and baseline.startswith(prefix)
    names = {claim.configuration: claim for claim in spec.claims}
    assert names["w0.ladder_hn"].baseline == names["w0.ladder_adaptive_hn"].baseline == "w0.vsepp"
    assert names["w0.sam_10pct_ref"].baseline == "w0.triplet_10pct"
    subsets = [next(f for f in spec.configuration(f"w{w}.sam_10pct_ref").flags if "subset" in f) for w in (0, 2, 3)]
    assert len(set(subsets)) == 3  # a different 10% subset in each world
    nonliteral = names["w0.nonliteral_neighborhood"]
    assert {"i2t_NWAY_R1@5", "t2i_NWAY_R1@5", "NP_text@200"} <= set(nonliteral.improves)
    assert nonliteral.baseline == "w0.nonliteral_angular"


# ------------------------------------------------------------------------------------------------------ report

def _write_run(study, configuration, seed, per_query, extra_figures=None, write_npz=True):
    directory = study / "runs" / configuration / f"seed_{seed}"
    directory.mkdir(parents=True)
    flat = {name: float(np.nanmean(values)) for name, values in per_query.items()}
    flat.update(extra_figures or {})
    rsum = sum(flat[n] for n in bootstrap.RSUM_COMPONENTS)
    (directory / "study_eval.json").write_text(json.dumps({"flat": flat, "rsum": rsum}))
    if write_npz:
        np.savez(directory / "study_eval.per_query.npz", **per_query)


def test_report_with_per_query_files(tmp_path, capsys):
    """better gains 1.2, -0.4, 0.6 NCS points on seeds 0-2; its truth variant 3: a claim whose paper reports +4 on
    t2i NCS is below the paper's effect (the interval straddles 0 and its upper bound is under 4)."""
    rng = np.random.default_rng(5)
    study = tmp_path / "study"
    images, captions = 40, 200
    for seed in range(3):
        base = {**{f"i2t_R@{k}": rng.integers(0, 2, images) * 100.0 for k in (1, 5, 10)},
                **{f"t2i_R@{k}": rng.integers(0, 2, captions) * 100.0 for k in (1, 5, 10)},
                "i2t_NCS@10": rng.uniform(40, 80, images), "t2i_NCS@10": rng.uniform(40, 80, captions)}
        gain = (1.2, -0.4, 0.6)[seed]  # t interval about 0.47 [-1.5, 2.5]: straddles 0, excludes 4
        better = dict(base, **{"i2t_NCS@10": base["i2t_NCS@10"] + gain + rng.normal(0, 0.2, images),
                               "t2i_NCS@10": base["t2i_NCS@10"] + gain + rng.normal(0, 0.2, captions)})
        truth = dict(base, **{"i2t_NCS@10": base["i2t_NCS@10"] + 3.0, "t2i_NCS@10": base["t2i_NCS@10"] + 3.0})
        _write_run(study, "base", seed, base)
        _write_run(study, "better", seed, better, write_npz=seed != 2)  # seed 2: an evaluation without the file
        _write_run(study, "better_truth", seed, truth, {"i2t_R@1": float(np.mean(base["i2t_R@1"]))})
    path = tmp_path / "s.toml"
    path.write_text(SPEC.format(out=study))
    assert cli.main([f"--spec={path}", "--report_only", "--no-progress"]) == 0
    assert "below the paper's effect" in capsys.readouterr().out
    report = json.loads((study / "report.json").read_text())
    claim = report["claims"][0]
    assert claim["verdict"] == "below the paper's effect" and claim["key_metric"] == "t2i_NCS@10"
    assert claim["truth_control"]["verdict"] == "beats the baseline"
    ncs = claim["parts"][1]
    assert ncs["excludes_paper_effect"] and ncs["paper_effect"] == 4.0
    assert ncs["power"]["seeds_for_paper_effect"] == seeds_needed(4.0, ncs["power"]["sd"])
    assert ncs["power"]["sd"] == pytest.approx(ncs["comparison"]["improvement"]["std"])
    pooled = ncs["bootstrap"]["pooled"]
    assert ncs["bootstrap"]["seeds"] == [0, 1] and "1 of 3 paired seeds without per-query data" in ncs["bootstrap_note"]
    # seeds 0 and 1 (seed 2 has no file): the mean of their gains 1.2 and -0.4, from the test items alone
    assert pooled["low"] < pooled["difference"] < pooled["high"] and pooled["difference"] == pytest.approx(0.4, abs=0.1)
    assert pooled["high"] - pooled["low"] < 0.2 * (ncs["comparison"]["improvement"]["high"]
                                                   - ncs["comparison"]["improvement"]["low"])
    r1 = claim["parts"][2]  # identical R@1 per query: a zero bootstrap interval
    assert r1["bootstrap"]["pooled"] == {"difference": 0.0, "low": 0.0, "high": 0.0, "se": 0.0}
    assert report["claims_summary"][0]["verdict"] == "below the paper's effect"
    assert report["power"]["alpha"] == 0.05 and report["bootstrap"]["resamples"] == 2000
    markdown = (study / "report.md").read_text()
    for text in ("## Summary", "| better improves NCS and keeps R@1 | **below the paper's effect** | i2t_NCS@10",
                 "Someone et al. 2020, Table 2", "Truth control `better_truth` against `base`: **beats the baseline**",
                 "excludes the paper's effect", "SD of paired differences", "per-query bootstrap, pooled [95%]"):
        assert text in markdown, text
    # --prune_per_query keeps only the arrays the claim reads; its bootstrap is the same from the pruned files
    assert cli.main([f"--spec={path}", "--prune_per_query", "--no-progress"]) == 0
    assert "8 of 8 per-query files pruned to the 3 arrays the claims read" in capsys.readouterr().err
    kept = np.load(study / "runs" / "base" / "seed_0" / "study_eval.per_query.npz")["names"].tolist()
    assert sorted(kept) == ["i2t_NCS@10", "i2t_R@1", "t2i_NCS@10"]
    again = json.loads((study / "report.json").read_text())["claims"][0]
    for part, before in zip(again["parts"], claim["parts"]):  # full files -> float32: within 1e-6 of a point
        assert part["bootstrap"]["pooled"] == pytest.approx(before["bootstrap"]["pooled"], abs=1e-6)


def test_report_without_per_query_files_says_so(tmp_path):
    study = tmp_path / "study"
    rng = np.random.default_rng(6)
    for seed in range(2):
        for configuration, shift in (("base", 0.0), ("better", 2.0), ("better_truth", 0.5)):
            arrays = {**{n: rng.integers(0, 2, 20) * 100.0 for n in bootstrap.RSUM_COMPONENTS},
                      "i2t_NCS@10": rng.uniform(40, 60, 20) + shift, "t2i_NCS@10": rng.uniform(40, 60, 20) + shift}
            _write_run(study, configuration, seed, arrays, write_npz=False)
    path = tmp_path / "s.toml"
    path.write_text(SPEC.format(out=study).replace("seeds = [0, 1, 2]", "seeds = [0, 1]"))
    assert cli.main([f"--spec={path}", "--report_only", "--no-progress"]) == 0
    report = json.loads((study / "report.json").read_text())
    assert {p["bootstrap_note"] for p in report["claims"][0]["parts"]} == {"no per-query data"}
    assert "| no per-query data |" in (study / "report.md").read_text()
    # and one warning says so at once, naming the runs' configurations and where such files come back from
    missing = [w for w in report["warnings"] if "have no per-query file" in w]
    assert len(missing) == 1 and missing[0].startswith("4 evaluated run(s) of base, better have no")
    assert "restores them from git history first (docs/studies.md)" in missing[0]


def test_per_query_file_that_disagrees_with_the_eval_json_is_not_used(tmp_path):
    study = tmp_path / "study"
    rng = np.random.default_rng(7)
    for seed in range(2):
        for configuration in ("base", "better", "better_truth"):
            arrays = {**{n: rng.integers(0, 2, 20) * 100.0 for n in bootstrap.RSUM_COMPONENTS},
                      "i2t_NCS@10": rng.uniform(40, 60, 20), "t2i_NCS@10": rng.uniform(40, 60, 20)}
            _write_run(study, configuration, seed, arrays)
            np.savez(study / "runs" / configuration / f"seed_{seed}" / "study_eval.per_query.npz",
                     **{**arrays, "i2t_NCS@10": arrays["i2t_NCS@10"] + 1.0})  # not the figure's queries
    path = tmp_path / "s.toml"
    path.write_text(SPEC.format(out=study).replace("seeds = [0, 1, 2]", "seeds = [0, 1]"))
    assert cli.main([f"--spec={path}", "--report_only", "--no-progress"]) == 0
    parts = json.loads((study / "report.json").read_text())["claims"][0]["parts"]
    assert parts[0]["bootstrap"] is None and "has mean" in parts[0]["bootstrap_note"]
    assert parts[1]["bootstrap"] is not None  # t2i_NCS@10 matches its figure
    broken = study / "runs" / "base" / "seed_0" / "study_eval.per_query.npz"
    broken.write_bytes(b"PK\x03\x04 not a zip")  # a truncated file: a warning, the other seed still used
    assert cli.main([f"--spec={path}", "--report_only", "--no-progress"]) == 0
    report = json.loads((study / "report.json").read_text())
    assert any(str(broken) in warning and "cannot be read" in warning for warning in report["warnings"])
    assert report["claims"][0]["parts"][1]["bootstrap"]["seeds"] == [1]


BLOCKED_SPEC = """
name = "worlds"
out_dir = "{out}"
seeds = [0, 1, 2, 3]
baseline = "base"
[evaluation]
relevance = "truth"
[[configuration]]
name = "base"
flags = ["--loss=triplet"]
[[configuration]]
name = "new"
flags = ["--loss=triplet", "--margin=0.1"]
[[configuration]]
name = "base_w2"
flags = ["--loss=triplet", "--data_dir=w2"]
[[configuration]]
name = "new_w2"
flags = ["--loss=triplet", "--margin=0.1", "--data_dir=w2"]
[[claim]]
name = "new improves NCS in every world"
configuration = "new"
improves = ["i2t_NCS@10"]
blocks = [{{label = "world 2", configuration = "new_w2", baseline = "base_w2"}}]
"""


# Each seed's gain of `new` over `base` in world 0 and of `new_w2` over `base_w2` in world 2 (i2t NCS@10 points).
WORLD_GAINS = {"new": (1.0, 1.2, 0.9, 1.1), "new_w2": (-0.4, -0.6, -0.5, -0.45)}


def _write_worlds(study, data=None):
    """Seeds 0-3 of BLOCKED_SPEC's four configurations with WORLD_GAINS; `data`: the records each configuration's
    summary.json names (none written without it)."""
    for seed in range(4):
        for base, new in (("base", "new"), ("base_w2", "new_w2")):
            level = 60.0 + seed
            _write_run(study, base, seed, {"i2t_NCS@10": np.full(5, level), **_recall_zeros()}, write_npz=False)
            _write_run(study, new, seed, {"i2t_NCS@10": np.full(5, level + WORLD_GAINS[new][seed]),
                                          **_recall_zeros()}, write_npz=False)
            for configuration in (base, new) if data else ():
                summary = {"dataset": {"dir": data[configuration], "name": "synthetic", "splits": {"test": 5}}}
                (study / "runs" / configuration / f"seed_{seed}" / "summary.json").write_text(json.dumps(summary))


def test_a_claim_over_worlds_pools_them_as_blocks_and_says_when_they_disagree(tmp_path):
    """World 0: +1.0 +- noise on 4 seeds; world 2: -0.5. The pooled interval is the blocked one (the mean of the world
    means, the spread within worlds), each world's verdict is shown, and the disagreement is named."""
    study = tmp_path / "study"
    _write_worlds(study)
    path = tmp_path / "s.toml"
    path.write_text(BLOCKED_SPEC.format(out=study))
    assert cli.main([f"--spec={path}", "--report_only", "--no-progress"]) == 0
    claim = json.loads((study / "report.json").read_text())["claims"][0]
    expected = statistics.blocked_interval([WORLD_GAINS["new"], WORLD_GAINS["new_w2"]])
    improvement = claim["parts"][0]["comparison"]["improvement"]
    assert improvement["mean"] == pytest.approx(expected.mean) and improvement["low"] == pytest.approx(expected.low)
    assert improvement["n"] == 8 and claim["parts"][0]["comparison"]["seeds"][:2] == ["world 0/0", "world 0/1"]
    assert [(b["label"], b["verdict"]) for b in claim["per_block"]] == [("world 0", "holds"),
                                                                        ("world 2", "does not hold")]
    assert claim["verdict"] == "holds" and "the worlds disagree" in claim["block_note"]
    markdown = (study / "report.md").read_text()
    assert "Pooled over 2 worlds with the world as a block" in markdown and "world 2: **does not hold**" in markdown


def test_the_third_studys_rules_collapse_and_the_world_as_a_random_effect(tmp_path):
    """[verdict_rules]: each part gets the random-effect interval of the worlds' mean gains beside its pooled one, and a
    configuration that collapsed (the last epoch's image cosine >= the threshold) in at least half its runs makes the
    claim "does not hold: training collapses", whatever its parts say."""
    study = tmp_path / "study"
    _write_worlds(study)
    cosines = {"new": (0.9999, 0.9998, 0.42, 0.9997), "new_w2": (0.9996, 0.55, 0.61, 0.58)}
    for configuration, values in cosines.items():
        for seed, value in enumerate(values):
            summary = {"collapse": {"last": {"collapse/image_cosine": value}}}
            (study / "runs" / configuration / f"seed_{seed}" / "summary.json").write_text(json.dumps(summary))
    path = tmp_path / "s.toml"
    path.write_text(BLOCKED_SPEC.format(out=study)
                    + "\n[verdict_rules]\ncollapse_threshold = 0.999\nrandom_effect = true\n")
    assert cli.main([f"--spec={path}", "--report_only", "--no-progress"]) == 0
    claim = json.loads((study / "report.json").read_text())["claims"][0]
    expected = statistics.random_effect_interval([WORLD_GAINS["new"], WORLD_GAINS["new_w2"]])
    random_effect = claim["parts"][0]["random_effect"]
    assert random_effect["n"] == 2 and random_effect["mean"] == pytest.approx(expected.mean)
    assert random_effect["low"] == pytest.approx(expected.low) and random_effect["high"] == pytest.approx(expected.high)
    # 4 of the 8 runs of new and new_w2 collapsed: half, the rule's share
    collapse = claim["collapse"]
    assert (collapse["collapsed"], collapse["runs"], collapse["applies"]) == (4, 8, True)
    assert claim["verdict"] == "does not hold: training collapses" and "4 of 8 runs" in claim["reason"]
    markdown = (study / "report.md").read_text()
    assert "With the world as a random effect" in markdown and "the claim does not hold: training collapses" in markdown
    # three collapsed of eight is under the share: the parts decide again
    (study / "runs" / "new" / "seed_3" / "summary.json").write_text(
        json.dumps({"collapse": {"last": {"collapse/image_cosine": 0.5}}}))
    assert cli.main([f"--spec={path}", "--report_only", "--no-progress"]) == 0
    claim = json.loads((study / "report.json").read_text())["claims"][0]
    assert claim["verdict"] == "holds" and not claim["collapse"]["applies"]


def _recall_zeros():
    return {**{f"i2t_R@{k}": np.zeros(5) for k in (1, 5, 10)}, **{f"t2i_R@{k}": np.zeros(5) for k in (1, 5, 10)}}


@pytest.mark.parametrize("edit, key, message", [
    (lambda s: s.replace('label = "world 2"', 'label = "world 0"'), "claim[0].blocks[0].label", "names another"),
    (lambda s: s.replace('configuration = "new_w2"', 'configuration = "nope"'),
     "claim[0].blocks[0].configuration", "is not a configuration"),
    (lambda s: s.replace('baseline = "base_w2"', 'baseline = "new_w2"'), "claim[0].blocks[0].baseline",
     "with itself"),
])
def test_claim_blocks_are_checked(tmp_path, edit, key, message):
    path = tmp_path / "s.toml"
    path.write_text(edit(BLOCKED_SPEC.format(out=tmp_path / "study")))
    with pytest.raises(SpecError) as error:
        load_spec(path)
    assert str(error.value).startswith(f"{path}: {key}: ") and message in str(error.value)


def test_a_block_whose_runs_were_scored_on_different_test_data_is_left_out_and_named(tmp_path):
    """World 2's baseline scored on world 0's records (a wrong --data_dir): its seeds index other queries, so the
    block is left out of the pooled interval (world 0 alone) and of the worlds' own verdicts, and a warning names
    the block and both configurations."""
    study = tmp_path / "study"
    _write_worlds(study, data={"base": "w0", "new": "w0", "base_w2": "w0", "new_w2": "w2"})
    path = tmp_path / "s.toml"
    path.write_text(BLOCKED_SPEC.format(out=study))
    assert cli.main([f"--spec={path}", "--report_only", "--no-progress"]) == 0
    report = json.loads((study / "report.json").read_text())
    claim = report["claims"][0]
    expected = statistics.t_interval(WORLD_GAINS["new"])
    improvement = claim["parts"][0]["comparison"]["improvement"]
    assert improvement["n"] == 4 and improvement["mean"] == pytest.approx(expected.mean)
    assert claim["parts"][0]["comparison"]["seeds"] == ["world 0/0", "world 0/1", "world 0/2", "world 0/3"]
    assert [b["label"] for b in claim["per_block"]] == ["world 0"] and claim["block_note"] == ""
    assert any(w == "claim 'new improves NCS in every world': block 'world 2' compares new_w2 with base_w2, whose "
                    "runs were scored on different test data: left out of the claim's figures and verdict"
               for w in report["warnings"]), report["warnings"]

"""Per-query bootstrap of a paired difference within runs: how much of a study's uncertainty is the test split.

The seed-level t interval of :mod:`kitm.study.statistics` varies the training (seeds) with the test items fixed.
This module varies the test items with the trained models fixed: each run's evaluation leaves
``<eval json stem>.per_query.npz`` beside its eval JSON (``study_eval.per_query.npz``), where
``np.load(path)[metric]`` is the metric's value for every query in kitm.eval's order (image q for ``i2t_``,
caption q for ``t2i_``; CS's t2i queries are one caption per image) and its nanmean is the figure in the JSON. Figures that are not means over queries (medr, meanr, rsum, the
neighbourhood preservation NP_*) are not in it. After the evaluation the study compacts the file in place
(:mod:`kitm.study.per_query_files`: only the arrays a bootstrap uses, two-level ones as bits, the others as
float32); :func:`load_per_query` reads both formats.

**Paired bootstrap** (:func:`paired_bootstrap`). For B = 2,000 resamples, draw Q query indices with replacement
(Q = the number of queries) from a fixed-seed generator and compute, for every seed s,
``diff*_s = nanmean(candidate_s[idx]) - nanmean(baseline_s[idx])``: the same indices for the candidate and the
baseline (paired: both models answered the same queries) and for every seed (the seeds were scored on the same
test items, so resampling the test split picks the same items for all of them). Reported per seed: the observed
difference of nanmeans and the 95% percentile interval (2.5th and 97.5th percentiles of diff*_s); pooled: the
mean over seeds ``mean_s diff*_s`` with its percentile interval and standard deviation, the standard error of the
pooled difference due to the test items alone, to set beside the seed-level standard error s / sqrt(n).

A figure that sums means over several query sets is resampled per set: ``rsum`` = i2t R@1 + R@5 + R@10 (image
queries) + t2i R@1 + R@5 + R@10 (caption queries), so one index matrix for the images, an independent one for the
captions, and ``rsum* = sum of the six resampled means`` (:func:`components`). NaN queries (e.g. a CS query whose
relevance is all tied) are left out of each mean, as in the figure itself. Vectorised: index blocks of
[resamples, queries] (each query set's own generator seeded by [:data:`BOOTSTRAP_SEED`, set number], drawn row by
row, so the indices do not depend on the block size), each block at most :data:`CHUNK_ELEMENTS` numbers.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
import warnings
from collections.abc import Mapping, Sequence

import numpy as np

from kitm.study.metrics import RSUM, lower_is_better, parse_metric
from kitm.study.per_query_files import read_per_query
from kitm.study.statistics import CONFIDENCE

RESAMPLES = 2000
BOOTSTRAP_SEED = 20  # fixed: the same report from the same runs
CHUNK_ELEMENTS = 4_000_000  # at most this many float64 per gathered [resamples, queries] block (32 MB)
PER_QUERY_SUFFIX = ".per_query.npz"
RSUM_COMPONENTS = tuple(f"{d}_R@{k}" for d in ("i2t", "t2i") for k in (1, 5, 10))


def per_query_path(eval_json: str | pathlib.Path) -> pathlib.Path:
    """``<dir>/<stem>.per_query.npz`` beside an eval JSON ``<dir>/<stem>.json``."""
    eval_json = pathlib.Path(eval_json)
    return eval_json.with_name(eval_json.stem + PER_QUERY_SUFFIX)


def components(metric: str) -> dict[str, str]:
    """{per-query metric: query set} whose nanmeans sum to `metric`: rsum -> the six R@K (query sets "i2t": the
    images, "t2i": the captions); a directional metric -> itself on its direction's queries (named by the
    direction: the array's own entries, whatever they are); anything else -> itself on its own set. Arrays of one
    query set are resampled with the same indices and must have the same length."""
    if metric == RSUM:
        return {name: name.split("_", 1)[0] for name in RSUM_COMPONENTS}
    direction = parse_metric(metric)[0]
    return {metric: direction if direction is not None else metric}


def claim_arrays(spec) -> set[str]:
    """The per-query arrays the bootstraps of `spec`'s claims can read: the components of each claim's parts, views
    and truth-control metrics, and of each dose-response block's metrics."""
    metrics = [m for claim in spec.claims for m in (*claim.improves, *claim.keeps, *claim.views,
                                                     *claim.truth_control_metrics)]
    metrics += [m for block in spec.dose_responses for m in block.metrics]
    return {name for metric in metrics for name in components(metric)}


@dataclasses.dataclass(frozen=True)
class QueryBootstrap:
    """The per-query bootstrap of one claim part (module docstring); differences turned so that positive is better.

    ``seeds``: the paired seeds with per-query data; ``observed``/``low``/``high``: per seed; ``pooled``: the mean
    over seeds of the observed differences, ``pooled_low``/``pooled_high`` its percentile interval and
    ``pooled_se`` the bootstrap standard deviation of the pooled difference (its standard error over test items).
    """

    seeds: tuple[int, ...]
    queries: Mapping[str, int]  # query set -> number of queries
    observed: tuple[float, ...]
    low: tuple[float, ...]
    high: tuple[float, ...]
    pooled: float
    pooled_low: float
    pooled_high: float
    pooled_se: float
    resamples: int = RESAMPLES
    rng_seed: int = BOOTSTRAP_SEED
    confidence: float = CONFIDENCE

    def as_dict(self) -> dict[str, object]:
        return {"seeds": list(self.seeds), "queries": dict(self.queries),
                "per_seed": [{"seed": s, "difference": d, "low": lo, "high": hi}
                             for s, d, lo, hi in zip(self.seeds, self.observed, self.low, self.high)],
                "pooled": {"difference": self.pooled, "low": self.pooled_low, "high": self.pooled_high,
                           "se": self.pooled_se},
                "resamples": self.resamples, "rng_seed": self.rng_seed, "confidence": self.confidence}


def _resampled_nanmeans(values: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """nanmean of ``values[indices[b]]`` for every row b of an index block [rows, Q]."""
    block = values[indices]
    if not np.isnan(values).any():
        return block.mean(axis=1)
    with warnings.catch_warnings():  # a resample of nothing but NaN queries: NaN, as the figure would be
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(block, axis=1)


def _nanmean(values: np.ndarray) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(np.nanmean(values))


def paired_bootstrap(candidate: Sequence[Mapping[str, np.ndarray]], baseline: Sequence[Mapping[str, np.ndarray]],
                     metric: str, *, seeds: Sequence[int] | None = None, resamples: int = RESAMPLES,
                     rng_seed: int = BOOTSTRAP_SEED, confidence: float = CONFIDENCE) -> QueryBootstrap:
    """Paired per-query bootstrap of `metric` (module docstring) over paired runs: ``candidate[i]`` and
    ``baseline[i]`` are the per-query arrays {name: values} of the i-th seed's two runs (the names of
    :func:`components` of `metric`). Raises ValueError when the runs' query counts differ."""
    if len(candidate) != len(baseline) or not candidate:
        raise ValueError(f"need the same positive number of candidate and baseline runs; got {len(candidate)} and "
                         f"{len(baseline)}.")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1; got {resamples}.")
    seeds = tuple(range(len(candidate))) if seeds is None else tuple(seeds)
    parts = components(metric)
    sizes: dict[str, int] = {}
    for name, query_set in parts.items():
        for run in (*candidate, *baseline):
            size = int(np.asarray(run[name]).reshape(-1).size)
            if sizes.setdefault(query_set, size) != size:
                raise ValueError(f"{metric}: the runs' per-query arrays for {name} have {size} and "
                                 f"{sizes[query_set]} queries; a paired bootstrap needs the same test queries.")
    if any(size == 0 for size in sizes.values()):
        raise ValueError(f"{metric}: no queries in the per-query data.")
    # One generator per query set, drawn block by block: the index matrix [resamples, Q] of a query set is the
    # same whatever the block size (rows are drawn in order), and never held whole in memory.
    generators = {query_set: np.random.default_rng([rng_seed, i]) for i, query_set in enumerate(sorted(sizes))}
    rows = max(1, CHUNK_ELEMENTS // max(sizes.values()))
    arrays = []  # per seed: [(values, query set)], a paired difference where neither side has NaN
    observed = np.zeros(len(candidate), dtype=np.float64)
    for i, (run, reference) in enumerate(zip(candidate, baseline)):
        terms = []
        for name, query_set in parts.items():
            a = np.asarray(run[name], dtype=np.float64).reshape(-1)
            b = np.asarray(reference[name], dtype=np.float64).reshape(-1)
            if not (np.isnan(a).any() or np.isnan(b).any()):  # mean(a[idx]) - mean(b[idx]) = mean((a - b)[idx])
                terms.append((a - b, None, query_set))
                observed[i] += float((a - b).mean())
            else:
                terms.append((a, b, query_set))
                observed[i] += _nanmean(a) - _nanmean(b)
        arrays.append(terms)
    replicates = np.zeros((len(candidate), resamples), dtype=np.float64)
    for start in range(0, resamples, rows):
        stop = min(resamples, start + rows)
        block = {query_set: generators[query_set].integers(0, size, size=(stop - start, size))
                 for query_set, size in sorted(sizes.items())}
        for i, terms in enumerate(arrays):
            for a, b, query_set in terms:
                replicates[i, start:stop] += _resampled_nanmeans(a, block[query_set])
                if b is not None:
                    replicates[i, start:stop] -= _resampled_nanmeans(b, block[query_set])
    sign = -1.0 if lower_is_better(metric) else 1.0
    replicates *= sign
    observed *= sign
    tail = 100.0 * (1.0 - confidence) / 2.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        low, high = np.nanpercentile(replicates, [tail, 100.0 - tail], axis=1)
        pooled = replicates.mean(axis=0)
        pooled_low, pooled_high = np.nanpercentile(pooled, [tail, 100.0 - tail])
        pooled_se = float(np.nanstd(pooled, ddof=1)) if resamples > 1 else math.nan
    return QueryBootstrap(seeds=seeds, queries=dict(sorted(sizes.items())), observed=tuple(map(float, observed)),
                          low=tuple(map(float, low)), high=tuple(map(float, high)), pooled=float(observed.mean()),
                          pooled_low=float(pooled_low), pooled_high=float(pooled_high), pooled_se=pooled_se,
                          resamples=resamples, rng_seed=rng_seed, confidence=confidence)


def load_per_query(path: pathlib.Path) -> dict[str, np.ndarray] | None:
    """The float64 arrays of a run's per-query file, kitm.eval's full format or the study's compact one
    (:mod:`kitm.study.per_query_files`), or None when it does not exist (runs scored before it existed)."""
    if not path.is_file():
        return None
    return read_per_query(path)

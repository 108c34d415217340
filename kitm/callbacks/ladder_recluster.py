"""Ladder re-clustering: every q batches, re-derive the fixed ladder's thresholds from recent relevance values.

The fixed-threshold ladder loss (Zhou et al.; `kitm.losses.LadderLoss`) splits each query's negatives into
levels by thresholds theta_1 > theta_2 > ... on the relevance. The adaptive ladder of the paper
clusters every query's relevance row on every step (Eqs. 9-12). This callback sits in between: the
loss keeps a uniform random sample of the negatives' relevance values it sees, and every q batches the
callback clusters that sample once, as one [1, n] row, with the 1-D k-means plus silhouette of
`kitm.ops.auto_kmeans_1d` (k in [k_min, k_max], k_max <= L, the loss's number of levels), and sets

    theta_l = (mu_l + mu_{l+1}) / 2,   l = 1 .. k - 1         (mu_1 > mu_2 > ... the cluster means)

the nearest-centre boundary between adjacent clusters, so the ladder's `>=` rule puts every sampled
value in its own cluster's level (a value exactly halfway between two centres aside). When the
silhouette picks k < L, the unused thresholds are -inf and levels k+1..L stay empty; the ladder loss
skips hinges over empty sets. A sample with fewer than 2 distinct values leaves the thresholds as they are.

The sample (`RelevanceSample`) is bottom-k sampling: every offered value gets an i.i.d. uniform key and
the n values with the smallest keys are kept, which is a uniform sample without replacement of
everything offered since the last reset, with O(n) memory and one `top_k` per step. Under a
distribution strategy each replica samples its own values (ON_READ variables, no cross-replica
traffic in the step) and the callback merges the replicas' samples by the same smallest-keys rule,
which is again a uniform sample of the union.

`kitm.losses.ReclusterableLadderLoss` is `LadderLoss` with its thresholds in a non-trainable variable
(`threshold_variable`) and such a sample; the callback drives any loss that exposes both.

Logged into the epoch logs (put the callback before `keras.callbacks.TensorBoard`), and with `log_dir`
as tf.summary scalars at every update: `<name>/theta_l`, `<name>/level_l_count` (sampled values per
level), `<name>/clusters` (k), `<name>/silhouette`, `<name>/sampled` (n) and `<name>/offered` (values
offered since the previous update); `<name>` is the loss's key in `DualEncoder.compile(losses=...)`.
"""

from __future__ import annotations

import math

import numpy as np

from kitm.callbacks.every_q_batches import EveryQBatchesCallback, to_numpy
from kitm.distribute.replica_local import is_variable
from kitm.losses.reclusterable_ladder import (ReclusterableLadderLoss, RelevanceSample, thresholds_from_clusters)
from kitm.ops.kmeans1d import DEFAULT_LLOYD_RUNS, auto_kmeans_1d

__all__ = ["LadderReclusterCallback"]


class LadderReclusterCallback(EveryQBatchesCallback):
    """Every `every_batches` training batches, cluster the loss's relevance sample and reset its thresholds.

    Args:
      loss: a loss with `threshold_variable` (float [L-1]) and `relevance_sample` (`RelevanceSample`),
        e.g. `kitm.losses.ReclusterableLadderLoss`; None finds the one in `model.loss_functions`.
      every_batches: q.
      k_min, k_max: the range of k for the silhouette (2 <= k_min <= k_max <= L; k_max defaults to L).
      lloyd_runs: passed to `auto_kmeans_1d` (Lloyd runs scored beside the exact k-means optimum; 0
        clusters with the exact optimum only).
      jit_compile: passed to `auto_kmeans_1d` (off by default: it runs once every q batches and the
        sample size can change, so XLA's per-shape compile would not pay).
      log_dir: optional directory for tf.summary scalars at each update; verbose: 1 prints each update.
    `updates` keeps every update's record.
    """

    loss_type = ReclusterableLadderLoss

    def __init__(self, loss=None, *, every_batches: int = 500, k_min: int = 2, k_max: int | None = None,
                 lloyd_runs: int = DEFAULT_LLOYD_RUNS, jit_compile: bool = False, log_dir: str | None = None,
                 verbose: int = 0):
        super().__init__(loss, every_batches=every_batches, log_dir=log_dir, verbose=verbose)
        if loss is not None:
            self.check_loss(loss)
        self.k_min = int(k_min)
        self.k_max = None if k_max is None else int(k_max)
        if self.k_min < 2 or (self.k_max is not None and self.k_max < self.k_min):
            raise ValueError(f"Need 2 <= k_min <= k_max; got k_min={k_min}, k_max={k_max}.")
        self.lloyd_runs = int(lloyd_runs)
        self.jit_compile = bool(jit_compile)

    def check_loss(self, loss) -> None:
        variable = getattr(loss, "threshold_variable", None)
        if not is_variable(variable) or not isinstance(getattr(loss, "relevance_sample", None), RelevanceSample):
            raise ValueError(f"LadderReclusterCallback needs a loss with a variable `threshold_variable` and a "
                             f"RelevanceSample `relevance_sample` (e.g. ReclusterableLadderLoss); got "
                             f"{type(loss).__name__}.")
        if hasattr(self, "k_min"):  # not when __init__ checks a given loss: the range is checked on train begin
            self._k_range()

    @property
    def num_levels(self) -> int:
        return int(self.loss.threshold_variable.shape[0]) + 1

    def _k_range(self) -> tuple[int, int]:
        levels = self.num_levels
        k_max = levels if self.k_max is None else self.k_max
        if k_max > levels or self.k_min > k_max:
            raise ValueError(f"k range [{self.k_min}, {k_max}] does not fit the loss's {levels} ladder levels "
                             f"(need 2 <= k_min <= k_max <= {levels}).")
        return self.k_min, k_max

    def recluster(self) -> dict:
        """Cluster the sample, assign the thresholds, reset the sample; returns the update's record."""
        loss = self.loss
        values = loss.relevance_sample.sample()
        offered = loss.relevance_sample.offered_count()
        k_min, k_max = self._k_range()
        record = {"step": self.counter.total, "sampled": int(values.size), "offered": offered}
        thresholds = to_numpy(loss.threshold_variable).astype(np.float64)
        counts = np.zeros(self.num_levels, np.int64)
        k, silhouette = 0, math.nan
        if np.unique(values).size >= 2:
            # auto_kmeans_1d needs k_max <= the row's length; a short sample narrows the range.
            k_top = min(k_max, values.size)
            labels, chosen, sil = auto_kmeans_1d(values[None, :], min(k_min, k_top), k_top,
                                                 lloyd_runs=self.lloyd_runs, jit_compile=self.jit_compile)
            labels = to_numpy(labels)[0]
            k, silhouette = int(to_numpy(chosen)[0]), float(to_numpy(sil)[0])
            thresholds = thresholds_from_clusters(values, labels, k, self.num_levels - 1)
            loss.threshold_variable.assign(thresholds.astype(np.float32))
            counts = np.bincount(labels, minlength=self.num_levels + 1)[1:self.num_levels + 1]
        record.update({"clusters": k, "silhouette": silhouette})
        record.update({f"theta_{l}": float(t) for l, t in enumerate(to_numpy(loss.threshold_variable), start=1)})
        record.update({f"level_{l}_count": int(c) for l, c in enumerate(counts, start=1)})
        loss.relevance_sample.reset()
        self.updates.append(record)
        self.write_scalars(record)
        if self.verbose:
            shown = ", ".join(f"{key}={value:.4g}" for key, value in record.items() if key.startswith("theta_"))
            print(f"{type(self).__name__}: step {record['step']}: k={k} silhouette={silhouette:.3f} {shown}")
        return record

    update = recluster

    # -- the window (EveryQBatchesCallback) --------------------------------------------------------
    def reset_window(self) -> None:
        self.loss.relevance_sample.reset()

    def window_state(self):
        return self.loss.relevance_sample.state()

    def restore_window(self, state) -> None:
        self.loss.relevance_sample.restore(state)

    def epoch_logs(self) -> dict[str, float]:
        logs = {f"theta_{l}": float(t) for l, t in enumerate(to_numpy(self.loss.threshold_variable), 1)}
        if self.updates:
            last = self.updates[-1]
            logs.update({key: float(value) for key, value in last.items()
                         if key.startswith("level_") or key in ("clusters", "silhouette", "sampled", "offered")})
        return logs

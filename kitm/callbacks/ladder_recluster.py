"""Ladder re-clustering: every q batches, re-derive the fixed ladder's thresholds from recent relevance values.

The fixed-threshold ladder loss (seed 001; `kitm.losses.LadderLoss`) splits each query's negatives into
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

`ReclusterableLadderLoss` is `LadderLoss` with its thresholds in a non-trainable variable
(`threshold_variable`) and such a sample; the callback drives any loss that exposes both.

Logged into the epoch logs (put the callback before `keras.callbacks.TensorBoard`), and with `log_dir`
as tf.summary scalars at every update: `<name>/theta_l`, `<name>/level_l_count` (sampled values per
level), `<name>/clusters` (k), `<name>/silhouette`, `<name>/sampled` (n) and `<name>/offered` (values
offered since the previous update); `<name>` is the loss's key in `DualEncoder.compile(losses=...)`.
"""

from __future__ import annotations

import math
from typing import Sequence

import keras
import numpy as np
import tensorflow as tf

from kitm.callbacks.adaptive_margin import BatchCounter, find_loss, log_name
from kitm.losses.adaptive_margin import assign_replica_local, replica_local_values
from kitm.losses.base import RetrievalLoss
from kitm.losses.ladder import LadderLoss
from kitm.ops.kmeans1d import DEFAULT_LLOYD_RUNS, auto_kmeans_1d
from kitm.ops.similarity import negative_mask

__all__ = ["RelevanceSample", "ReclusterableLadderLoss", "LadderReclusterCallback", "threshold_levels",
           "thresholds_from_clusters"]

DEFAULT_SAMPLE_SIZE = 4096


class RelevanceSample:
    """A uniform sample without replacement of at most `size` values among all values offered since the
    last reset (bottom-k sampling, module docstring). `update` runs inside the training step; the rest
    is eager, for callbacks.

    Args:
      size: n, the most values kept (per replica; the merged sample is also cut to n).
      seed: seed of the stateless random keys (each replica and step draws from its own stream).
    """

    def __init__(self, size: int = DEFAULT_SAMPLE_SIZE, seed: int = 0, name: str = "relevance_sample"):
        if isinstance(size, bool) or int(size) != size or int(size) < 2:
            raise ValueError(f"size must be an integer >= 2; got {size!r}.")
        self.size = int(size)
        self.seed = int(seed)

        def local(initial, dtype, label, aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA):
            return tf.Variable(tf.cast(initial, dtype), trainable=False, name=f"{name}_{label}",
                               synchronization=tf.VariableSynchronization.ON_READ, aggregation=aggregation)

        self.keys = local(tf.fill([self.size], np.inf), tf.float32, "keys")
        self.values = local(tf.zeros([self.size]), tf.float32, "values")
        self.offered = local(0, tf.int64, "offered", tf.VariableAggregation.SUM)
        self.draws = local(0, tf.int64, "draws")

    def update(self, values, mask=None) -> None:
        """Offer the entries of `values` where `mask` is True (all of them without a mask)."""
        values = tf.reshape(tf.cast(values, tf.float32), [-1])
        mask = tf.ones_like(values, tf.bool) if mask is None else tf.reshape(tf.convert_to_tensor(mask), [-1])
        context = tf.distribute.get_replica_context()
        if context is None:  # cross-replica context: a single writer
            replica, replicas = tf.constant(0, tf.int64), 1
        else:
            replica, replicas = tf.cast(context.replica_id_in_sync_group, tf.int64), context.num_replicas_in_sync
        counter = tf.cast(self.draws, tf.int64) * replicas + replica
        seed = tf.stack([tf.constant(self.seed, tf.int64), counter])
        keys = tf.random.stateless_uniform(tf.shape(values), seed=seed, dtype=tf.float32)
        keys = tf.where(mask, keys, tf.fill(tf.shape(keys), np.float32(np.inf)))
        all_keys = tf.concat([tf.convert_to_tensor(self.keys), keys], axis=0)
        all_values = tf.concat([tf.convert_to_tensor(self.values), values], axis=0)
        _, keep = tf.math.top_k(-all_keys, k=self.size, sorted=False)  # the n smallest keys
        self.keys.assign(tf.gather(all_keys, keep))
        self.values.assign(tf.gather(all_values, keep))
        self.offered.assign_add(tf.reduce_sum(tf.cast(mask, tf.int64)))
        self.draws.assign_add(1)

    def sample(self) -> np.ndarray:
        """The merged sample over replicas (float64, at most `size` values, in random order)."""
        keys = np.concatenate(replica_local_values(self.keys))
        values = np.concatenate(replica_local_values(self.values))
        kept = np.isfinite(keys)
        keys, values = keys[kept], values[kept]
        if keys.size > self.size:
            order = np.argsort(keys, kind="stable")[: self.size]
            keys, values = keys[order], values[order]
        return values.astype(np.float64)

    def offered_count(self) -> int:
        return int(np.sum(replica_local_values(self.offered)))

    def reset(self) -> None:
        assign_replica_local(self.keys, np.full(self.size, np.inf, np.float32))
        assign_replica_local(self.offered, np.int64(0))

    def state(self):
        return tuple(replica_local_values(v) for v in (self.keys, self.values, self.offered))

    def restore(self, state) -> None:
        for variable, values in zip((self.keys, self.values, self.offered), state):
            assign_replica_local(variable, list(values))


def threshold_levels(relevance, thresholds, *, image_index=None) -> tf.Tensor:
    """`kitm.losses.ladder_levels` with the thresholds as a tensor (e.g. a variable): int32 [B, B].

    `level[p, q] = 1 + #{l : relevance[p, q] < theta_l}` off the positives, 0 on them; a -inf threshold
    never counts, so the level it would open stays empty.
    """
    relevance = tf.convert_to_tensor(relevance)
    if relevance.shape.rank != 2:
        raise ValueError(f"relevance must be a [B, B] matrix; got shape {relevance.shape}.")
    if not relevance.dtype.is_floating:
        relevance = tf.cast(relevance, tf.float64)
    thresholds = tf.cast(tf.reshape(tf.convert_to_tensor(thresholds), [-1]), relevance.dtype)
    below = tf.cast(relevance[:, :, None] < thresholds[None, None, :], tf.int32)
    levels = 1 + tf.reduce_sum(below, axis=2)
    positive = tf.logical_not(negative_mask(relevance, image_index))
    return tf.where(positive, tf.zeros_like(levels), levels)


def thresholds_from_clusters(values: np.ndarray, labels: np.ndarray, k: int, num_thresholds: int) -> np.ndarray:
    """Midpoints between adjacent cluster means (label 1 = highest), padded with -inf to `num_thresholds`."""
    means = np.array([values[labels == level].mean() for level in range(1, k + 1)])
    thresholds = np.full(num_thresholds, -np.inf)
    thresholds[: k - 1] = (means[:-1] + means[1:]) / 2.0
    return thresholds


@keras.saving.register_keras_serializable(package="kitm")
class ReclusterableLadderLoss(LadderLoss):
    """`LadderLoss` whose thresholds live in `threshold_variable` (assigned by `LadderReclusterCallback`) and
    which offers its negatives' relevance values to `relevance_sample`.

    Arguments as `LadderLoss` (the thresholds given are the starting values), plus `sample_size` (n, the
    largest sample the callback clusters) and `seed` (of the sample's random keys). Create it inside
    `strategy.scope()`, like the model.
    """

    def __init__(self, thresholds: Sequence[float] = (0.40,), margins: Sequence[float] = (0.2, 0.01),
                 betas: Sequence[float] = (1.0, 0.25), cumulative: bool = False,
                 sample_size: int = DEFAULT_SAMPLE_SIZE, seed: int = 0, name: str = "ladder",
                 reduction: str = "sum", dtype=None, hardest_warmup_steps: int = 0, max_violation: bool = True):
        super().__init__(thresholds=thresholds, margins=margins, betas=betas, cumulative=cumulative, name=name,
                         reduction=reduction, dtype=dtype, hardest_warmup_steps=hardest_warmup_steps,
                         max_violation=max_violation)
        if not self.thresholds:
            raise ValueError("ReclusterableLadderLoss needs at least one threshold (two ladder levels).")
        self.threshold_variable = tf.Variable(np.asarray(self.thresholds, np.float32), trainable=False,
                                              name=f"{name}_thresholds")
        self.relevance_sample = RelevanceSample(sample_size, seed, name=f"{name}_relevance_sample")

    def levels(self, y_true) -> tf.Tensor:
        relevance = RetrievalLoss.optional(y_true, "relevance")
        if relevance is None:
            raise ValueError(f"{type(self).__name__} needs y_true['relevance'] ([B, B], relevance of caption q to "
                             "image p).")
        relevance = tf.convert_to_tensor(relevance)
        if relevance.shape.rank != 2:
            raise ValueError(f"y_true['relevance'] must be [B, B]; got shape {relevance.shape}.")
        image_index = self.optional(y_true, "image_index")
        self.relevance_sample.update(relevance, negative_mask(relevance, image_index))
        return threshold_levels(relevance, self.threshold_variable, image_index=image_index)

    def get_config(self):
        config = super().get_config()
        config.update(sample_size=self.relevance_sample.size, seed=self.relevance_sample.seed)
        return config


class LadderReclusterCallback(keras.callbacks.Callback):
    """Every `every_batches` training batches, cluster the loss's relevance sample and reset its thresholds.

    Args:
      loss: a loss with `threshold_variable` (float [L-1]) and `relevance_sample` (`RelevanceSample`),
        e.g. `ReclusterableLadderLoss`; None finds the one in `model.loss_functions`.
      every_batches: q.
      k_min, k_max: the range of k for the silhouette (2 <= k_min <= k_max <= L; k_max defaults to L).
      lloyd_runs: passed to `auto_kmeans_1d` (Lloyd runs scored beside the exact k-means optimum; 0
        clusters with the exact optimum only).
      jit_compile: passed to `auto_kmeans_1d` (off by default: it runs once every q batches and the
        sample size can change, so XLA's per-shape compile would not pay).
      log_dir: optional directory for tf.summary scalars at each update; verbose: 1 prints each update.
    `updates` keeps every update's record.
    """

    def __init__(self, loss=None, *, every_batches: int = 500, k_min: int = 2, k_max: int | None = None,
                 lloyd_runs: int = DEFAULT_LLOYD_RUNS, jit_compile: bool = False, log_dir: str | None = None,
                 verbose: int = 0):
        super().__init__()
        self.loss = loss
        if loss is not None:
            self._check_loss(loss)
        if isinstance(every_batches, bool) or int(every_batches) != every_batches or int(every_batches) < 1:
            raise ValueError(f"every_batches must be a positive integer; got {every_batches!r}.")
        self.every_batches = int(every_batches)
        self.k_min = int(k_min)
        self.k_max = None if k_max is None else int(k_max)
        if self.k_min < 2 or (self.k_max is not None and self.k_max < self.k_min):
            raise ValueError(f"Need 2 <= k_min <= k_max; got k_min={k_min}, k_max={k_max}.")
        self.lloyd_runs = int(lloyd_runs)
        self.jit_compile = bool(jit_compile)
        self.log_dir = log_dir
        self.verbose = int(verbose)
        self.counter = BatchCounter()
        self.updates: list[dict] = []
        self._writer = None
        self._saved_sample = None

    @staticmethod
    def _check_loss(loss) -> None:
        variable = getattr(loss, "threshold_variable", None)
        if not isinstance(variable, tf.Variable) or not isinstance(getattr(loss, "relevance_sample", None),
                                                                    RelevanceSample):
            raise ValueError(f"LadderReclusterCallback needs a loss with a tf.Variable `threshold_variable` and a "
                             f"RelevanceSample `relevance_sample` (e.g. ReclusterableLadderLoss); got "
                             f"{type(loss).__name__}.")

    def _resolve(self):
        self.loss = find_loss(self.model, self.loss, ReclusterableLadderLoss, type(self).__name__)
        self._check_loss(self.loss)
        return self.loss

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
        thresholds = loss.threshold_variable.numpy().astype(np.float64)
        counts = np.zeros(self.num_levels, np.int64)
        k, silhouette = 0, math.nan
        if np.unique(values).size >= 2:
            # auto_kmeans_1d needs k_max <= the row's length; a short sample narrows the range.
            k_top = min(k_max, values.size)
            labels, chosen, sil = auto_kmeans_1d(values[None, :], min(k_min, k_top), k_top,
                                                 lloyd_runs=self.lloyd_runs, jit_compile=self.jit_compile)
            labels = labels.numpy()[0]
            k, silhouette = int(chosen.numpy()[0]), float(sil.numpy()[0])
            thresholds = thresholds_from_clusters(values, labels, k, self.num_levels - 1)
            loss.threshold_variable.assign(thresholds.astype(np.float32))
            counts = np.bincount(labels, minlength=self.num_levels + 1)[1:self.num_levels + 1]
        record.update({"clusters": k, "silhouette": silhouette})
        record.update({f"theta_{l}": float(t) for l, t in enumerate(loss.threshold_variable.numpy(), start=1)})
        record.update({f"level_{l}_count": int(c) for l, c in enumerate(counts, start=1)})
        loss.relevance_sample.reset()
        self.updates.append(record)
        if self._writer is not None:
            with self._writer.as_default(step=record["step"]):
                for key, value in record.items():
                    if key != "step" and math.isfinite(value):
                        tf.summary.scalar(f"{log_name(self.model, loss)}/{key}", value)
            self._writer.flush()
        if self.verbose:
            shown = ", ".join(f"{key}={value:.4g}" for key, value in record.items() if key.startswith("theta_"))
            print(f"{type(self).__name__}: step {record['step']}: k={k} silhouette={silhouette:.3f} {shown}")
        return record

    # -- Keras hooks -----------------------------------------------------------------------------
    def on_train_begin(self, logs=None):
        loss = self._resolve()
        self._k_range()
        if self.log_dir and self._writer is None:
            self._writer = tf.summary.create_file_writer(self.log_dir)
        loss.relevance_sample.reset()
        self.counter.since_update = 0

    def on_epoch_begin(self, epoch, logs=None):
        self.counter.epoch_begin()

    def on_train_batch_end(self, batch, logs=None):
        self.counter.batch_end(batch)
        if self.counter.since_update >= self.every_batches:
            self.recluster()
            self.counter.since_update = 0

    def on_test_begin(self, logs=None):
        if self.loss is not None:
            self._saved_sample = self.loss.relevance_sample.state()

    def on_test_end(self, logs=None):
        if self.loss is not None and self._saved_sample is not None:
            self.loss.relevance_sample.restore(self._saved_sample)
            self._saved_sample = None

    def on_epoch_end(self, epoch, logs=None):
        if logs is None or self.loss is None:
            return
        name = log_name(self.model, self.loss)
        logs.update({f"{name}/theta_{l}": float(t) for l, t in enumerate(self.loss.threshold_variable.numpy(), 1)})
        if self.updates:
            last = self.updates[-1]
            logs.update({f"{name}/{key}": float(value) for key, value in last.items()
                         if key.startswith("level_") or key in ("clusters", "silhouette", "sampled", "offered")})

    def on_train_end(self, logs=None):
        if self._writer is not None:
            self._writer.close()
            self._writer = None

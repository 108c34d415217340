"""`ReclusterableLadderLoss`: the fixed-threshold ladder loss whose thresholds a callback re-derives every q batches.

`LadderLoss` (Zhou et al.'s fixed ladder) with its thresholds in a non-trainable variable (`threshold_variable`), and a
uniform random sample of the relevance values of the negatives it sees (`relevance_sample`), which
`kitm.callbacks.LadderReclusterCallback` clusters every q batches to set new thresholds
(`thresholds_from_clusters`: midpoints between adjacent cluster means). The callback's module docstring gives the
whole scheme.

The sample (`RelevanceSample`) is bottom-k sampling: every offered value gets an i.i.d. uniform key and the n values
with the smallest keys are kept, which is a uniform sample without replacement of everything offered since the last
reset, with O(n) memory and one `top_k` per step. Under a distribution strategy each replica samples its own values
(ON_READ variables, no cross-replica traffic in the step) and the merged sample keeps the smallest keys of the
union, which is again a uniform sample of the union. Off TensorFlow (JAX, PyTorch) the variables are Keras
variables with one copy (the loss sees the global batch) and the keys come from `keras.random` with a seed generator;
inside a compiled JAX step the sample advances only where the trainer threads the loss's state through the step
(`non_trainable_variables`).
"""

from __future__ import annotations

from typing import Sequence

import keras
import numpy as np
from keras import ops

from kitm.distribute.backend import on_tensorflow
from kitm.distribute.random_draws import replica_stream_uniform
from kitm.distribute.replica_local import (assign_replica_local, per_replica_variable, replica_local_values,
                                           state_variable)
from kitm.losses.base import RetrievalLoss
from kitm.losses.ladder import LadderLoss, threshold_levels
from kitm.ops.similarity import negative_mask

__all__ = ["RelevanceSample", "ReclusterableLadderLoss", "threshold_levels", "thresholds_from_clusters",
           "DEFAULT_SAMPLE_SIZE"]

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
        self.keys = per_replica_variable(np.full(self.size, np.inf, np.float32), f"{name}_keys", "first_replica")
        self.values = per_replica_variable(np.zeros(self.size, np.float32), f"{name}_values", "first_replica")
        self.offered = per_replica_variable(np.int64(0), f"{name}_offered", "sum")
        self.draws = per_replica_variable(np.int64(0), f"{name}_draws", "first_replica")
        # Off TensorFlow the keys come from a seed generator (`kitm.distribute.random_draws.replica_stream_uniform`).
        self.seed_generator = None if on_tensorflow() else keras.random.SeedGenerator(self.seed)

    @property
    def variables(self) -> list:
        """The sample's state (keys, values, counters; the seed generator's state off TensorFlow)."""
        state = [self.keys, self.values, self.offered, self.draws]
        return state + ([self.seed_generator.state] if self.seed_generator is not None else [])

    def _keys(self, shape):
        """i.i.d. uniform keys: on TensorFlow from the stateless stream of (seed, draw x replicas + replica), as
        kitm always drew them; elsewhere from the seed generator."""
        return replica_stream_uniform(shape, self.seed, self.draws, self.seed_generator)

    def update(self, values, mask=None) -> None:
        """Offer the entries of `values` where `mask` is True (all of them without a mask)."""
        values = ops.reshape(ops.cast(values, "float32"), (-1,))
        mask = ops.ones_like(values, dtype="bool") if mask is None else ops.reshape(ops.convert_to_tensor(mask), (-1,))
        keys = ops.where(mask, self._keys(ops.shape(values)), ops.full_like(values, np.inf))
        all_keys = ops.concatenate([ops.convert_to_tensor(self.keys), keys], axis=0)
        all_values = ops.concatenate([ops.convert_to_tensor(self.values), values], axis=0)
        _, keep = ops.top_k(-all_keys, k=self.size, sorted=False)  # the n smallest keys
        self.keys.assign(ops.take(all_keys, keep, axis=0))
        self.values.assign(ops.take(all_values, keep, axis=0))
        self.offered.assign_add(ops.sum(ops.cast(mask, self.offered.dtype)))
        self.draws.assign_add(ops.ones((), self.draws.dtype))

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
        self.threshold_variable = state_variable(np.asarray(self.thresholds, np.float32), f"{name}_thresholds")
        self.relevance_sample = RelevanceSample(sample_size, seed, name=f"{name}_relevance_sample")

    @property
    def non_trainable_variables(self) -> list:
        """The state a compiled step must carry: the thresholds and the relevance sample."""
        return [self.threshold_variable, *self.relevance_sample.variables]

    def levels(self, y_true):
        relevance = RetrievalLoss.optional(y_true, "relevance")
        if relevance is None:
            raise ValueError(f"{type(self).__name__} needs y_true['relevance'] ([B, B], relevance of caption q to "
                             "image p).")
        relevance = ops.convert_to_tensor(relevance)
        if len(relevance.shape) != 2:
            raise ValueError(f"y_true['relevance'] must be [B, B]; got shape {tuple(relevance.shape)}.")
        image_index = self.optional(y_true, "image_index")
        self.relevance_sample.update(relevance, negative_mask(relevance, image_index))
        return threshold_levels(relevance, self.threshold_variable, image_index=image_index)

    def get_config(self):
        config = super().get_config()
        config.update(sample_size=self.relevance_sample.size, seed=self.relevance_sample.seed)
        return config

"""Adaptive hinge margins of seed 003 (Malali & Keller, Sec. 3.5, Eqs. 11-13), as a Keras callback.

Every q training batches, for each direction (m_x: image anchors, m_y: caption anchors):

    M = satisfied / used        (negatives used in those q batches whose hinge D+ - D- + m is <= 0)
    m <- min(c * m, max_margin)  if M > r,   else m unchanged                               (Eq. 13)

Defaults q = 500, r = 0.8, c = 1.03 (Sec. 4.1); the cap is kitm's (METHODS.md), default 1.0, the usual
margin for L2-normalised embeddings (Sec. 3.5). The counts come from the loss
(`kitm.losses.AdaptiveMarginTripletLoss`), which accumulates them in per-replica variables on every
training step; the callback only reads, decides, assigns and resets. A validation run inside `fit`
also evaluates the loss, so the counters are saved at `on_test_begin` and restored at `on_test_end`:
only training batches count.

Logged: the margins and the last window's shares go into the epoch logs as `<name>/margin_x`,
`/margin_y`, `/share_x`, `/share_y` (put this callback before `keras.callbacks.TensorBoard` so that
TensorBoard writes them), and with `log_dir` every update is also written as tf.summary scalars at its
training step. `<name>` is the loss's key in `DualEncoder.compile(losses=...)` (else `loss.name`), as
for its terms. `updates` keeps every decision (step, shares, margins) in memory.
"""

from __future__ import annotations

import math

import keras
import tensorflow as tf

from kitm.losses.adaptive_margin import AdaptiveMarginTripletLoss

__all__ = ["AdaptiveMarginCallback", "find_loss", "log_name", "BatchCounter"]


def find_loss(model, loss, kind, callback_name: str):
    """`loss` if given, else the single loss of type `kind` among a DualEncoder's `loss_functions`."""
    if loss is not None:
        return loss
    candidates = [l for l in getattr(model, "loss_functions", {}).values() if isinstance(l, kind)]
    if len(candidates) != 1:
        raise ValueError(f"{callback_name} needs a {kind.__name__}: pass loss=... or compile the model with exactly "
                         f"one (found {len(candidates)} among {list(getattr(model, 'loss_functions', {}))}).")
    return candidates[0]


def log_name(model, loss) -> str:
    """The name the model logs the loss's terms under (its `compile(losses=...)` key), else `loss.name`."""
    for name, candidate in getattr(model, "loss_functions", {}).items():
        if candidate is loss:
            return name
    return loss.name


class BatchCounter:
    """Counts training steps from `on_train_batch_end(batch)` indices, so that `steps_per_execution > 1`
    (one callback call per several steps) still counts every step."""

    def __init__(self):
        self.total = 0
        self.since_update = 0
        self._last = -1

    def epoch_begin(self) -> None:
        self._last = -1

    def batch_end(self, batch: int) -> int:
        steps = max(int(batch) - self._last, 1)
        self._last = int(batch)
        self.total += steps
        self.since_update += steps
        return steps


def _positive_int(name, value) -> int:
    if isinstance(value, bool) or int(value) != value or int(value) < 1:
        raise ValueError(f"{name} must be a positive integer; got {value!r}.")
    return int(value)


class AdaptiveMarginCallback(keras.callbacks.Callback):
    """Eq. 13 every `every_batches` training batches on an `AdaptiveMarginTripletLoss` (module docstring).

    Args:
      loss: the `AdaptiveMarginTripletLoss` to drive; None finds the one in `model.loss_functions`.
      every_batches: q (paper: 500).
      share_threshold: r (paper: 0.8); a margin grows when its share of satisfied negatives exceeds r.
      multiplier: c > 1 (paper: 1.03).
      max_margin: cap on both margins (kitm; default 1.0).
      log_dir: optional directory for tf.summary scalars at each update.
      verbose: 1 prints each update.
    """

    def __init__(self, loss: AdaptiveMarginTripletLoss | None = None, *, every_batches: int = 500,
                 share_threshold: float = 0.8, multiplier: float = 1.03, max_margin: float = 1.0,
                 log_dir: str | None = None, verbose: int = 0):
        super().__init__()
        if loss is not None and not isinstance(loss, AdaptiveMarginTripletLoss):
            raise ValueError(f"loss must be an AdaptiveMarginTripletLoss; got {type(loss).__name__}.")
        self.loss = loss
        self.every_batches = _positive_int("every_batches", every_batches)
        self.share_threshold = float(share_threshold)
        if not 0.0 <= self.share_threshold <= 1.0:
            raise ValueError(f"share_threshold must be in [0, 1]; got {share_threshold}.")
        self.multiplier = float(multiplier)
        if not self.multiplier > 1.0:
            raise ValueError(f"multiplier must be > 1; got {multiplier}.")
        self.max_margin = float(max_margin)
        if not self.max_margin > 0:
            raise ValueError(f"max_margin must be > 0; got {max_margin}.")
        self.log_dir = log_dir
        self.verbose = int(verbose)
        self.counter = BatchCounter()
        self.updates: list[dict] = []
        self.last_shares = {"x": math.nan, "y": math.nan}
        self._writer = None
        self._saved_statistics = None

    # -- helpers ---------------------------------------------------------------------------------
    def _resolve(self) -> AdaptiveMarginTripletLoss:
        self.loss = find_loss(self.model, self.loss, AdaptiveMarginTripletLoss, type(self).__name__)
        return self.loss

    def margins(self) -> dict[str, float]:
        return {"x": float(self.loss.margin_x.numpy()), "y": float(self.loss.margin_y.numpy())}

    @staticmethod
    def _share(satisfied: int, used: int) -> float:
        return satisfied / used if used else math.nan

    def update_margins(self) -> dict:
        """Apply Eq. 13 to the counts accumulated since the last update, then reset them."""
        loss = self.loss
        counts = loss.statistics()
        margins = self.margins()
        record = {"step": self.counter.total}
        for axis, variable in (("x", loss.margin_x), ("y", loss.margin_y)):
            share = self._share(counts[f"satisfied_{axis}"], counts[f"used_{axis}"])
            margin = margins[axis]
            # No negative used in the window: nothing to judge, the margin stays.
            if not math.isnan(share) and share > self.share_threshold:
                margin = min(self.multiplier * margin, self.max_margin)
                variable.assign(margin)
            if not math.isnan(share):
                self.last_shares[axis] = share
            record.update({f"share_{axis}": share, f"margin_{axis}": float(variable.numpy()),
                           f"satisfied_{axis}": counts[f"satisfied_{axis}"], f"used_{axis}": counts[f"used_{axis}"]})
        loss.reset_statistics()
        self.updates.append(record)
        if self._writer is not None:
            with self._writer.as_default(step=record["step"]):
                for key in ("share_x", "share_y", "margin_x", "margin_y"):
                    if not math.isnan(record[key]):
                        tf.summary.scalar(f"{log_name(self.model, loss)}/{key}", record[key])
            self._writer.flush()
        if self.verbose:
            print(f"{type(self).__name__}: step {record['step']}: M_x={record['share_x']:.3f} "
                  f"M_y={record['share_y']:.3f} -> m_x={record['margin_x']:.4f} m_y={record['margin_y']:.4f}")
        return record

    # -- Keras hooks -----------------------------------------------------------------------------
    def on_train_begin(self, logs=None):
        loss = self._resolve()
        for axis, margin in self.margins().items():
            if margin > self.max_margin:
                raise ValueError(f"margin_{axis} = {margin} of {loss.name} is above max_margin = {self.max_margin}.")
        if self.log_dir and self._writer is None:
            self._writer = tf.summary.create_file_writer(self.log_dir)
        loss.reset_statistics()
        self.counter.since_update = 0

    def on_epoch_begin(self, epoch, logs=None):
        self.counter.epoch_begin()

    def on_train_batch_end(self, batch, logs=None):
        self.counter.batch_end(batch)
        if self.counter.since_update >= self.every_batches:
            self.update_margins()
            self.counter.since_update = 0

    def on_test_begin(self, logs=None):
        if self.loss is not None:
            self._saved_statistics = self.loss.statistics_state()

    def on_test_end(self, logs=None):
        if self.loss is not None and self._saved_statistics is not None:
            self.loss.restore_statistics(self._saved_statistics)
            self._saved_statistics = None

    def on_epoch_end(self, epoch, logs=None):
        if logs is None or self.loss is None:
            return
        shares = dict(self.last_shares)
        if not self.updates:  # no window closed yet: the share of the batches seen so far
            counts = self.loss.statistics()
            shares = {axis: self._share(counts[f"satisfied_{axis}"], counts[f"used_{axis}"]) for axis in ("x", "y")}
        margins = self.margins()
        name = log_name(self.model, self.loss)
        logs.update({f"{name}/margin_x": margins["x"], f"{name}/margin_y": margins["y"],
                     f"{name}/share_x": shares["x"], f"{name}/share_y": shares["y"]})

    def on_train_end(self, logs=None):
        if self._writer is not None:
            self._writer.close()
            self._writer = None

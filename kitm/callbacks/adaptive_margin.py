"""Adaptive hinge margins of the semantic centers objective (Malali & Keller, Sec. 3.5, Eqs. 11-13), as a Keras callback.

Every q training batches, for each direction (m_x: image anchors, m_y: caption anchors):

    M = satisfied / used        (negatives used in those q batches whose hinge D+ - D- + m is <= 0)
    m <- min(c * m, max_margin)  if M > r,   else m unchanged                               (Eq. 13)

Defaults q = 500, r = 0.8, c = 1.03 (Sec. 4.1); kitm's cap (docs/methods.md#adaptive-margins) defaults to 1.0, the usual
margin for L2-normalised embeddings (Sec. 3.5). The counts come from the loss
(`kitm.losses.AdaptiveMarginTripletLoss`), which accumulates them in per-replica variables on every
training step; the callback only reads, decides, assigns and resets (only training batches count:
`kitm.callbacks.every_q_batches`).

Logged: the margins and the last window's shares go into the epoch logs as `<name>/margin_x`,
`/margin_y`, `/share_x`, `/share_y` (put this callback before `keras.callbacks.TensorBoard` so that
TensorBoard writes them), and with `log_dir` every update is also written as tf.summary scalars at its
training step. `<name>` is the loss's key in `DualEncoder.compile(losses=...)` (else `loss.name`), as
for its terms. `updates` keeps every decision (step, shares, margins) in memory.
"""

from __future__ import annotations

import math

from kitm.callbacks.every_q_batches import EveryQBatchesCallback, to_numpy
from kitm.losses.adaptive_margin import AdaptiveMarginTripletLoss

__all__ = ["AdaptiveMarginCallback"]


class AdaptiveMarginCallback(EveryQBatchesCallback):
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

    loss_type = AdaptiveMarginTripletLoss

    def __init__(self, loss: AdaptiveMarginTripletLoss | None = None, *, every_batches: int = 500,
                 share_threshold: float = 0.8, multiplier: float = 1.03, max_margin: float = 1.0,
                 log_dir: str | None = None, verbose: int = 0):
        if loss is not None and not isinstance(loss, AdaptiveMarginTripletLoss):
            raise ValueError(f"loss must be an AdaptiveMarginTripletLoss; got {type(loss).__name__}.")
        super().__init__(loss, every_batches=every_batches, log_dir=log_dir, verbose=verbose)
        self.share_threshold = float(share_threshold)
        if not 0.0 <= self.share_threshold <= 1.0:
            raise ValueError(f"share_threshold must be in [0, 1]; got {share_threshold}.")
        self.multiplier = float(multiplier)
        if not self.multiplier > 1.0:
            raise ValueError(f"multiplier must be > 1; got {multiplier}.")
        self.max_margin = float(max_margin)
        if not self.max_margin > 0:
            raise ValueError(f"max_margin must be > 0; got {max_margin}.")
        self.last_shares = {"x": math.nan, "y": math.nan}

    def margins(self) -> dict[str, float]:
        return {"x": float(to_numpy(self.loss.margin_x)), "y": float(to_numpy(self.loss.margin_y))}

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
            record.update({f"share_{axis}": share, f"margin_{axis}": float(to_numpy(variable)),
                           f"satisfied_{axis}": counts[f"satisfied_{axis}"], f"used_{axis}": counts[f"used_{axis}"]})
        loss.reset_statistics()
        self.updates.append(record)
        self.write_scalars(record, ("share_x", "share_y", "margin_x", "margin_y"))
        if self.verbose:
            print(f"{type(self).__name__}: step {record['step']}: M_x={record['share_x']:.3f} "
                  f"M_y={record['share_y']:.3f} -> m_x={record['margin_x']:.4f} m_y={record['margin_y']:.4f}")
        return record

    update = update_margins

    # -- the window (EveryQBatchesCallback) --------------------------------------------------------
    def check_loss(self, loss) -> None:
        for axis, margin in self.margins().items():
            if margin > self.max_margin:
                raise ValueError(f"margin_{axis} = {margin} of {loss.name} is above max_margin = {self.max_margin}.")

    def reset_window(self) -> None:
        self.loss.reset_statistics()

    def window_state(self):
        return self.loss.statistics_state()

    def restore_window(self, state) -> None:
        self.loss.restore_statistics(state)

    def epoch_logs(self) -> dict[str, float]:
        shares = dict(self.last_shares)
        if not self.updates:  # no window closed yet: the share of the batches seen so far
            counts = self.loss.statistics()
            shares = {axis: self._share(counts[f"satisfied_{axis}"], counts[f"used_{axis}"]) for axis in ("x", "y")}
        margins = self.margins()
        return {"margin_x": margins["x"], "margin_y": margins["y"], "share_x": shares["x"], "share_y": shares["y"]}

"""CollapseMonitor: warn (or stop) when training collapses the embeddings into one point.

Reads the epoch logs of `kitm.metrics.EmbeddingCollapse` (`collapse/image_cosine`, `collapse/text_cosine`: the mean
pairwise cosine of a batch's image and caption embeddings, 1 when they are all the same vector). When either
exceeds `threshold` at the end of an epoch it prints one warning that names the statistic, the likely cause and the
flags that fix it (`hint`), and with `stop=True` ends training (`model.stop_training`). A collapsed run otherwise
ends with exit status 0, a SavedModel and retrieval at chance, which is how the ladder flagfiles failed silently
on the synthetic world before the hardest-negative warm-up.
"""

from __future__ import annotations

import math
import sys

import keras

from kitm.metrics.collapse import COLLAPSE_THRESHOLD

STATISTICS = ("collapse/image_cosine", "collapse/text_cosine")
DEFAULT_HINT = ("Likely causes: hardest-negative terms on encoders that start from random weights (the VSE++ "
                "triplet with --max_violation, the ladder's first rung, --sam_sampling=hardest), a loss whose "
                "minimum is a collapse (--angular_form=hinge) or a learning rate too high. Fixes: "
                "--hardest_warmup_epochs=2 (the sum over negatives first), --max_violation=false, "
                "--angular_form=npair, a lower --learning_rate. --stop_on_collapse ends such a run at once.")


class CollapseMonitor(keras.callbacks.Callback):
    """Args:
      threshold: the mean pairwise cosine above which the embeddings count as collapsed (default 0.9).
      stop: end training at the first collapsed epoch (default: warn and go on).
      hint: the advice printed with the warning (default: the launcher's flags).
      stream: where the warning goes (default stderr).
    After training, `collapsed_epoch` is the first (0-based) collapsed epoch or None, and `statistics` that
    epoch's values; `report()` gives both for a run summary.
    """

    def __init__(self, threshold: float = COLLAPSE_THRESHOLD, stop: bool = False, hint: str = DEFAULT_HINT,
                 stream=None):
        super().__init__()
        if not 0 < threshold <= 1:
            raise ValueError(f"threshold must be in (0, 1] (a mean cosine); got {threshold}.")
        self.threshold = float(threshold)
        self.stop = bool(stop)
        self.hint = hint
        self.stream = stream
        self.collapsed_epoch: int | None = None
        self.statistics: dict[str, float] = {}
        self.last: dict[str, float] = {}

    def include_earlier_epochs(self, epochs: list[dict]) -> None:
        """After a resumed fit: the logs of the epochs before the restore (kitm.training.epoch_history), silently.
        The first collapse among them comes before any this fit saw, and their last values stand where this fit
        ran no epoch (a run killed after training)."""
        seen_last, seen_collapse = dict(self.last), (self.collapsed_epoch, self.statistics)
        self.collapsed_epoch, self.statistics = None, {}
        for epoch, logs in enumerate(epochs):
            self._record(epoch, {key: value for key, value in logs.items() if value is not None})
        if seen_last:
            self.last = seen_last
        if self.collapsed_epoch is None:
            self.collapsed_epoch, self.statistics = seen_collapse

    def _record(self, epoch, logs) -> bool:
        """Keep the epoch's statistics; True when this epoch is the run's first collapsed one."""
        values = {key: float(logs[key]) for key in STATISTICS if logs and key in logs}
        if not values:
            return False
        self.last = values
        if not all(math.isfinite(value) for value in values.values()):
            return False  # a non-finite epoch (a diverged loss) is not a collapse: the run's non-finite stop says so
        if self.collapsed_epoch is not None or max(values.values()) <= self.threshold:
            return False
        self.collapsed_epoch, self.statistics = int(epoch), values
        return True

    def on_epoch_end(self, epoch, logs=None):
        if not self._record(epoch, logs):
            return
        values = self.statistics
        print(f"kitm: WARNING: the embeddings collapsed in epoch {epoch + 1}: mean pairwise cosine of a batch's "
              f"image embeddings {values.get(STATISTICS[0], float('nan')):.3f}, caption embeddings "
              f"{values.get(STATISTICS[1], float('nan')):.3f} (threshold {self.threshold}); retrieval will be "
              f"near chance. {self.hint}" + (" Stopping the run." if self.stop else ""),
              file=self.stream or sys.stderr, flush=True)
        if self.stop:
            self.model.stop_training = True

    def report(self) -> dict:
        """{"collapsed_epoch": 1-based epoch or None, "statistics": values then, "last": last epoch's values,
        "threshold": ..., "stopped": ...} for summary.json."""
        collapsed = self.collapsed_epoch is not None
        return {"collapsed_epoch": self.collapsed_epoch + 1 if collapsed else None, "statistics": self.statistics,
                "last": self.last, "threshold": self.threshold, "stopped": collapsed and self.stop}

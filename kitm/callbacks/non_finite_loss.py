"""Stop a run at the first step whose loss goes NaN or infinite, saying which step and which loss term.

Keras' `TerminateOnNaN` ends `fit` quietly ("Batch 12: Invalid loss, terminating training"), and the run then went
on to evaluate and export NaN weights ("sims must be finite"), with the collapse monitor blaming the negatives.
`NonFiniteLossStop` raises `NonFiniteLoss` instead, from the step itself: the launcher prints it as its one-line
error, and nothing after training runs. The backup and the checkpoint never hold a non-finite step
(`kitm.training.fault_tolerance`, `kitm.callbacks.checkpoint`), so the run resumes from its last good state once the
cause is fixed.

Keras logs a running mean of each loss term over the epoch, so a term is non-finite from the first bad step on;
the error names every term that is, the step (the optimizer's count, 1-based), the epoch and the batch.
"""

from __future__ import annotations

import math

import keras
import numpy as np

from kitm.errors import KitmError, option


class NonFiniteLoss(KitmError, ArithmeticError):
    """A training step whose loss is NaN or infinite; the message names the step and the terms."""


def non_finite_terms(logs) -> dict[str, float]:
    """The logged values (loss and its terms) that are NaN or infinite, by name (in the logs' order)."""
    bad = {}
    for name, value in (logs or {}).items():
        try:
            number = float(np.asarray(value))
        except (TypeError, ValueError):  # a non-scalar entry: not a loss
            continue
        if not math.isfinite(number):
            bad[name] = number
    return bad


class NonFiniteLossStop(keras.callbacks.Callback):
    """Raise `NonFiniteLoss` at the end of the first training batch with a non-finite loss or loss term.

    Args:
      hint: what to try, appended to the message (default: the learning rate, the gradient clipping).
    """

    def __init__(self, hint: str | None = None):
        super().__init__()
        self.hint = hint if hint is not None else (
            f"lower {option('learning_rate')} or set {option('grad_clip_norm')}; with {option('mixed_precision')}, "
            "try without it")
        self._epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        bad = non_finite_terms(logs)
        if not bad:
            return
        optimizer = getattr(self.model, "optimizer", None)
        step = int(keras.ops.convert_to_numpy(optimizer.iterations)) if optimizer is not None else None
        terms = ", ".join(f"{name} = {value}" for name, value in bad.items())
        where = f"step {step} (epoch {self._epoch + 1}, batch {batch + 1})" if step else \
            f"epoch {self._epoch + 1}, batch {batch + 1}"
        raise NonFiniteLoss(
            f"Training stopped at {where}: the loss is not finite ({terms}; Keras logs each term's mean over the "
            f"epoch, so the first non-finite step is this one). The backup and checkpoint keep the last finite "
            f"state; {self.hint}.")

"""Backend cases: the callbacks' arithmetic on Keras variables of the active backend: Eq. 13's margin updates of
`AdaptiveMarginCallback` (Malali & Keller, Sec. 3.5) on a stand-in loss, `finite_weights` of the atomic checkpoint,
and the variable checks and reads the every-q-batches callbacks share."""

import math

import keras
import numpy as np

from kitm.callbacks.adaptive_margin import AdaptiveMarginCallback
from kitm.callbacks.checkpoint import finite_weights
from kitm.callbacks.every_q_batches import to_numpy
from kitm.distribute.replica_local import is_variable as _is_variable


class _CountingLoss:
    """What AdaptiveMarginCallback reads of an AdaptiveMarginTripletLoss: two margin variables and the counts."""

    name = "margins"

    def __init__(self, windows):
        self.margin_x = keras.Variable(0.2, dtype="float32", trainable=False)
        self.margin_y = keras.Variable(0.95, dtype="float32", trainable=False)
        self.windows = list(windows)
        self.resets = 0

    def statistics(self):
        return self.windows[0]

    def reset_statistics(self):
        self.resets += 1
        self.windows = self.windows[1:] or [{"satisfied_x": 0, "used_x": 0, "satisfied_y": 0, "used_y": 0}]


def cases():
    windows = [{"satisfied_x": 9, "used_x": 10, "satisfied_y": 9, "used_y": 10},  # both grow (y hits the cap)
               {"satisfied_x": 8, "used_x": 10, "satisfied_y": 1, "used_y": 10},  # 0.8 is not > r: x stays
               {"satisfied_x": 0, "used_x": 0, "satisfied_y": 10, "used_y": 10},  # nothing used: x stays
               {"satisfied_x": 5, "used_x": 5, "satisfied_y": 3, "used_y": 3}]
    callback = AdaptiveMarginCallback(every_batches=2, share_threshold=0.8, multiplier=1.5, max_margin=1.0)
    callback.loss = _CountingLoss(windows)
    records = []
    for step in range(len(windows)):
        callback.counter.total = 2 * (step + 1)
        records.append(callback.update_margins())
    results = {"margins": np.array([[r["margin_x"], r["margin_y"]] for r in records]),
               "shares": np.array([[r["share_x"], r["share_y"]] for r in records]),
               "resets": float(callback.loss.resets),
               "variables": np.array([to_numpy(callback.loss.margin_x), to_numpy(callback.loss.margin_y)]),
               "epoch_logs": np.array([callback.epoch_logs()[k] for k in ("margin_x", "margin_y", "share_x",
                                                                           "share_y")])}
    results["shares"] = np.where(np.isnan(results["shares"]), -1.0, results["shares"])

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2), keras.layers.Dense(1)])
    results["finite_before"] = float(finite_weights(model))
    kernel = model.layers[1].kernel
    kernel.assign(np.where(np.arange(2)[:, None] == 1, math.nan, 1.0) * np.ones((2, 1)))
    results["finite_after_nan"] = float(finite_weights(model))
    results["is_variable"] = np.array([_is_variable(kernel), _is_variable(np.zeros(2))], np.float64)
    return results

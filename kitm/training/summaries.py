"""TensorBoard summaries of a whole run: the hparams plugin's view of its settings, and its final test figures.

`write_hparams` writes the hparams plugin's experiment config and session (`tensorboard.plugins.hparams.api`:
`hp.hparams_config`, `hp.hparams`) with the run's settings, and `write_final_figures` the final test figures as
scalars in `<logs>/test`, so the HPARAMS tab lists them next to the settings.
"""

from __future__ import annotations

import math
import os
import pathlib
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import tensorflow as tf

# The figures the HPARAMS tab shows beside the flags: (tag, run directory under the logs).
HPARAM_METRICS = (
    ("epoch_loss", "train"),
    ("epoch_rsum", "validation"), ("epoch_i2t_R@1", "validation"), ("epoch_t2i_R@1", "validation"),
    ("rsum", "test"), ("i2t_R@1", "test"), ("i2t_R@5", "test"), ("i2t_R@10", "test"),
    ("t2i_R@1", "test"), ("t2i_R@5", "test"), ("t2i_R@10", "test"),
)


def hparam_value(value):
    """A flag value as the hparams plugin takes it: bool, int, float or str (lists joined by commas)."""
    if isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if value is None:
        return ""
    if isinstance(value, Iterable):
        return ",".join(str(v) for v in value)
    return str(value)


def write_hparams(log_dir: str | os.PathLike, hparams: Mapping[str, object], *, trial_id: str = "",
                  metrics: Sequence[tuple[str, str]] = HPARAM_METRICS) -> None:
    """The hparams experiment config (every hparam, the metrics by tag and run) and this run's session, written
    to the root of `log_dir` (the session's directory; the metrics' runs are its subdirectories)."""
    from tensorboard.plugins.hparams import api as hp

    values = {name: hparam_value(value) for name, value in sorted(hparams.items())}
    with tf.summary.create_file_writer(str(log_dir)).as_default():
        hp.hparams_config(hparams=[hp.HParam(name) for name in values],
                          metrics=[hp.Metric(tag, group=group, display_name=f"{group}/{tag}")
                                   for tag, group in metrics])
        hp.hparams(values, trial_id=trial_id or None)


def write_final_figures(log_dir: str | os.PathLike, figures: Mapping[str, float], *, step: int,
                        run: str = "test") -> None:
    """Scalars `figures` (e.g. {"i2t_R@1": 40.0, "rsum": ...}) in `<log_dir>/<run>` at `step`."""
    with tf.summary.create_file_writer(str(pathlib.Path(log_dir) / run)).as_default():
        for name, value in figures.items():
            if value is not None and np.isfinite(value):
                tf.summary.scalar(name, float(value), step=int(step))

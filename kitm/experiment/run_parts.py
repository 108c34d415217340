"""What the steps of one training run share (`kitm.experiment.training_run` makes it, its steps and
`kitm.experiment.run_outputs` read it)."""

from __future__ import annotations

import dataclasses
import pathlib
import typing

from kitm.experiment.config import ExperimentConfig

if typing.TYPE_CHECKING:  # the types of _RunParts' fields; the modules load when a run needs them
    import tensorflow as tf

    from kitm.data.pipeline import PipelineConfig
    from kitm.data.schema import DatasetInfo
    from kitm.experiment.trainers import Trainer
    from kitm.layers import CaptionTokenizer
    from kitm.layers.hub_tokenizers import HubCaptionTokenizer
    from kitm.layers.hub_towers import JointPreset


@dataclasses.dataclass(frozen=True)
class _RunParts:
    """What the steps of one training run share, made in order and then fixed: its settings (final: nothing after
    this changes them), records, folders and strategy, the joint preset when the settings name one, then the
    tokenizer, the input settings and the trainer (`dataclasses.replace` adds each). `chief_dir` is where the
    vocabulary and the backup are read (the chief's run directory); `run_dir` is where this worker writes (the
    chief's, or a temporary directory on the others)."""

    config: ExperimentConfig
    info: DatasetInfo
    data_dir: pathlib.Path
    chief_dir: pathlib.Path
    run_dir: pathlib.Path
    strategy: tf.distribute.Strategy
    joint: JointPreset | None = None
    tokenizer: CaptionTokenizer | HubCaptionTokenizer | None = None
    pipeline_config: PipelineConfig | None = None
    trainer: Trainer | None = None

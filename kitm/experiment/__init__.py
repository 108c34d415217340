"""kitm.experiment: train a run the way `python -m kitm.launch` does, from Python.

    from kitm.experiment import experiment_config, run

    config = experiment_config("synthetic", epochs=2, run_dir="runs/quick")   # the dataset's presets + yours
    summary = run(config)                                                     # train, test, export
    print(summary["test"]["i2t_R@1"])

- `config`: typed settings (`ExperimentConfig` with data, model, objective, training, evaluation and export
  sections); every setting has the launcher flag's name.
- `presets`: per-dataset presets and `experiment_config`.
- `datasets`: where records live, building the synthetic world on demand, checks against the records.
- `objectives` / `encoders`: registries of the losses and towers by name (`register_objective`,
  `register_image_encoder` add your own).
- `trainers`: one fit, or the centers objective's phases, behind one interface.
- `runner`: `run(config) -> summary`.
"""

from kitm.experiment.config import (DataConfig, EvaluationConfig, ExperimentConfig, ExportConfig, ModelConfig,
                                    ObjectiveConfig, TrainingConfig)
from kitm.experiment.presets import DATASET_PRESETS, experiment_config
from kitm.experiment.encoders import IMAGE_ENCODERS, TEXT_ENCODERS, register_image_encoder, register_text_encoder
from kitm.experiment.objectives import OBJECTIVES, build_objective, register_objective
from kitm.experiment.runner import run

__all__ = ["ExperimentConfig", "DataConfig", "ModelConfig", "ObjectiveConfig", "TrainingConfig", "EvaluationConfig",
           "ExportConfig", "experiment_config", "run", "DATASET_PRESETS", "OBJECTIVES", "register_objective",
           "build_objective", "IMAGE_ENCODERS", "TEXT_ENCODERS", "register_image_encoder", "register_text_encoder"]

"""Per-dataset presets, and `experiment_config`: a configuration built the way the launcher builds one.

`DATASET_PRESETS` holds, per dataset, the data, model and schedule settings nobody gave, so that a paper's flagfile
(objective settings only) runs on the photos it was written for and, with `dataset="synthetic"`, on the synthetic
world in minutes. Explicitly given settings always win. This module sits between the objectives (which it asks
whether the centers phases apply) and the datasets (which read the presets), so the experiment layer's imports run
one way: config -> objectives -> presets -> datasets -> runner.
"""

from __future__ import annotations

from kitm.experiment.config import ExperimentConfig
from kitm.experiment.objectives import check_objective, uses_center_phases

_PHOTO_PRESETS = {
    "image_encoder": "resnet152", "weights": "imagenet", "image_size": 224, "flip": True, "eval_crop_fraction": 0.875,
    "embedding_dim": 1024, "word_dim": 300, "text_units": 1024, "captions_per_step": "all", "max_violation": True,
    "epochs": 30, "learning_rate": 2e-4, "lr_decay_epochs": 15, "eval_every_epochs": 1,
    # The centers objective (Malali & Keller, Sec. 4.1): 30/15/10 epochs, Adam 2e-4 then 2e-5, 1000 quantized
    # centres, q = 500.
    "center_phase_epochs": (30, 15, 10), "center_phase2_learning_rate": 2e-5,
    "center_phase3_learning_rate": 2e-5, "num_quantized_centers": 1000, "margin_update_every": 500,
}
DATASET_PRESETS = {
    "synthetic": {
        "image_encoder": "small_cnn", "weights": "none", "image_size": 48, "flip": False, "eval_crop_fraction": 1.0,
        "embedding_dim": 256, "word_dim": 64, "text_units": 128, "captions_per_step": "all",
        # The sum over negatives throughout (the triplet, SAM's triplet part, the ladders' first rung): with the CNN
        # starting from random weights the hardest negative collapsed the embeddings within one epoch of switching
        # to it, after a 2- or a 6-epoch hardest_warmup_epochs too (docs/flagfiles.md, "Hardest negatives").
        "max_violation": False, "hardest_warmup_epochs": 0.0, "epochs": 12, "learning_rate": 2e-3, "lr_decay_epochs": 9,
        "eval_every_epochs": 3,
        # The centers objective: the encoders train as long at each rate as the other objectives' 12 epochs (phase
        # 1: the 9 epochs at 2e-3 before their decay; phase 3: the 3 at 2e-4 after it), plus one epoch for the
        # quantizer alone; the sum over negatives like the other objectives here. Both chosen on the validation
        # split (studies/centers_tuning.toml): the paper's proportions (6/3/3) left phase 1 too short to learn the
        # world, and one random negative per anchor learned less than the sum. 50 quantized centres for the 2,100
        # training scenes, margins adapted every 50 of the ~80 batches an epoch.
        "center_phase_epochs": (9, 1, 3), "center_phase2_learning_rate": 2e-4,
        "center_phase3_learning_rate": 2e-4, "num_quantized_centers": 50, "margin_update_every": 50,
        "center_triplet_sampling": "all",
    },
    "coco": _PHOTO_PRESETS, "f30k": _PHOTO_PRESETS, "f8k": _PHOTO_PRESETS,
}
# Only the centers objective reads these: not worth a line of another run's output.
CENTER_PHASE_SETTINGS = ("center_phase_epochs", "center_phase2_learning_rate", "center_phase3_learning_rate",
                         "num_quantized_centers", "margin_update_every", "center_term_weights",
                         "center_triplet_sampling")


def preset_settings(config: ExperimentConfig) -> dict:
    """The dataset's presets for the settings `config` was not given explicitly, where they change something."""
    presets = {}
    for name, value in DATASET_PRESETS.get(config.data.dataset, {}).items():
        if name in CENTER_PHASE_SETTINGS and not uses_center_phases(config):
            continue
        if name not in config.explicit and config.get(name) != value:
            presets[name] = value
    return presets


def experiment_config(dataset: str = "synthetic", **settings) -> ExperimentConfig:
    """The configuration the launcher would run for `--dataset=<dataset>` and `settings` (flat names, e.g.
    `epochs=2, loss=["triplet", "sam"], relevance="truth"`): the dataset's presets fill every setting not given.
    The objective settings are checked here, once (`kitm.experiment.objectives.check_objective`); the records and
    the run check only what needs them.

    >>> config = experiment_config("synthetic", epochs=2, run_dir="runs/quick")
    >>> config.model.image_encoder, config.training.epochs
    ('small_cnn', 2)
    """
    given = {"dataset": dataset, **settings}
    config = ExperimentConfig().replace(**given)
    config = config.fill(**preset_settings(config))
    check_objective(config)  # the objective's one check, when the configuration is made
    return config

"""How a run trains: one interface for a single `fit` and for the centers objective's three phases.

The runner (`kitm.experiment.runner`) does the same sequence for every objective (vocabulary, input, model,
callbacks, training, test, export, summary); a `Trainer` supplies what differs:
- `prepare_input(dataset)`: the per-replica training input (the centers objective maps image ids to positions);
- `compile(model, ...)`: the objective and optimizer(s) (the centers phases compile once per phase);
- `backup(...)`: the BackupAndRestore callback (one resumable backup, or one folder per phase);
- `callbacks(run_dir)`: the objective's own callbacks (ladder re-clustering);
- `fit(model, dataset, callbacks, ...)` -> History; `summary()`: its entries for summary.json.
`make_trainer(config, ...)` picks the trainer for the objective.
"""

from __future__ import annotations

import pathlib

import keras

from kitm.experiment.config import ExperimentConfig
from kitm.experiment.objectives import build_objective, center_phase_config, total_epochs, uses_center_phases


class Trainer:
    """One fit of the model on the whole objective (every loss but centers)."""

    def __init__(self, config: ExperimentConfig):
        self.config = config

    def prepare_input(self, dataset):
        return dataset

    def compile(self, model, *, optimizer, strategy, monitors, jit_compile, steps_per_epoch: int) -> None:
        """Create the losses under the strategy's scope (the caller holds it) and compile the model."""
        from kitm.metrics import RelevanceStatistics

        monitors = list(monitors)
        if self.config.data.relevance != "none":
            monitors.append(RelevanceStatistics())
        losses, loss_weights = build_objective(self.config, steps_per_epoch)
        model.compile(optimizer, losses=losses, loss_weights=loss_weights, monitors=monitors, jit_compile=jit_compile,
                      grad_cache_chunk=self.config.training.grad_cache_chunk)

    def build_optimizer(self, model, optimizer) -> None:
        if not optimizer.built:
            # Nothing left for fit's symbolic build; with the losses' variables the model's optimizer trains
            # (a contrastive loss's temperature: DualEncoder.optimizer_variables).
            optimizer.build(model.optimizer_variables())

    def backup(self, chief_dir: pathlib.Path, write_dir: pathlib.Path, *, steps_per_epoch: int, save_freq):
        from kitm.training.fault_tolerance import ResumableBackupAndRestore

        return ResumableBackupAndRestore(chief_dir / "backup", steps_per_epoch=steps_per_epoch, save_freq=save_freq,
                                         write_dir=write_dir / "backup", delete_checkpoint=False,
                                         total_steps=total_epochs(self.config) * steps_per_epoch)

    def callbacks(self, run_dir: pathlib.Path) -> list:
        objective = self.config.objective
        if objective.ladder_recluster_every and "ladder" in objective.loss:
            from kitm.callbacks.ladder_recluster import LadderReclusterCallback

            return [LadderReclusterCallback(every_batches=objective.ladder_recluster_every,
                                            lloyd_runs=objective.ladder_lloyd_runs,
                                            log_dir=str(run_dir / "logs" / "ladder"))]
        return []

    def fit(self, model, dataset, callbacks, *, steps_per_epoch: int, verbose):
        return model.fit(dataset, epochs=total_epochs(self.config), steps_per_epoch=steps_per_epoch,
                         callbacks=callbacks, verbose=verbose, shuffle=False)

    def summary(self) -> dict:
        return {}


class CenterPhasesTrainer(Trainer):
    """The centers objective: three phases, each its own compile and fit (kitm.training.center_phases)."""

    def __init__(self, config: ExperimentConfig, *, data_dir: pathlib.Path, run_dir: pathlib.Path,
                 num_train_images: int):
        from kitm.training.center_phases import CenterPhaseTrainer, training_image_index

        super().__init__(config)
        self.phases = CenterPhaseTrainer(center_phase_config(config, num_train_images, data_dir=data_dir), run_dir,
                                         training_image_index(data_dir, run_dir))

    def prepare_input(self, dataset):
        return self.phases.image_index.apply(dataset)  # image/id -> the image's centre 0..N_train-1

    def compile(self, model, *, optimizer, strategy, monitors, jit_compile, steps_per_epoch: int) -> None:
        self.phases.build(model, strategy, monitors=monitors)  # each phase compiles with its own optimizers

    def build_optimizer(self, model, optimizer) -> None:
        pass

    def backup(self, chief_dir: pathlib.Path, write_dir: pathlib.Path, *, steps_per_epoch: int, save_freq):
        # Each phase starts its optimizers' step count afresh and backs up in its own folder.
        return keras.callbacks.BackupAndRestore(str(chief_dir / "backup"), save_freq=save_freq,
                                                delete_checkpoint=False)

    def callbacks(self, run_dir: pathlib.Path) -> list:
        return []

    def fit(self, model, dataset, callbacks, *, steps_per_epoch: int, verbose):
        return self.phases.fit(model, dataset, callbacks, verbose=verbose, steps_per_epoch=steps_per_epoch)

    def summary(self) -> dict:
        return {"center_phases": self.phases.summary()}


def make_trainer(config: ExperimentConfig, *, data_dir: pathlib.Path, run_dir: pathlib.Path, info) -> Trainer:
    if uses_center_phases(config):
        return CenterPhasesTrainer(config, data_dir=data_dir, run_dir=run_dir,
                                   num_train_images=info.num_images("train"))
    return Trainer(config)

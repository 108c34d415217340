"""`CenterPhaseTrainer`: the centers objective's three phases, each one `model.fit`, resumable after a kill.

The package docstring (`kitm.training.center_phases`) describes the phases, the image index, the global epochs and
how a killed run resumes.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import time
from typing import Sequence

import keras
import numpy as np
import tensorflow as tf

from kitm.callbacks.adaptive_margin import AdaptiveMarginCallback
from kitm.callbacks.loss_state_checkpoint import AdaptiveMarginState, LossStateCheckpoint, read_state_json
from kitm.data.image_index import ImageIndexMap, read_image_ids
from kitm.errors import KitmDataError
from kitm.files import atomic_path, write_json_atomically
from kitm.training.center_phases.config import PHASE_DESCRIPTIONS, PHASE_NAMES, CenterPhaseConfig
from kitm.training.center_phases.objective import CenterObjective
from kitm.training.schedules import step_decay

STATE_DIR = "loss_state"
PHASES_DIR = "phases"


def training_image_index(data_dir: str | os.PathLike, run_dir: str | os.PathLike | None = None,
                         split: str = "train") -> ImageIndexMap:
    """The ImageIndexMap of `split`; its ids are kept in `<run_dir>/phases/image_ids.npy` (centre n belongs to
    the n-th smallest id) and reused by a resumed run when the split's size is unchanged."""
    from kitm.data import schema

    info = schema.load_info(data_dir)
    source = f"the '{split}' split of {data_dir}"
    cache = pathlib.Path(run_dir) / PHASES_DIR / "image_ids.npy" if run_dir is not None else None
    if cache is not None and cache.is_file():
        ids = np.load(cache)
        if ids.size == info.num_images(split):
            return ImageIndexMap(ids, source)
    ids = np.sort(read_image_ids(data_dir, split))
    if cache is not None:
        with atomic_path(cache, keep_suffix=".npy") as tmp:
            np.save(tmp, ids)
    return ImageIndexMap(ids, source)


def _finite_or_none(value):
    value = float(value)
    return value if math.isfinite(value) else None


class _TrainableFlags:
    """The `trainable` flag of every layer, to undo `model.trainable = False` exactly.

    `model.trainable = True` would set every sublayer trainable, including a backbone that was frozen on
    purpose (--finetune_backbone=false); replaying the recorded flags parent-first restores each one.
    """

    def __init__(self, model):
        # _flatten_layers: Keras' own breadth-first walk of the layer tree (parents before their sublayers).
        self.flags = [(layer, layer.trainable) for layer in model._flatten_layers(include_self=True, recursive=True)]
        self.model = model
        self.trainable_ids = [id(v) for v in model.trainable_weights]

    def restore(self) -> None:
        for layer, flag in self.flags:
            layer.trainable = flag
        if [id(v) for v in self.model.trainable_weights] != self.trainable_ids:
            raise RuntimeError("Restoring the layers' trainable flags after phase 2 did not give back the same "
                               "trainable weights.")


class CenterPhaseTrainer:
    """Runs the phases (module docstring). Use: `build(model, strategy)` inside or outside the strategy's scope,
    then `fit(model, train, callbacks)`; `summary()` for summary.json.

    Args:
      config: CenterPhaseConfig.
      run_dir: the run directory (loss_state/, phases/ go there).
      image_index: ImageIndexMap of the training split (apply it to the training dataset).
      log_dir: where AdaptiveMarginCallback writes each margin update (default <run_dir>/logs/margins).
      verbose: 1 prints what each phase does.
    """

    def __init__(self, config: CenterPhaseConfig, run_dir: str | os.PathLike, image_index: ImageIndexMap, *,
                 log_dir: str | os.PathLike | None = None, verbose: int = 1):
        self.config = config
        self.monitors: list = []
        self.run_dir = pathlib.Path(run_dir)
        self.image_index = image_index
        self.log_dir = pathlib.Path(log_dir) if log_dir is not None else self.run_dir / "logs" / "margins"
        self.verbose = int(verbose)
        self.state_dir = self.run_dir / STATE_DIR
        self.phases_dir = self.run_dir / PHASES_DIR
        self.objective: CenterObjective | None = None
        self.strategy = None
        # Records of phases finished by earlier processes of this run, and how the quantizer was started.
        self.records, self.quantizer_init = self._load_records()
        self.resumed: dict | None = None
        self.margin_callback: AdaptiveMarginCallback | None = None

    # -- set-up ----------------------------------------------------------------------------------
    def _print(self, message: str) -> None:
        if self.verbose:
            print(message, flush=True)

    def build(self, model, strategy=None, monitors: Sequence = ()) -> CenterObjective:
        """Create the objective's losses (and their variables) under the strategy's scope; `fit` compiles each
        phase, with `monitors` (Keras metrics for `DualEncoder.compile(monitors=...)`, e.g. the collapse
        statistic of kitm.metrics; create them under the same scope)."""
        self.strategy = strategy or tf.distribute.get_strategy()
        self.monitors = list(monitors)
        with self.strategy.scope():
            self.objective = CenterObjective(self.config, self.image_index.num_images, model.embedding_dim)
        return self.objective

    def _optimizers(self, phase: int, steps_per_epoch: int):
        """(model Adam, loss-owned optimizers by (loss, attribute)) for `phase`, fresh and built."""
        config, objective = self.config, self.objective
        epochs = config.phase_epochs[phase - 1]

        def rate(value):
            return step_decay(value, steps_per_epoch=steps_per_epoch, epochs=epochs,
                              decay_epochs=config.lr_decay_epochs, decay_factor=config.lr_decay_factor)

        adam_rate = config.learning_rates[phase - 1]
        model_optimizer = keras.optimizers.Adam(rate(adam_rate), global_clipnorm=config.grad_clip_norm or None)
        owned = {}
        if phase == 1:
            owned[(objective.centers, "centers_optimizer")] = (keras.optimizers.SGD(rate(config.centers_learning_rate)),
                                                               objective.centers.table.trainable_variables)
        else:
            quantizer = objective.quantized.quantizer
            owned[(objective.quantized, "centers_optimizer")] = (
                keras.optimizers.SGD(rate(config.centers_learning_rate)), [quantizer.centers])
            owned[(objective.quantized, "assignment_optimizer")] = (keras.optimizers.Adam(rate(adam_rate)),
                                                                    quantizer.assignment.trainable_variables)
        if phase != 2:  # frozen in phase 2: its phase-1 optimizer stays (and is saved) untouched
            owned[(objective.index_ce, "optimizer")] = (keras.optimizers.Adam(rate(adam_rate)),
                                                        objective.index_ce.heads.trainable_variables)
        return model_optimizer, owned

    def _set_up(self, model, phase: int, steps_per_epoch: int, flags: _TrainableFlags) -> None:
        objective = self.objective
        with self.strategy.scope():
            if phase == 2:
                model.trainable = False
                objective.index_ce.heads.trainable = False
            else:
                flags.restore()
                objective.index_ce.heads.trainable = True
            objective.quantized.quantizer.trainable = True
            objective.centers.table.trainable = phase == 1
            model_optimizer, owned = self._optimizers(phase, steps_per_epoch)
            for (loss, attribute), (optimizer, variables) in owned.items():
                optimizer.build(variables)
                setattr(loss, attribute, optimizer)
            losses = objective.phase_losses(phase)
            # Recompile: freezing and new optimizers take effect in a newly traced training step.
            model.compile(model_optimizer, losses=losses,
                          loss_weights=self.objective.phase_weights(phase), monitors=self.monitors)

    def _initialize_quantizer(self) -> dict:
        """k-means of the unquantized centres -> the quantized centres (paper Sec. 4.1); saved for inspection."""
        objective = self.objective
        started = time.time()
        if self.config.phase_epochs[0] == 0:
            info = {"method": "random", "reason": "phase 1 did not run: the unquantized centres are untrained"}
            self._print("Quantizer: phase 1 did not run, so the quantized centres keep their random start.")
        else:
            centers = np.asarray(objective.centers.centers.numpy(), dtype=np.float64)
            self._print(f"Quantizer: k-means of {centers.shape[0]} unquantized centres into "
                        f"{objective.quantized.num_centers} quantized centres.")
            labels = objective.quantized.initialize_from(centers, seed=self.config.seed)
            centroids = objective.quantized.centers.numpy()
            with atomic_path(self.phases_dir / "quantizer_init.npz", keep_suffix=".npz") as tmp:
                np.savez(tmp, centroids=centroids, labels=labels)
            sizes = np.bincount(labels, minlength=objective.quantized.num_centers)
            info = {"method": "kmeans", "points": int(centers.shape[0]), "clusters": int(sizes.size),
                    "empty_clusters": int(np.sum(sizes == 0)), "largest_cluster": int(sizes.max()),
                    "seed": self.config.seed, "file": str(self.phases_dir / "quantizer_init.npz")}
        info["seconds"] = round(time.time() - started, 3)
        self.quantizer_init = info
        self._save_records()
        return info

    def _phase_callbacks(self, phase: int, callbacks: Sequence[keras.callbacks.Callback], save_callback):
        """The caller's callbacks with BackupAndRestore moved to this phase's folder, the margin callback first in
        phase 3 (its epoch logs must reach TensorBoard) and the state checkpoint last: it restores after
        BackupAndRestore and after the margin callback's reset, and an epoch's state is written once everything
        else about that epoch (logs, weights, evaluation) is."""
        out = []
        for callback in callbacks:
            if isinstance(callback, keras.callbacks.BackupAndRestore):
                callback = keras.callbacks.BackupAndRestore(
                    os.path.join(callback.backup_dir, f"phase_{phase}"), save_freq=callback.save_freq,
                    double_checkpoint=callback.double_checkpoint, delete_checkpoint=callback.delete_checkpoint)
            out.append(callback)
        if phase == 3:
            out.insert(0, self.margin_callback)
        return out + [save_callback]

    # -- records ---------------------------------------------------------------------------------
    def _load_records(self) -> tuple[dict[int, dict], dict | None]:
        path = self.phases_dir / "phases.json"
        if not path.is_file():
            return {}, None
        try:
            payload = json.loads(path.read_text())
            return ({int(record["phase"]): record for record in payload.get("phases", [])},
                    payload.get("quantizer_init"))
        except (ValueError, KeyError, TypeError) as error:
            raise KitmDataError(f"{path} is unreadable ({error}); it is only a record: delete it to go on.") from error

    def _save_records(self) -> None:
        write_json_atomically(self.phases_dir / "phases.json",
                    {"phases": [self.records[k] for k in sorted(self.records)], "quantizer_init": self.quantizer_init})

    def summary(self) -> dict:
        """For summary.json: each phase's epochs and final metrics, the quantizer's start, the image index."""
        return {"phases": [self.records[k] for k in sorted(self.records)],
                "phase_epochs": list(self.config.phase_epochs), "quantizer_init": self.quantizer_init,
                "image_index": self.image_index.describe(), "num_quantized_centers": self.config.num_quantized_centers,
                "resumed": self.resumed, "state_dir": str(self.state_dir)}

    # -- training --------------------------------------------------------------------------------
    def _starting_point(self) -> tuple[int, int, dict | None]:
        """(phase to run first, global epochs already done, state.json) from the saved state, if any."""
        config = self.config
        payload = read_state_json(self.state_dir)
        phases = [k for k in (1, 2, 3) if config.phase_epochs[k - 1] > 0]
        if payload is None:
            return phases[0], 0, None
        saved_phase = int(payload.get("tags", {}).get("phase", 0))
        epoch = int(payload["epoch"])
        if saved_phase not in (1, 2, 3):
            raise KitmDataError(f"The state in {self.state_dir} has no phase tag; it was not written by the phase "
                                "trainer. Use another --run_dir.")
        first, last = config.start_epoch(saved_phase), config.end_epoch(saved_phase)
        if epoch < first or epoch > last:
            raise KitmDataError(f"The state in {self.state_dir} is at epoch {epoch} of phase {saved_phase}, outside "
                                f"that phase's epochs {first}..{last} under phase_epochs={list(config.phase_epochs)}: "
                                "the run was started with other phase epochs. Use the same ones, or another --run_dir.")
        if epoch < config.end_epoch(saved_phase):
            return saved_phase, epoch, payload
        later = [k for k in phases if k > saved_phase]
        return (later[0] if later else 4), epoch, payload

    def fit(self, model, train: tf.data.Dataset, callbacks: Sequence[keras.callbacks.Callback] = (), *,
            verbose="auto", steps_per_epoch: int | None = None) -> keras.callbacks.History:
        """Run the remaining phases; returns one History with every epoch run by this call (global epochs)."""
        if self.objective is None:
            self.build(model)
        config = self.config
        if steps_per_epoch is None:
            cardinality = int(train.cardinality())
            if cardinality < 1:
                raise ValueError("The training dataset has no known length; pass steps_per_epoch.")
            steps_per_epoch = cardinality
        flags = _TrainableFlags(model)
        first_phase, done, payload = self._starting_point()
        saved_phase = int(payload["tags"]["phase"]) if payload is not None else 0
        saver = LossStateCheckpoint(self.state_dir, self.objective.all_losses(), include_model=True,
                                    verbose=self.verbose)
        saver.set_model(model)
        if payload is not None:
            self._resume(saver, first_phase, done, payload, saved_phase)
        # Inside a phase that was cut short, its own callback restores the rest of the state at train begin.
        resume_phase = saved_phase if payload is not None and first_phase == saved_phase else None
        # The quantizer is in any state written from phase 2 on (restored above); else k-means starts it.
        quantizer_ready = saved_phase >= 2
        merged = keras.callbacks.History()
        merged.history, merged.epoch = {}, []
        try:
            for phase in (1, 2, 3):
                epochs = config.phase_epochs[phase - 1]
                if phase < first_phase or epochs == 0:
                    continue
                initial = max(done, config.start_epoch(phase))
                if phase >= 2 and not quantizer_ready:
                    self._initialize_quantizer()
                    quantizer_ready = True
                done, finished = self._run_phase(model, train, callbacks, phase, initial, phase == resume_phase,
                                                 steps_per_epoch, verbose, flags, merged)
                if not finished:
                    break
        finally:
            # Whatever happened, leave the model as it came (phase 2 froze it) for evaluation and export.
            flags.restore()
        return merged

    def _resume(self, saver: LossStateCheckpoint, first_phase: int, done: int, payload: dict,
                saved_phase: int) -> None:
        """Restore the saved parameters through `saver` (k-means and the next phase need them), say where training
        continues, and record the saved phase when it finished but its process was killed before recording it."""
        config = self.config
        # Parameters now; a phase cut short restores the rest (optimizers, counters) at its train begin, when the
        # tags match.
        saver.restore("parameters")
        self.resumed = {"phase": saved_phase, "epoch": done, "batch": payload.get("batch")}
        where = (f"phase {first_phase} ({PHASE_NAMES[first_phase - 1]})" if first_phase <= 3
                 else "the end (every phase is done)")
        self._print(f"Resuming from {self.state_dir}: {done} epoch(s) done; continuing with {where}.")
        if done >= config.end_epoch(saved_phase):
            # The process that finished this phase may have been killed before recording it.
            record = self.records.setdefault(saved_phase, {
                "phase": saved_phase, "name": PHASE_NAMES[saved_phase - 1],
                "epochs": config.phase_epochs[saved_phase - 1], "first_epoch": config.start_epoch(saved_phase),
                "end_epoch": config.end_epoch(saved_phase), "finished": True, "final_metrics": None,
                "note": "finished by an earlier process that stopped before recording it"})
            if not (self.phases_dir / f"phase_{saved_phase}").is_dir():
                record["state"] = str(saver.pin(self.phases_dir / f"phase_{saved_phase}"))
            self._save_records()

    def _run_phase(self, model, train: tf.data.Dataset, callbacks: Sequence[keras.callbacks.Callback], phase: int,
                   initial: int, within: bool, steps_per_epoch: int, verbose, flags: _TrainableFlags,
                   merged: keras.callbacks.History) -> tuple[int, bool]:
        """Train phase `phase` from global epoch `initial` (`within`: resuming inside it) to its end, its epochs
        appended to `merged`, its record saved (and its state pinned when it finished); returns (global epochs
        done, whether it finished)."""
        config = self.config
        start, end = config.start_epoch(phase), config.end_epoch(phase)
        self._set_up(model, phase, steps_per_epoch, flags)
        save = self._phase_saver(phase, callbacks)
        rates = f"Adam {config.learning_rates[phase - 1]:g}, centres SGD {config.centers_learning_rate:g}"
        self._print(f"Phase {phase}/3 ({PHASE_DESCRIPTIONS[phase - 1]}): epochs {initial + 1}-{end}, {rates}"
                    + (f"; resuming after epoch {initial}" if within else "") + ".")
        started = time.time()
        # Keras keeps `_initial_epoch` from a BackupAndRestore restore for every later fit: clear it, so
        # that this phase starts at its own epoch (the phase's callbacks set it again when resuming).
        model._initial_epoch = None
        history = model.fit(train, epochs=end, initial_epoch=initial, verbose=verbose, shuffle=False,
                            steps_per_epoch=steps_per_epoch,
                            callbacks=self._phase_callbacks(phase, callbacks, save))
        for key, values in history.history.items():
            merged.history.setdefault(key, []).extend(values)
        merged.epoch.extend(history.epoch)
        ran = len(history.history.get("loss", []))
        done = initial + ran
        losses = history.history.get("loss", [])
        finished = done >= end and not model.stop_training
        self.records[phase] = {
            "phase": phase, "name": PHASE_NAMES[phase - 1], "description": PHASE_DESCRIPTIONS[phase - 1],
            "epochs": config.phase_epochs[phase - 1], "first_epoch": start, "end_epoch": end,
            "resumed_at_epoch": initial if initial > start else None, "epochs_run": ran,
            "finished": finished, "learning_rate": config.learning_rates[phase - 1],
            "centers_learning_rate": config.centers_learning_rate,
            "trainable": self._trainable_summary(model, phase),
            "final_metrics": {key: _finite_or_none(values[-1]) for key, values in history.history.items()
                              if values},
            "seconds": round(time.time() - started, 3)}
        if finished and save.saved:
            self.records[phase]["state"] = str(save.pin(self.phases_dir / f"phase_{phase}"))
        self._save_records()
        if not finished:
            reason = "non-finite loss" if losses and not math.isfinite(losses[-1]) else "a callback stopped it"
            self._print(f"Phase {phase} stopped at epoch {done} ({reason}); the later phases do not run. "
                        f"Run again with the same --run_dir to resume.")
        return done, finished

    def _phase_saver(self, phase: int, callbacks: Sequence[keras.callbacks.Callback]) -> LossStateCheckpoint:
        """The checkpoint of phase `phase`'s state (tagged with the phase; phase 3's with the adaptive margins, its
        margin callback created here), saved as often as the caller's BackupAndRestore if any."""
        config, objective = self.config, self.objective
        if phase == 3:
            self.margin_callback = AdaptiveMarginCallback(
                objective.triplet, every_batches=config.margin_update_every,
                share_threshold=config.margin_share_threshold, multiplier=config.margin_multiplier,
                max_margin=config.margin_max, log_dir=str(self.log_dir), verbose=0)
        stateful = {"margins": AdaptiveMarginState(self.margin_callback)} if phase == 3 else {}
        save = LossStateCheckpoint(self.state_dir, objective.all_losses(), include_model=True,
                                   tags={"phase": phase}, stateful=stateful, verbose=self.verbose)
        backup = next((c for c in callbacks if isinstance(c, keras.callbacks.BackupAndRestore)), None)
        if backup is not None and isinstance(backup.save_freq, int) and not isinstance(backup.save_freq, bool):
            save.save_freq = backup.save_freq  # save together with the backup (its default: every epoch)
        return save

    @staticmethod
    def _trainable_summary(model, phase: int) -> dict:
        return {"model_weights": len(model.trainable_weights),
                "centers": phase == 1, "quantizer": phase >= 2, "index_ce_heads": phase != 2,
                "adaptive_margins": phase == 3}

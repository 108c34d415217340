"""Seed 003's three training phases (Malali & Keller, Sec. 4.1), each one `model.fit`, resumable after a kill.

Objective (Eq. 5), every term a batch sum, unweighted: L = L_C + L_T + L_CE^I + L_CE^T with
- L_T: `AdaptiveMarginTripletLoss`, symmetric triplet on L2 distances, one random in-batch negative per anchor
  (Sec. 4.1: "matching an image to randomly chosen caption within the batch"), margins m_x, m_y;
- L_C: `SemanticCenterLoss` (Eq. 6, one centre per training image) in phase 1, `QuantizedCenterLoss` (Eq. 7,
  N_q centres and a softmax assignment layer) in phases 2 and 3;
- L_CE: `ImageIndexCrossEntropy`, both embeddings classified into their training image's index.

Phases (paper defaults in brackets; METHODS.md "Semantic centers and adaptive margins"):
  1. unquantized centres, fixed margins m_x = m_y = --margin [0.2], encoders and heads by Adam [2e-4], centres by
     SGD [0.5]; [30 epochs]
  2. the quantizer's centres initialised by k-means over the unquantized centres; *only* the quantizer trains
     (model and classifier heads frozen: `model.trainable = False`, recompiled), assignment layer by Adam [2e-5],
     quantized centres by SGD [0.5]; margins fixed; [15 epochs]
  3. end to end with the quantized centres and adaptive margins (`AdaptiveMarginCallback`: every q [500]
     batches, r = 0.8, c = 1.03, capped); Adam [2e-5]. [10 epochs]
"Reduced the learning rates by a factor of 0.1 every 15 epochs" is applied within each phase to every optimizer
(Adam and the centres' SGD), counting the phase's own epochs: with 30/15/10 epochs only phase 1 decays (at its
epoch 15), which gives the paper's "2e-4 for the first phase, and 2e-5 for the second and third". Each phase
starts fresh optimizers (the phases are separate trainings in the paper). A phase with 0 epochs is skipped; if
phase 1 never ran, the unquantized centres are untrained and the quantizer keeps its random start (the paper's
alternative, "similar results, but a longer convergence").

Image indices. Records carry a dataset-wide `image/id` (Karpathy: the position in the split JSON, splits
interleaved; synthetic: the scene number, splits drawn at random), so the training ids are not 0..N-1. The
centres and classifier heads need one row per *training* image: `ImageIndexMap` maps image/id to its rank among
the training split's sorted ids (centre n belongs to the training image with the n-th smallest id), in the
input pipeline, so every loss sees the same index. The ids are read once from the records (image/id only, no
decoding) and kept in `<run_dir>/phases/image_ids.npy`.

Epochs are global: phase k runs `fit(initial_epoch=start_k, epochs=start_k + epochs_k)`, so TensorBoard's epoch
axis, the validation log and BackupAndRestore continue across phases.

Resuming (`<run_dir>/loss_state`, `kitm.callbacks.loss_state_checkpoint.LossStateCheckpoint`, tags {"phase": k}):
every epoch end writes the model's weights, every loss's parameters and optimizers, the margins and their
counters, and the phase. A new run in the same run directory reads it first: a phase cut short resumes inside
that phase (k-means is not redone; the callback restores everything at train begin, after the phase's
BackupAndRestore has restored the model's optimizer); a finished phase hands its parameters to the next one.
Each phase has its own BackupAndRestore folder (`backup/phase_k`): a backup is only loadable into a model
compiled as when it was written. At each phase end the state is kept as `<run_dir>/phases/phase_k/` (hard links)
and the k-means start as `<run_dir>/phases/quantizer_init.npz` (centroids, labels).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib
import time
from typing import Mapping, Sequence

import keras
import numpy as np
import tensorflow as tf

from kitm.callbacks.adaptive_margin import AdaptiveMarginCallback
from kitm.callbacks.loss_state_checkpoint import AdaptiveMarginState, LossStateCheckpoint, read_state_json
from kitm.errors import KitmDataError
from kitm.losses.adaptive_margin import SAMPLINGS, AdaptiveMarginTripletLoss
from kitm.losses.centers import ImageIndexCrossEntropy, QuantizedCenterLoss, SemanticCenterLoss

__all__ = ["PHASE_NAMES", "CenterPhaseConfig", "ImageIndexMap", "read_image_ids", "training_image_index",
           "CenterObjective",
           "CenterPhaseTrainer", "step_decay"]

PHASE_NAMES = ("unquantized", "quantizer", "end_to_end")
PHASE_DESCRIPTIONS = ("unquantized centres, fixed margins, everything trains",
                      "quantizer only (k-means start), model and heads frozen, fixed margins",
                      "end to end, quantized centres, adaptive margins")
STATE_DIR = "loss_state"
PHASES_DIR = "phases"


# --------------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class CenterPhaseConfig:
    """Everything the three phases need (defaults: the paper's, Sec. 4.1; delta and margin_max are kitm's).

    phase_epochs: epochs of phases 1, 2, 3 (0 skips a phase). learning_rates: Adam rate of each phase.
    centers_learning_rate: SGD rate of the centres (unquantized and quantized). lr_decay_epochs/factor: step
    decay within each phase (0: none). grad_clip_norm: the model optimizer's global clip (None: off).
    delta: the centre hinge radius. num_quantized_centers: N_q. margin: initial m_x = m_y.
    margin_update_every (q), margin_share_threshold (r), margin_multiplier (c), margin_max: Eq. 13.
    loss_weight: one weight for every term (the paper: 1). seed: negatives' sampler and k-means.
    triplet_sampling: the triplet's negatives, "random" (the paper, Sec. 4.1: one random in-batch negative per
    anchor), "hardest", "easiest" or "all" (the sum over the batch's negatives; AdaptiveMarginTripletLoss).
    """

    phase_epochs: tuple[int, int, int] = (30, 15, 10)
    learning_rates: tuple[float, float, float] = (2e-4, 2e-5, 2e-5)
    centers_learning_rate: float = 0.5
    lr_decay_epochs: int = 15
    lr_decay_factor: float = 0.1
    grad_clip_norm: float | None = 2.0
    delta: float = 0.1
    num_quantized_centers: int = 1000
    margin: float = 0.2
    margin_update_every: int = 500
    margin_share_threshold: float = 0.8
    margin_multiplier: float = 1.03
    margin_max: float = 1.0
    loss_weight: float = 1.0
    seed: int = 0
    triplet_sampling: str = "random"

    def __post_init__(self):
        epochs = tuple(self.phase_epochs)
        if len(epochs) != 3 or any(isinstance(e, bool) or int(e) != e or e < 0 for e in epochs):
            raise ValueError(f"phase_epochs must be three integers >= 0; got {self.phase_epochs!r}.")
        if sum(epochs) == 0:
            raise ValueError("phase_epochs are all 0: no phase to train.")
        object.__setattr__(self, "phase_epochs", tuple(int(e) for e in epochs))
        rates = tuple(float(r) for r in self.learning_rates)
        if len(rates) != 3 or not all(r >= 0 for r in rates):
            raise ValueError(f"learning_rates must be three rates >= 0; got {self.learning_rates!r}.")
        object.__setattr__(self, "learning_rates", rates)
        for name in ("centers_learning_rate", "delta", "margin", "loss_weight"):
            if not float(getattr(self, name)) >= 0:
                raise ValueError(f"{name} must be >= 0; got {getattr(self, name)!r}.")
        for name in ("num_quantized_centers", "margin_update_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or int(value) != value or value < 1:
                raise ValueError(f"{name} must be a positive integer; got {value!r}.")
        if not 0.0 <= self.margin_share_threshold <= 1.0:
            raise ValueError(f"margin_share_threshold must be in [0, 1]; got {self.margin_share_threshold}.")
        if not self.margin_multiplier > 1.0:
            raise ValueError(f"margin_multiplier must be > 1; got {self.margin_multiplier}.")
        if not self.margin_max >= self.margin or not self.margin_max > 0:
            raise ValueError(f"margin_max ({self.margin_max}) must be > 0 and >= the initial margin ({self.margin}).")
        if self.triplet_sampling not in SAMPLINGS:
            raise ValueError(f"triplet_sampling must be one of {SAMPLINGS}; got {self.triplet_sampling!r}.")
        if self.lr_decay_epochs < 0 or not 0.0 <= self.lr_decay_factor <= 1.0:
            raise ValueError(f"lr_decay_epochs must be >= 0 and lr_decay_factor in [0, 1]; got "
                             f"{self.lr_decay_epochs}, {self.lr_decay_factor}.")

    def start_epoch(self, phase: int) -> int:
        """The global epoch at which phase `phase` (1-based) starts."""
        return sum(self.phase_epochs[:phase - 1])

    def end_epoch(self, phase: int) -> int:
        return sum(self.phase_epochs[:phase])

    @property
    def total_epochs(self) -> int:
        return sum(self.phase_epochs)


def step_decay(learning_rate: float, epochs: int, steps_per_epoch: int, decay_epochs: int, factor: float):
    """`learning_rate * factor ** floor(epoch / decay_epochs)` over a phase of `epochs` epochs, as a Keras
    schedule on the optimizer's step count (a plain float when it never decays)."""
    if not decay_epochs or decay_epochs >= epochs:
        return float(learning_rate)
    boundaries = list(range(decay_epochs, epochs, decay_epochs))
    values = [float(learning_rate) * factor ** i for i in range(len(boundaries) + 1)]
    return keras.optimizers.schedules.PiecewiseConstantDecay([b * steps_per_epoch for b in boundaries], values)


# --------------------------------------------------------------------------------------------------
# Image ids -> training positions
# --------------------------------------------------------------------------------------------------

def read_image_ids(data_dir: str | os.PathLike, split: str = "train") -> np.ndarray:
    """Every record's `image/id` in `split` (record order), parsing that one feature (images are not decoded)."""
    from kitm.data import schema
    from kitm.data.records import read_records

    info = schema.load_info(data_dir)
    paths = info.shard_paths(data_dir, split)
    spec = {"image/id": tf.io.FixedLenFeature([], tf.int64)}
    dataset = read_records(paths, deterministic=True).map(
        lambda path, record: tf.io.parse_single_example(record, spec)["image/id"],
        num_parallel_calls=tf.data.AUTOTUNE).batch(8192)
    ids = np.concatenate([batch.numpy() for batch in dataset]) if info.num_images(split) else np.zeros([0], np.int64)
    if ids.size != info.num_images(split):
        raise KitmDataError(f"{data_dir}: split '{split}' has {ids.size} records but dataset.json says "
                            f"{info.num_images(split)} images.")
    return ids.astype(np.int64)


def training_image_index(data_dir: str | os.PathLike, run_dir: str | os.PathLike | None = None,
                         split: str = "train") -> "ImageIndexMap":
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
        _write_atomically(cache, lambda handle: np.save(handle, ids))
    return ImageIndexMap(ids, source)


class ImageIndexMap:
    """`image/id` -> position 0..N-1 of that image among the training images (rank of its id; module docstring).

    `positions(ids)` works in the graph (a binary search in the sorted ids, no lookup-table resource, so it
    runs in tf.data under any strategy) and stops with an error naming `source` for an id not in the split.
    """

    def __init__(self, image_ids: Sequence[int], source: str = "the training split"):
        ids = np.sort(np.asarray(image_ids, dtype=np.int64).reshape(-1))
        if ids.size == 0:
            raise KitmDataError(f"{source} has no images.")
        repeated = ids[1:][ids[1:] == ids[:-1]]
        if repeated.size:
            raise KitmDataError(f"{source}: image/id {int(repeated[0])} occurs more than once; ids must be unique.")
        self.sorted_ids = ids
        self.source = source
        # Ids already 0..N-1 (in any record order): the map is the identity and costs nothing.
        self.identity = bool(ids[0] == 0 and ids[-1] == ids.size - 1)

    @property
    def num_images(self) -> int:
        return int(self.sorted_ids.size)

    def positions(self, image_ids) -> tf.Tensor:
        ids = tf.cast(image_ids, tf.int64)
        if self.identity:
            return tf.cast(ids, tf.int32)
        table = tf.constant(self.sorted_ids)
        flat = tf.reshape(ids, [-1])
        position = tf.searchsorted(table, flat, side="left")
        found = tf.equal(tf.gather(table, tf.minimum(position, self.num_images - 1)), flat)
        check = tf.debugging.assert_equal(
            found, tf.ones_like(found),
            message=f"an image/id of the batch is not among the {self.num_images} ids of {self.source}")
        with tf.control_dependencies([check]):
            return tf.reshape(tf.cast(position, tf.int32), tf.shape(ids))

    def apply(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
        """Map `y["image_index"]` of (x, y) training batches to positions."""

        def remap(x, y):
            y = dict(y)
            y["image_index"] = self.positions(y["image_index"])
            return x, y

        if self.identity:
            return dataset
        return dataset.map(remap, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)

    def describe(self) -> dict:
        return {"num_images": self.num_images, "identity": self.identity,
                "min_id": int(self.sorted_ids[0]), "max_id": int(self.sorted_ids[-1]),
                "rule": "image/id" if self.identity else "rank of image/id among the training split's sorted ids"}


# --------------------------------------------------------------------------------------------------
# The objective
# --------------------------------------------------------------------------------------------------

class CenterObjective:
    """The four losses of seed 003, built once (inside `strategy.scope()`) and shared by the phases.

    Keys (also the names their terms are logged under): "triplet", "centers" (phase 1), "quantized" (phases 2,
    3), "index_ce".
    """

    def __init__(self, config: CenterPhaseConfig, num_images: int, embedding_dim: int):
        self.config = config
        self.num_images = int(num_images)
        if config.num_quantized_centers > self.num_images:
            raise ValueError(f"num_quantized_centers={config.num_quantized_centers} is more than the "
                             f"{self.num_images} training images whose centres k-means groups.")
        self.triplet = AdaptiveMarginTripletLoss(config.margin, config.margin, sampling=config.triplet_sampling,
                                                 seed=config.seed, name="triplet")
        self.centers = SemanticCenterLoss(self.num_images, embedding_dim, delta=config.delta,
                                          centers_learning_rate=config.centers_learning_rate, name="centers")
        self.quantized = QuantizedCenterLoss(config.num_quantized_centers, embedding_dim, delta=config.delta,
                                             centers_learning_rate=config.centers_learning_rate, name="quantized")
        self.index_ce = ImageIndexCrossEntropy(self.num_images, embedding_dim, name="index_ce")

    def all_losses(self) -> dict:
        return {"triplet": self.triplet, "centers": self.centers, "quantized": self.quantized,
                "index_ce": self.index_ce}

    def phase_losses(self, phase: int) -> dict:
        # Phase 2 keeps the triplet and the heads (frozen, no gradient reaches them) so that every term and the
        # total stay comparable on TensorBoard across phases.
        centre = self.centers if phase == 1 else self.quantized
        return {"triplet": self.triplet, centre.name: centre, "index_ce": self.index_ce}


# --------------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------------

def _write_atomically(path: pathlib.Path, write) -> None:
    """`write(handle)` into `<path>.partial`, then rename over `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    with open(partial, "wb") as handle:
        write(handle)
    os.replace(partial, path)


def _write_json(path: pathlib.Path, payload) -> None:
    _write_atomically(path, lambda handle: handle.write(json.dumps(payload, indent=2, sort_keys=True,
                                                                   default=_plain).encode()))


def _plain(value):
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    return str(value)


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


# --------------------------------------------------------------------------------------------------
# The procedure
# --------------------------------------------------------------------------------------------------

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
            return step_decay(value, epochs, steps_per_epoch, config.lr_decay_epochs, config.lr_decay_factor)

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
                          loss_weights={name: self.config.loss_weight for name in losses}, monitors=self.monitors)

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
            _write_atomically(self.phases_dir / "quantizer_init.npz",
                              lambda handle: np.savez(handle, centroids=centroids, labels=labels))
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
        _write_json(self.phases_dir / "phases.json",
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
        config, objective = self.config, self.objective
        if steps_per_epoch is None:
            cardinality = int(train.cardinality())
            if cardinality < 1:
                raise ValueError("The training dataset has no known length; pass steps_per_epoch.")
            steps_per_epoch = cardinality
        flags = _TrainableFlags(model)
        first_phase, done, payload = self._starting_point()
        saved_phase = int(payload["tags"]["phase"]) if payload is not None else 0
        saver = LossStateCheckpoint(self.state_dir, objective.all_losses(), include_model=True, verbose=self.verbose)
        saver.set_model(model)
        if payload is not None:
            # Parameters now (k-means and the next phase need them); a phase cut short restores the rest (optimizers,
            # counters) at its train begin, when the tags match.
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
                start, end = config.start_epoch(phase), config.end_epoch(phase)
                initial = max(done, start)
                within = phase == resume_phase
                if phase >= 2 and not quantizer_ready:
                    self._initialize_quantizer()
                    quantizer_ready = True
                self._set_up(model, phase, steps_per_epoch, flags)
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
                    "epochs": epochs, "first_epoch": start, "end_epoch": end,
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
                    break
        finally:
            # Whatever happened, leave the model as it came (phase 2 froze it) for evaluation and export.
            flags.restore()
        return merged

    @staticmethod
    def _trainable_summary(model, phase: int) -> dict:
        return {"model_weights": len(model.trainable_weights),
                "centers": phase == 1, "quantizer": phase >= 2, "index_ce_heads": phase != 2,
                "adaptive_margins": phase == 3}

"""A checkpoint of the state that losses own, written atomically and restored when training starts again.

Why Keras' BackupAndRestore is not enough
-----------------------------------------
`keras.callbacks.BackupAndRestore` writes `model.save_weights` and the epoch reached. In Keras 3 that file
holds the model, its optimizer and, by accident of attribute walking, the Keras layers and optimizers of the
losses the model is *currently compiled with* (`DualEncoder.loss_functions`). It misses:
- plain `tf.Variable`s of a loss: the adaptive margins m_x, m_y of `AdaptiveMarginTripletLoss` and its
  per-replica counters of satisfied/used negatives (Eqs. 11-13, Malali & Keller);
- the counters of the callbacks that drive them (`AdaptiveMarginCallback`: batches since the last update);
- losses that are not compiled at the moment (Malali & Keller's unquantized centres during the quantized phases, the
  quantizer during the first phase);
- which step of a multi-`fit` procedure the run had reached (Malali & Keller's phase).
And a backup is only readable by a model compiled exactly as when it was written, which a procedure that
recompiles between phases does not offer.

What this callback writes
-------------------------
At every epoch end (or every `save_freq` batches, like BackupAndRestore) one *state*: a `tf.train.Checkpoint`
(on TensorFlow; on JAX and PyTorch, whose Keras variables tf.train.Checkpoint does not see, a numpy archive
`variables.npz` of the same variables by path and position, which every backend reads) with two parts plus a JSON
file,
- parameters: the weights of every Keras layer and the variables the losses hold (centre tables, the quantizer,
  classifier heads, margins) and, with `include_model=True`, the model's weights (not its optimizer);
- local state: the losses' optimizers (slots and iteration counts);
- `state.json`: the epoch and batch reached, the caller's `tags` (e.g. {"phase": 2}), the replica-summed
  values of sync-on-read counters, the `get_state()` of registered stateful objects (callbacks), and the shapes
  of every group of variables, checked before a restore so that a foreign state is refused by name.
Variables are saved as flat lists per layer/optimizer (`layer.weights`, `optimizer.variables`) and matched by
position: TensorFlow's object-graph tracking misses some Keras 3 sublayers (a layer list built with `+=`).

Layout of `directory` (every write is a new directory, renamed into place only once complete):
    state-000007/                    the newest complete state: ckpt.index, ckpt.data-* (or variables.npz),
                                     state.json
    state-000008.partial-<pid>/      a state being written; ignored (and removed) by later runs
A process killed at any moment leaves the previous complete state in place; older states are deleted after
the new one is in place.

Restoring
---------
At `on_train_begin`, if a state exists *and its tags equal this callback's tags*, everything is restored
(parameters, optimizers, counters, stateful objects) and `model._initial_epoch` is set to the epoch reached, as
BackupAndRestore does, so `fit` continues there. Put this callback after BackupAndRestore (its own restore
then wins) and after callbacks whose `on_train_begin` resets state this one restores (AdaptiveMarginCallback
resets its counters). A state with other tags (another phase) is left alone: the caller decides what carries
over, with `restore(parts="parameters")`.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import re
import shutil
import warnings
from typing import Mapping

import keras
import numpy as np

from kitm.callbacks.every_q_batches import sync_model_state, to_numpy
from kitm.distribute.backend import backend_name, tensorflow_module
from kitm.distribute.replica_local import (assign_replica_summed, is_sync_on_read, is_variable,
                                          replica_summed_value)
from kitm.distribute.replicas import writes_checkpoints
from kitm.errors import KitmDataError
from kitm.files import atomic_path

__all__ = ["LossStateCheckpoint", "loss_state", "latest_state", "read_state_json", "AdaptiveMarginState"]

STATE_JSON = "state.json"
CHECKPOINT_PREFIX = "ckpt"
ARRAYS_FILE = "variables.npz"  # the variables off TensorFlow (see _write_variables)
_STATE_NAME = re.compile(r"^state-(\d{6,})$")


# --------------------------------------------------------------------------------------------------
# What a loss owns
# --------------------------------------------------------------------------------------------------

def loss_state(loss) -> tuple[dict, dict, dict]:
    """(parameters, optimizers, sync-on-read counters) that `loss` holds as attributes, by attribute name.

    Parameters are Keras layers and variables (centre tables, quantizers, heads, margins); optimizers are
    Keras optimizers; counters are `tf.VariableSynchronization.ON_READ` variables (per-replica accumulators,
    saved as their replica sum: a checkpoint of such a variable under MirroredStrategy would split an integer
    sum over the replicas on restore).
    """
    parameters, optimizers, counters = {}, {}, {}
    for name, value in sorted(vars(loss).items()):
        if isinstance(value, keras.optimizers.Optimizer):
            optimizers[name] = value
        elif isinstance(value, keras.layers.Layer):
            parameters[name] = value
        elif is_variable(value):
            (counters if is_sync_on_read(value) else parameters)[name] = value
    return parameters, optimizers, counters


# --------------------------------------------------------------------------------------------------
# Writing and reading the variables
# --------------------------------------------------------------------------------------------------

def _flat_variables(tree, prefix: str = "") -> dict:
    """{"losses/centers/table/0": variable, ...}: a nested dict of variable lists, flattened by path and position."""
    if isinstance(tree, dict):
        flat = {}
        for key, value in tree.items():
            flat.update(_flat_variables(value, f"{prefix}/{key}" if prefix else str(key)))
        return flat
    return {f"{prefix}/{position}": variable for position, variable in enumerate(tree)}


def _write_variables(directory: pathlib.Path, tree: dict) -> None:
    """Write `tree`'s variables into `directory`: a tf.train.Checkpoint on TensorFlow (distributed variables
    included), a numpy archive by path elsewhere: tf.train.Checkpoint does not track JAX's or PyTorch's Keras
    variables, and writes an empty checkpoint of them without a word."""
    tf = tensorflow_module()  # checkpoints of TensorFlow variables: TensorFlow's job
    if tf is not None:
        tf.train.Checkpoint(**tree).write(str(directory / CHECKPOINT_PREFIX))
        return
    arrays = {key: to_numpy(variable) for key, variable in _flat_variables(tree).items()}
    with open(directory / ARRAYS_FILE, "wb") as handle:
        np.savez(handle, **arrays)


def _read_variables(path: pathlib.Path, tree: dict, strict: bool) -> None:
    """Assign `tree`'s variables from the state at `path` (either format of `_write_variables`); with `strict`
    every variable must be in it."""
    arrays_file = path / ARRAYS_FILE
    if not arrays_file.is_file():
        tf = tensorflow_module()  # a state written on TensorFlow
        if tf is None:
            raise KitmDataError(f"The state in {path} was written on TensorFlow (a tf.train.Checkpoint, which cannot "
                                f"assign {backend_name()}'s variables); restore it with KERAS_BACKEND="
                                "tensorflow, or start this part of training again.")

        checkpoint = tf.train.Checkpoint(**tree).read(str(path / CHECKPOINT_PREFIX)).expect_partial()
        if strict:
            checkpoint.assert_existing_objects_matched()
        return
    with np.load(arrays_file) as arrays:
        for key, variable in _flat_variables(tree).items():
            if key in arrays.files:
                variable.assign(arrays[key].astype(keras.backend.standardize_dtype(variable.dtype)))
            elif strict:
                raise KitmDataError(f"The state in {path} has no value for {key}.")


# --------------------------------------------------------------------------------------------------
# Reading a state directory
# --------------------------------------------------------------------------------------------------

def _states(directory: pathlib.Path) -> list[tuple[int, pathlib.Path]]:
    if not directory.is_dir():
        return []
    found = []
    for path in directory.iterdir():
        match = _STATE_NAME.match(path.name)
        if match and path.is_dir() and (path / STATE_JSON).is_file():
            found.append((int(match.group(1)), path))
    return sorted(found)


def latest_state(directory: str | os.PathLike) -> pathlib.Path | None:
    """The newest complete state directory under `directory`, or None."""
    states = _states(pathlib.Path(directory))
    return states[-1][1] if states else None


def read_state_json(directory: str | os.PathLike) -> dict | None:
    """`state.json` of the newest complete state (epoch, batch, tags, ...), or None when there is none.

    `directory` may also be one state directory itself.
    """
    directory = pathlib.Path(directory)
    state = directory if (directory / STATE_JSON).is_file() else latest_state(directory)
    if state is None:
        return None
    try:
        return json.loads((state / STATE_JSON).read_text())
    except (OSError, ValueError) as error:
        raise KitmDataError(f"{state / STATE_JSON} is unreadable ({error}); delete {state} to start that part "
                         "of training again.") from error


def _jsonable(value):
    """NaN/inf become None (strict JSON); numpy scalars and arrays become Python values."""
    if isinstance(value, dict):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(item) for item in value]
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist())
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    return value


# --------------------------------------------------------------------------------------------------
# Stateful callbacks
# --------------------------------------------------------------------------------------------------

class AdaptiveMarginState:
    """`get_state()`/`set_state()` for a `kitm.callbacks.AdaptiveMarginCallback`: its batch counters and the
    last window's shares (the margins and the negatives' counts live in the loss and are saved with it)."""

    def __init__(self, callback):
        self.callback = callback

    def get_state(self) -> dict:
        counter = self.callback.counter
        return {"total": counter.total, "since_update": counter.since_update, "updates": len(self.callback.updates),
                "last_shares": dict(self.callback.last_shares)}

    def set_state(self, state: Mapping) -> None:
        counter = self.callback.counter
        counter.total = int(state["total"])
        counter.since_update = int(state["since_update"])
        shares = state.get("last_shares") or {}
        self.callback.last_shares = {axis: math.nan if shares.get(axis) is None else float(shares[axis])
                                     for axis in ("x", "y")}


# --------------------------------------------------------------------------------------------------
# The callback
# --------------------------------------------------------------------------------------------------

class LossStateCheckpoint(keras.callbacks.Callback):
    """Save and restore what losses own (module docstring).

    Args:
      directory: where the states go (one folder per run; nothing else should write there).
      losses: {name: loss} to save; None: the model's `loss_functions` when training starts. Give every loss
        whose state must survive, compiled or not.
      include_model: also save the model's layers (weights only), so that a state is complete on its own.
      tags: JSON-able values recorded with each state; a state is restored at train begin only when its tags
        equal these (e.g. {"phase": 2}).
      stateful: {name: object with get_state() -> dict and set_state(dict)}, e.g. `AdaptiveMarginState(cb)`.
      save_freq: "epoch" or a number of batches (as `keras.callbacks.BackupAndRestore`).
      restore_on_train_begin: restore a matching state at train begin (default True).
      verbose: 1 prints each restore.
    """

    def __init__(self, directory: str | os.PathLike, losses: Mapping | None = None, *, include_model: bool = False,
                 tags: Mapping | None = None, stateful: Mapping | None = None, save_freq="epoch",
                 restore_on_train_begin: bool = True, verbose: int = 1):
        super().__init__()
        self.directory = pathlib.Path(directory)
        self.losses = dict(losses) if losses is not None else None
        self.include_model = bool(include_model)
        self.tags = _jsonable(dict(tags or {}))
        self.stateful = dict(stateful or {})
        for name, obj in self.stateful.items():
            if not (callable(getattr(obj, "get_state", None)) and callable(getattr(obj, "set_state", None))):
                raise ValueError(f"stateful[{name!r}] needs get_state() and set_state(state); got "
                                 f"{type(obj).__name__}.")
        if save_freq != "epoch" and (isinstance(save_freq, bool) or not isinstance(save_freq, int) or save_freq < 1):
            raise ValueError(f"save_freq must be 'epoch' or a positive number of batches; got {save_freq!r}.")
        self.save_freq = save_freq
        self.restore_on_train_begin = bool(restore_on_train_begin)
        self.verbose = int(verbose)
        self.restored: dict | None = None  # state.json of the state restored at train begin
        self.saved: list[pathlib.Path] = []
        self._epoch = 0
        self._batches_since_save = 0
        self._last_batch = -1

    # -- what is saved ---------------------------------------------------------------------------
    def _losses(self) -> dict:
        if self.losses is not None:
            return self.losses
        losses = getattr(self.model, "loss_functions", None) if self.model is not None else None
        if not losses:
            raise ValueError("LossStateCheckpoint has no losses: pass losses={...} or compile a DualEncoder.")
        return dict(losses)

    @staticmethod
    def _variables(obj) -> list:
        """The variables of a layer (`weights`), an optimizer (`variables`: step count, rate, slots) or a variable.

        Flat lists, matched by position: TensorFlow's object-graph tracking does not see every Keras 3 sublayer
        (SmallConvEncoder's blocks, a list built with `+=`, were missing from a checkpoint of the model object);
        Keras' own lists are complete.
        """
        if isinstance(obj, keras.optimizers.Optimizer):
            return list(obj.variables)
        if isinstance(obj, keras.layers.Layer):
            return list(obj.weights)
        return [obj]

    def _groups(self) -> tuple[dict, dict, dict]:
        """(parameters, optimizers, counters): {"model": [...], "losses": {loss: {attribute: [...]}}},
        {"optimizers": {loss: {attribute: [...]}}} and {loss: {attribute: sync-on-read variable}}."""
        losses, optimizers, counters = {}, {}, {}
        for name, loss in self._losses().items():
            owned, opts, accumulators = loss_state(loss)
            if owned:
                losses[name] = {attribute: self._variables(obj) for attribute, obj in owned.items()}
            if opts:
                optimizers[name] = {attribute: self._variables(obj) for attribute, obj in opts.items()}
            if accumulators:
                counters[name] = accumulators
        parameters = {"losses": losses}
        if self.include_model:
            if self.model is None:
                raise ValueError("include_model=True needs the model: call set_model first.")
            parameters["model"] = list(self.model.weights)
        return parameters, {"optimizers": optimizers}, counters

    @staticmethod
    def _shapes(tree, prefix: str = "") -> dict[str, list]:
        """{"losses/centers/table": [[N, D]], ...}: the shapes of every group, to check a state before reading."""
        if isinstance(tree, dict):
            shapes = {}
            for key, value in tree.items():
                shapes.update(LossStateCheckpoint._shapes(value, f"{prefix}/{key}" if prefix else str(key)))
            return shapes
        return {prefix: [list(map(int, v.shape)) for v in tree]}

    # -- writing ---------------------------------------------------------------------------------
    def _should_write(self) -> bool:
        # Under multi-worker strategies only the chief keeps its checkpoint (the others write and discard).
        return writes_checkpoints(self.model)

    def save(self, epoch: int, batch: int | None = None) -> pathlib.Path | None:
        """Write one state: `epoch` completed epochs (and `batch` batches into the next, if given).

        The state is written into `state-NNNNNN.partial-<pid>/` and renamed to `state-NNNNNN/` once complete;
        then older states are deleted. Returns the new state directory (None on non-chief workers).
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        states = _states(self.directory)
        number = states[-1][0] + 1 if states else 0
        final = self.directory / f"state-{number:06d}"
        partial = self.directory / f"{final.name}.partial-{os.getpid()}"
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir()
        try:
            parameters, optimizers, counters = self._groups()
            _write_variables(partial, {**parameters, **optimizers})
            payload = {
                "epoch": int(epoch), "batch": None if batch is None else int(batch), "tags": self.tags,
                "counters": {name: {attribute: replica_summed_value(variable).tolist()
                                    for attribute, variable in accumulators.items()}
                             for name, accumulators in counters.items()},
                "stateful": {name: obj.get_state() for name, obj in self.stateful.items()},
                "shapes": {**self._shapes(parameters), **self._shapes(optimizers)},
            }
            (partial / STATE_JSON).write_text(json.dumps(_jsonable(payload), indent=1, sort_keys=True))
            if not self._should_write():
                shutil.rmtree(partial, ignore_errors=True)
                return None
            # Its own temporary-then-rename rather than kitm.files.atomic_path: a non-chief worker writes the state
            # (every worker must take part in the checkpoint's collective ops) and then discards it unrenamed.
            os.rename(partial, final)  # atomic: the name appears only with its whole content
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        for _, older in states:
            shutil.rmtree(older, ignore_errors=True)
        self.saved.append(final)
        return final

    def pin(self, destination: str | os.PathLike) -> pathlib.Path:
        """Keep a copy of the newest state at `destination` (hard links where possible, so no data is copied);
        written as `<destination>.partial` and renamed. Replaces an existing `destination`."""
        source = latest_state(self.directory)
        if source is None:
            raise ValueError(f"No complete state under {self.directory} to pin.")
        destination = pathlib.Path(destination)
        def link(src, dst):
            try:
                os.link(src, dst)
            except OSError:  # another filesystem, or links not allowed
                shutil.copy2(src, dst)

        with atomic_path(destination) as partial:
            shutil.copytree(source, partial, copy_function=link)
        return destination

    # -- reading ---------------------------------------------------------------------------------
    def restore(self, parts: str = "all", state: str | os.PathLike | None = None) -> dict | None:
        """Restore the newest state (or `state`, a state directory); returns its state.json, None if none.

        parts="parameters": the model's layers (with include_model) and the losses' layers and variables only;
        "all": also the optimizers, the replica-summed counters and the stateful objects. Every parameter of
        the current losses must be in the state (a clear error otherwise); optimizers not in it stay as they are.
        """
        if parts not in ("all", "parameters"):
            raise ValueError(f"parts must be 'all' or 'parameters'; got {parts!r}.")
        path = pathlib.Path(state) if state is not None else latest_state(self.directory)
        if path is None:
            return None
        payload = read_state_json(path)
        parameters, optimizers, counters = self._groups()
        saved_shapes = payload.get("shapes", {})
        wanted = self._shapes(parameters)
        wrong = {key: (shape, saved_shapes.get(key)) for key, shape in wanted.items() if saved_shapes.get(key) != shape}
        if wrong:
            key, (shape, found) = sorted(wrong.items())[0]
            raise KitmDataError(f"The state in {path} does not fit the current model and losses: {key} has variables "
                                f"of shapes {shape} here but {found if found is not None else 'is absent'} in the "
                                f"state ({len(wrong)} group(s) differ). Was it written by another objective or model?")
        _read_variables(path, parameters, strict=True)
        if parts == "all":
            # Optimizers of the same phase have the same variables; ones that differ stay as they are.
            for name, attributes in optimizers["optimizers"].items():
                for attribute, variables in attributes.items():
                    key = f"optimizers/{name}/{attribute}"
                    if saved_shapes.get(key) == self._shapes(variables, key)[key]:
                        _read_variables(path, {"optimizers": {name: {attribute: variables}}}, strict=False)
            saved = payload.get("counters", {})
            for name, accumulators in counters.items():
                for attribute, variable in accumulators.items():
                    value = saved.get(name, {}).get(attribute)
                    if value is None:
                        continue
                    # The whole sum on the first replica: reading the variable (a sum over replicas) gives it back.
                    assign_replica_summed(variable, value)
            for name, obj in self.stateful.items():
                if name in payload.get("stateful", {}):
                    obj.set_state(payload["stateful"][name])
        return payload

    # -- Keras hooks -----------------------------------------------------------------------------
    def on_train_begin(self, logs=None):
        self._batches_since_save = 0
        self._last_batch = -1
        self.restored = None
        if self.directory.is_dir() and self._should_write():
            for stale in self.directory.glob("state-*.partial-*"):  # left by a killed process
                shutil.rmtree(stale, ignore_errors=True)
        if not self.restore_on_train_begin:
            return
        payload = read_state_json(self.directory)
        if payload is None or payload.get("tags") != self.tags:
            return
        self.restored = self.restore("all")
        epoch = int(self.restored["epoch"])
        # As BackupAndRestore does: fit() starts at the epoch reached.
        self.model._initial_epoch = epoch
        if self.verbose:
            print(f"{type(self).__name__}: restored {latest_state(self.directory)} (epoch {epoch}, "
                  f"tags {self.tags}).")

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = int(epoch)
        self._last_batch = -1

    def _finite(self, logs) -> bool:
        loss = (logs or {}).get("loss")
        if loss is not None and not np.all(np.isfinite(np.asarray(loss, dtype=np.float64))):
            warnings.warn(f"{type(self).__name__}: loss is {loss}; the last good state in {self.directory} is kept.")
            return False
        return True

    def on_train_batch_end(self, batch, logs=None):
        if self.save_freq == "epoch":
            return
        # Count steps from the batch indices, so that steps_per_execution > 1 still counts every step.
        self._batches_since_save += max(int(batch) - self._last_batch, 1)
        self._last_batch = int(batch)
        if self._batches_since_save >= self.save_freq and self._finite(logs):
            self._batches_since_save = 0
            sync_model_state(self.model)  # JAX: the values fit's stateless loop holds (every_q_batches)
            self.save(self._epoch, batch=int(batch) + 1)

    def on_epoch_end(self, epoch, logs=None):
        if self.save_freq == "epoch" and self._finite(logs):
            self.save(int(epoch) + 1)

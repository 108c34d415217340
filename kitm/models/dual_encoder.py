"""DualEncoder: an image tower and a text tower projected into one L2-normalised space.

Training sums weighted loss terms: `compile(optimizer, losses={name: loss}, loss_weights={name: w})`, each
loss a `kitm.losses.RetrievalLoss`. Every named term of every loss is its own metric (`<loss>/<term>`), so
TensorBoard shows what each part of the objective does; "loss" is the weighted total.

A loss may own trainable parameters that are not part of the encoders (Malali & Keller's semantic centres, its
quantizer, its image-index classifier heads) together with the optimizer that updates them, listed by
`loss.optimizer_groups()` -> [(optimizer, variables)]. The training step takes one gradient tape over the
weighted total and applies the model's optimizer to the model's weights and each group's optimizer to
its own variables.

A loss may instead hand its trainable variables to the model's optimizer (CLIP's learnable temperature and
SigLIP's bias, which CLIP and SigLIP train with the encoders' optimizer): it sets `uses_model_optimizer = True`
and lists them in `loss.trainable_variables`. `optimizer_variables()` is then the model's trainable weights plus
those, and the model's optimizer is built over and updates all of them in the same step.

Under a mixed-precision policy (`kitm.training.precision`) the towers compute in float16/bfloat16 and the
embeddings are cast to float32 before the L2 normalisation, so similarities and losses are float32; with a
`LossScaleOptimizer` (mixed_float16) the model's weights take the scaled loss's gradients and the loss-owned
groups the unscaled loss's.

Global negatives (`kitm.losses.global_batch`): a loss built with `negatives="global"` gathers the other replicas'
embeddings itself; its share of the total is scaled by `replica_share` (undivided for a "sum" loss, so the update is
that of one device with the global batch), the others' by 1/R as Keras scales its own losses.

Gradient caching (`compile(grad_cache_chunk=N)`; Gao et al. 2021, "Scaling Deep Contrastive Learning Batch Size
under Memory Limited Setup"): the step embeds the per-replica batch of b rows in chunks of N without a tape (no
activations kept), computes the loss over the whole batch (global negatives included) and its gradient g with
respect to the embeddings, then embeds each chunk again under a tape and takes the gradient of <embeddings, g>,
summed over the chunks. By the chain rule that is the gradient of the loss; the activations held are one chunk's.
Random layers (dropout) and layer state (batch-norm statistics) are put back to where they stood before the first
pass, so that the second pass recomputes exactly the first's embeddings. Losses that train state of their own from
the batch (`optimizer_groups`, the semantic centres) cannot be replayed and are refused. Details and figures:
docs/scale.md, "Gradient caching".

Backends: on TensorFlow the training step is the one above (`train_step`, `compute_gradients`). On JAX and
PyTorch Keras' own trainer takes the step over `compute_loss` (keras.ops); the variables losses hand to the model's
optimizer join `trainable_variables` there (not its saved weights), the losses' own state joins
`non_trainable_variables` on JAX, and what only the TensorFlow step does is refused at `compile`
(kitm.distribute.steps). Global negatives run on TensorFlow (the `tf.distribute` gather) and on JAX, where
`keras.distribution.DataParallel` hands the compiled step the global batch as one sharded array, over which
`compute_loss` runs once: the step of one device with the whole batch (`kitm.losses.global_batch`; docs/scale.md).

`compile(monitors=[...])` adds batch statistics that are not losses (e.g.
`kitm.metrics.RelevanceStatistics`): Keras metrics updated with `update_state(y_true, y_pred)`
on every step and logged like the loss terms.
"""

from __future__ import annotations

from typing import Mapping

import keras
import numpy as np
from keras import layers, ops

from kitm.distribute import steps
from kitm.distribute.backend import on_tensorflow
from kitm.distribute.replica_local import assign_replica_summed, is_variable, replica_summed_value
from kitm.distribute.replicas import num_replicas_in_sync, replica_share
from kitm.losses.base import RetrievalLoss, reduce_per_row, scale_for_replicas


def _appended(variables: list, extra) -> list:
    """`variables` followed by those of `extra` not among them (by identity), in order."""
    seen = {id(v) for v in variables}
    return variables + [v for v in extra if id(v) not in seen]


# What Keras' own compile configuration holds that DualEncoder.compile does not take (its objectives are `losses`).
_KERAS_ONLY_COMPILE_KEYS = ("loss", "metrics", "weighted_metrics")
# Keys of the losses' state in a saved model's own variables (`DualEncoder.save_own_variables`); no "/", which an
# HDF5 store would read as a group.
_LOSS_STATE_PREFIX = "loss:"


def _at_least_float32(value):
    """float16 and bfloat16 cast to float32; float32 and float64 kept."""
    dtype = keras.backend.standardize_dtype(value.dtype)
    return value if dtype in ("float32", "float64") else ops.cast(value, "float32")


def _l2_normalize(x):
    """x / max(||x||, 1e-6) along the last axis, as tf.math.l2_normalize computes it (epsilon 1e-12 on ||x||^2)."""
    return x * ops.rsqrt(ops.maximum(ops.sum(ops.square(x), axis=-1, keepdims=True), 1e-12))


def _reduce(values, reduction):
    """`kitm.losses.base.reduce_per_row` in keras.ops: the sum, or the mean (0 for no rows), of a [B] vector."""
    if reduction in (None, "none"):
        return values
    if reduction == "sum":
        return ops.sum(values)
    if reduction in ("sum_over_batch_size", "mean"):
        return ops.divide_no_nan(ops.sum(values), ops.cast(ops.size(values), values.dtype))
    return reduce_per_row(values, reduction)  # raises its error for an unknown reduction


@keras.saving.register_keras_serializable(package="kitm")
class DualEncoder(keras.Model):
    """`call({"image": images or features, "tokens": token ids})` -> `{"image": [B, D], "text": [B, D]}`.

    Args:
        image_encoder: a layer mapping images [B, H, W, 3] in [0, 1] (or features [B, F]) to [B, W_i].
        text_encoder: a layer mapping token ids [B, T] (or a dict of such tensors, a keras-hub text backbone's
            inputs: `kitm.layers.hub_towers`) to [B, W_t].
        embedding_dim: D, the joint space's size.
    """

    def __init__(self, image_encoder: keras.layers.Layer, text_encoder: keras.layers.Layer,
                 embedding_dim: int = 1024, **kwargs):
        super().__init__(**kwargs)
        self.image_encoder = image_encoder
        self.text_encoder = text_encoder
        self.embedding_dim = int(embedding_dim)
        self.image_projection = layers.Dense(self.embedding_dim, name="image_projection")
        self.text_projection = layers.Dense(self.embedding_dim, name="text_projection")
        self.loss_functions: dict[str, RetrievalLoss] = {}
        self.loss_weights_by_name: dict[str, float] = {}
        object.__setattr__(self, "term_trackers", {})
        object.__setattr__(self, "batch_monitors", [])
        self.grad_cache_chunk = 0

    def encode_image(self, images, training=False):
        features = self.image_encoder(images, training=training)
        # float32 before normalising: under mixed precision the similarities and losses stay float32.
        return _l2_normalize(_at_least_float32(self.image_projection(features)))

    def encode_text(self, token_ids, training=False):
        features = self.text_encoder(token_ids, training=training)
        return _l2_normalize(_at_least_float32(self.text_projection(features)))

    def call(self, inputs, training=False):
        return {"image": self.encode_image(inputs["image"], training=training),
                "text": self.encode_text(inputs["tokens"], training=training)}

    def build_from_inputs(self, input_spec) -> None:
        """Create the weights from the pipeline's `x` spec (a dict of `tf.TensorSpec`, or of anything with a `shape`
        and a `dtype`), before training.

        Keras' BackupAndRestore and weight loading need built models; one zero-valued example suffices. Entries
        may be nested (a keras-hub text tower's `tokens` is a dict of its backbone's inputs).
        """
        example = keras.tree.map_structure(
            lambda spec: np.zeros([1] + list(spec.shape)[1:], keras.backend.standardize_dtype(spec.dtype)),
            dict(input_spec))
        self(example, training=False)

    def compile(self, optimizer="adam", losses: Mapping[str, RetrievalLoss] | None = None,
                loss_weights: Mapping[str, float] | None = None, monitors=(), grad_cache_chunk: int = 0, **kwargs):
        """Like `keras.Model.compile`, with kitm losses by name instead of `loss=`, optional `monitors`: Keras
        metrics updated with `(y_true, y_pred)` every step, and `grad_cache_chunk`: N > 0 trains with gradient
        caching in chunks of N rows (module docstring; N must divide the per-replica batch)."""
        if "loss" in kwargs:
            raise ValueError("DualEncoder takes its objectives as `losses={name: RetrievalLoss}`, not `loss=`.")
        losses = dict(losses or {})
        loss_weights = dict(loss_weights or {})
        unknown = set(loss_weights) - set(losses)
        if unknown:
            raise ValueError(f"loss_weights names {sorted(unknown)}, which are not among the losses {sorted(losses)}.")
        for name, loss in losses.items():
            if not isinstance(loss, RetrievalLoss):
                raise TypeError(f"Loss {name!r} is a {type(loss).__name__}; kitm losses derive from RetrievalLoss.")
        if isinstance(grad_cache_chunk, bool) or int(grad_cache_chunk) != grad_cache_chunk or grad_cache_chunk < 0:
            raise ValueError(f"grad_cache_chunk must be an integer >= 0 (0: no gradient caching); got "
                             f"{grad_cache_chunk!r}.")
        if grad_cache_chunk:
            for name, loss in losses.items():
                owned = getattr(loss, "optimizer_groups", None)
                if owned is not None:
                    raise ValueError(
                        f"grad_cache_chunk={grad_cache_chunk}: the loss {name!r} ({type(loss).__name__}) trains state "
                        "of its own from each batch (optimizer_groups), which gradient caching cannot replay between "
                        "its two passes; use grad_cache_chunk=0 with it.")
        if not on_tensorflow():
            steps.refuse_tensorflow_only(losses, grad_cache_chunk)
        super().compile(optimizer=optimizer, **kwargs)
        self.grad_cache_chunk = int(grad_cache_chunk)
        # The hardest-negative warm-up counts the optimizer's steps; on JAX a counter of the model's, carried with
        # the losses' state through the stateless step (kitm.distribute.steps).
        counter = steps.loss_step_counter(losses, self.optimizer)
        object.__setattr__(self, "_loss_step_counter", counter)
        for loss in losses.values():
            loss.bind_training_step(self.optimizer.iterations if counter is None else counter)
        groups = steps.loss_optimizer_groups(losses)  # JAX: the losses' own optimizers, applied in jax_train_step
        object.__setattr__(self, "_loss_optimizer_groups", groups)
        object.__setattr__(self, "_loss_state", steps.loss_state(losses, counter, groups))
        self.loss_functions = losses
        self.loss_weights_by_name = {name: float(loss_weights.get(name, 1.0)) for name in losses}
        trackers = {f"{name}/{term}": keras.metrics.Mean(name=f"{name}/{term}")
                    for name, loss in losses.items() for term in loss.term_names}
        for name, loss in losses.items():  # values a loss reports besides its terms (e.g. ladder levels chosen)
            for key in getattr(loss, "monitor_names", ()):
                trackers[f"{name}/{key}"] = keras.metrics.Mean(name=f"{name}/{key}")
        if any(getattr(loss, "uses_neighbors", False) for loss in losses.values()):
            # The share of rows whose semantic neighbour is in the batch (Thomas & Kovashka's within-modality terms).
            trackers["neighbor_coverage"] = keras.metrics.Mean(name="neighbor_coverage")
        # Set past Keras' attribute tracking: compile may follow build (which locks new state), and these
        # metrics are reported through the `metrics` property below, never saved with the weights.
        object.__setattr__(self, "term_trackers", trackers)
        object.__setattr__(self, "batch_monitors", list(monitors or ()))
        # Other backends: the model's optimizer reaches the losses' variables through `trainable_variables`.
        object.__setattr__(self, "_loss_variables", [] if on_tensorflow() else
                           self.loss_variables_for_model_optimizer())

    @property
    def trainable_weights(self):
        weights = super().trainable_weights
        if not self.trainable:
            return weights
        return _appended(weights, getattr(self, "_loss_variables", ()))

    @property
    def trainable_variables(self):
        return self.trainable_weights

    @property
    def non_trainable_variables(self):
        """Keras' list, plus on JAX the state the compiled losses carry through a step (`compile`)."""
        return _appended(super().non_trainable_variables, getattr(self, "_loss_state", ()))

    def fit(self, *args, **kwargs):
        """Keras' fit; on JAX with a hardest-negative warm-up, the losses' step count starts from the optimizer's
        (kitm.distribute.steps), after the callbacks' `on_train_begin` (a BackupAndRestore restores it there)."""
        if getattr(self, "_loss_step_counter", None) is not None:
            args, kwargs = steps.with_loss_step_callback(args, kwargs)
        return super().fit(*args, **kwargs)

    def loss_variables_for_model_optimizer(self) -> list:
        """The trainable variables of the compiled losses that set `uses_model_optimizer` (module docstring)."""
        found, seen = [], set()
        for loss in self.loss_functions.values():
            if getattr(loss, "uses_model_optimizer", False):
                for variable in loss.trainable_variables:
                    if id(variable) not in seen:
                        seen.add(id(variable))
                        found.append(variable)
        return found

    def optimizer_variables(self) -> list:
        """What the model's optimizer updates: `trainable_variables` and the losses' variables that ask for it
        (`loss_variables_for_model_optimizer`). Build the optimizer over these, after `compile`."""
        # On JAX / PyTorch the losses' variables are among the trainable ones already.
        return _appended(list(self.trainable_variables), self.loss_variables_for_model_optimizer())

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """Weighted sum of every loss; each named term is reduced as its loss reduces and logged."""
        if not self.loss_functions:
            raise ValueError("DualEncoder has no losses; call compile(losses={...}) first.")
        # float32 also under a mixed-precision policy (float64 under a float64 one)
        total = ops.zeros((), dtype=_at_least_float32(y_pred["image"]).dtype)
        coverage = self.term_trackers.get("neighbor_coverage")
        if coverage is not None and isinstance(y, Mapping) and "neighbor_position" in y:
            coverage.update_state(ops.mean(ops.cast(ops.greater_equal(y["neighbor_position"], 0), "float32")))
        replicas = num_replicas_in_sync()
        for name, loss in self.loss_functions.items():
            terms = loss.compute_terms(y, y_pred)
            for key in getattr(loss, "monitor_names", ()):
                self.term_trackers[f"{name}/{key}"].update_state(loss.monitored[key])
            weight = self.loss_weights_by_name[name]
            global_negatives = getattr(loss, "global_negatives", False)
            for term, values in terms.items():
                if sample_weight is not None:
                    values = values * ops.cast(ops.reshape(sample_weight, (-1,)), values.dtype)
                value = ops.cast(_reduce(values, loss.reduction), total.dtype)
                # Gradients are summed across replicas: like Keras' own losses each replica's value is divided by
                # R, except a "sum" loss with global negatives, whose replicas' values add up to the global batch's.
                share = replica_share(value, loss.reduction, global_negatives)
                # Logged so that the mean over replicas is the global batch's value under global negatives.
                logged = value * replicas if global_negatives and loss.reduction == "sum" else value
                self.term_trackers[f"{name}/{term}"].update_state(logged)
                total = total + weight * share
        for monitor in self.batch_monitors:
            monitor.update_state(y, y_pred)
        if self.losses:  # layer regularisers, divided by R like Keras' own losses
            regularisers = ops.sum(ops.stack([ops.cast(l, total.dtype) for l in self.losses]))
            total = total + scale_for_replicas(regularisers, "sum")
        counter = getattr(self, "_loss_step_counter", None)
        if counter is not None and training:  # JAX: the losses' count of training steps (`compile`)
            counter.assign_add(ops.ones((), counter.dtype))
        return total

    def train_step(self, *args):
        """Keras' training step, extended to the variables that losses own (module docstring): the backend's step,
        `kitm.distribute.steps` (kitm's tape on TensorFlow; Keras' trainer on JAX and PyTorch)."""
        return steps.train_step(self, args, keras_step=super().train_step)

    def compute_gradients(self, x, y=None, sample_weight=None):
        """This replica's gradients of the training step, before the optimizers sum them over replicas and apply
        them: (groups [(optimizer, variables)], gradients [one list per group], total loss, y_pred). TensorFlow's
        step only (`kitm.distribute.steps.tensorflow_step`)."""
        return steps.tensorflow_gradients(self, x, y, sample_weight)

    def _forward_state(self) -> list:
        """The variables a training forward pass changes: random layers' seed states, batch-norm statistics."""
        found, seen = [], set()
        for layer in self._flatten_layers():
            variables = [generator.state for generator in getattr(layer, "_seed_generators", [])]
            if isinstance(layer, keras.layers.BatchNormalization):
                variables += [layer.moving_mean, layer.moving_variance]
            for variable in variables:
                if id(variable) not in seen:
                    seen.add(id(variable))
                    found.append(variable)
        return found

    def _loss_scaling(self) -> bool:
        return (isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer)
                or getattr(self.optimizer, "loss_scale_factor", None) is not None)

    def _optimizer_groups(self) -> list:
        groups = [(self.optimizer, self.optimizer_variables())]
        for loss in self.loss_functions.values():
            owned = getattr(loss, "optimizer_groups", None)
            groups += [(optimizer, list(variables)) for optimizer, variables in (owned() if owned else [])]
        return [(optimizer, variables) for optimizer, variables in groups if variables]

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        """Keras' pre-`fit` symbolic build, skipped when there is nothing left to build.

        Under a strategy Keras first averages one input batch across replicas with `strategy.reduce`,
        which MultiWorkerMirroredStrategy cannot do for a nested batch like ours (a dict of tensors;
        keras-team/keras#20329): with several workers `fit` would fail before its first step. A model
        built beforehand (`build_from_inputs`) with a built optimizer and no compiled Keras losses or
        metrics has nothing for that build to create, so the batch is not needed. (TensorFlow's; the other backends
        build as Keras does.)
        """
        if not on_tensorflow():
            return super()._maybe_symbolic_build(iterator=iterator, data_batch=data_batch)
        if self.optimizer is not None and not self.optimizer.built and self.loss_variables_for_model_optimizer():
            # Keras' build would build the optimizer over the model's weights alone; it is built over
            # `optimizer_variables()` instead, once the model is. (Without a strategy Keras builds the model in the
            # first traced step, whose first `apply_gradients` then builds the optimizer over all of them.)
            self.optimizer.built = True
            try:
                self._maybe_symbolic_build(iterator=iterator, data_batch=data_batch)
            finally:
                self.optimizer.built = False
            if all(layer.built for layer in self._flatten_layers()):
                self.optimizer.build(self.optimizer_variables())
            return
        built = all(layer.built for layer in self._flatten_layers())
        optimizer_built = self.optimizer is None or self.optimizer.built
        compiled_unbuilt = any(getattr(self, name, None) is not None and not getattr(self, name).built
                               for name in ("_compile_metrics", "_compile_loss"))
        if built and optimizer_built and not compiled_unbuilt:
            return
        super()._maybe_symbolic_build(iterator=iterator, data_batch=data_batch)

    @property
    def metrics(self):
        return super().metrics + list(self.term_trackers.values()) + list(self.batch_monitors)

    def save_own_variables(self, store):
        """Keras' own variables of the model, then the state each compiled loss keeps outside the optimizer (its
        `non_trainable_variables`: adaptive margins and their counters, re-clusterable thresholds, the random
        draws' seed states), under `loss:<name>:<i>`, so that a loaded `.keras` file continues with that state.
        Counters kept per replica are saved as their sum."""
        super().save_own_variables(store)
        for key, variable in self._saved_loss_state().items():
            store[key] = replica_summed_value(variable)

    def load_own_variables(self, store):
        """`save_own_variables` read back: the model's own variables as Keras reads them, then each loss's state
        where the file has it (a replica's counter copy takes the saved sum on the first replica, zeros on the
        others, so that the sum is the saved one)."""
        loss_keys = [key for key in store.keys() if key.startswith(_LOSS_STATE_PREFIX)]
        super().load_own_variables({key: store[key] for key in store.keys() if key not in loss_keys})
        state = self._saved_loss_state()
        for key in loss_keys:
            if key not in state:
                continue  # a loss this model was not compiled with: Keras' own rule for unknown weights
            assign_replica_summed(state[key], store[key])

    def _saved_loss_state(self) -> dict:
        """`loss:<name>:<i>` -> the i-th of the compiled loss <name>'s `non_trainable_variables` (variables only)."""
        state = {}
        for name, loss in sorted(getattr(self, "loss_functions", {}).items()):
            variables = [v for v in getattr(loss, "non_trainable_variables", ()) if is_variable(v)]
            state.update({f"{_LOSS_STATE_PREFIX}{name}:{i}": v for i, v in enumerate(variables)})
        return state

    def get_compile_config(self):
        """Keras' compile configuration (the optimizer, `jit_compile`, ...) with kitm's own: the losses by name,
        their weights, the monitors and `grad_cache_chunk`, so that `keras.saving.load_model` compiles the model
        again (`compile_from_config`)."""
        config = super().get_compile_config()
        if not config or not getattr(self, "loss_functions", None):
            return config
        serialize = keras.saving.serialize_keras_object
        config = {key: value for key, value in config.items() if key not in _KERAS_ONLY_COMPILE_KEYS}
        config.update(losses={name: serialize(loss) for name, loss in self.loss_functions.items()},
                      loss_weights=dict(self.loss_weights_by_name),
                      monitors=[serialize(monitor) for monitor in self.batch_monitors],
                      grad_cache_chunk=self.grad_cache_chunk)
        return config

    def compile_from_config(self, config):
        """`compile` from `get_compile_config()`'s dictionary; the optimizer is built over `optimizer_variables()`
        where the model is built, so that a loaded file's optimizer state has its variables to land in."""
        config = {key: value for key, value in config.items() if key not in _KERAS_ONLY_COMPILE_KEYS}
        deserialize = keras.saving.deserialize_keras_object
        losses = {name: deserialize(loss) for name, loss in config.pop("losses", {}).items()}
        monitors = [deserialize(monitor) for monitor in config.pop("monitors", [])]
        self.compile(optimizer=deserialize(config.pop("optimizer")), losses=losses, monitors=monitors, **config)
        if self.built:
            self.optimizer.build(self.optimizer_variables())

    def get_config(self):
        return {
            "name": self.name,
            "image_encoder": keras.saving.serialize_keras_object(self.image_encoder),
            "text_encoder": keras.saving.serialize_keras_object(self.text_encoder),
            "embedding_dim": self.embedding_dim,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["image_encoder"] = keras.saving.deserialize_keras_object(config["image_encoder"])
        config["text_encoder"] = keras.saving.deserialize_keras_object(config["text_encoder"])
        return cls(**config)

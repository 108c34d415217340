"""A backend case: a compiled DualEncoder saved as a `.keras` file and loaded with `keras.saving.load_model` comes back
compiled (its losses by name and weight, the optimizer with its state, a loss's learnable temperature) and continues
training with the same losses as the model it was saved from (issue 47, item 4).

The model trains 3 steps with the triplet summed over the negatives, half an InfoNCE (its logit scale trained by
the model's optimizer) and the adaptive-margin triplet of Malali & Keller (its margins and counters: state outside
the optimizer; the margins set as its callback would), is saved and loaded; then each of the two trains 2 more steps
on the same batch. So does a model with the semantic centres' losses, which train parameters of their own with
optimizers of their own (optimizer groups; on TensorFlow and JAX, where DualEncoder trains them)."""

import os
import tempfile

import keras
import numpy as np

from kitm.layers.image_encoders import FeatureMLP
from kitm.layers.text_encoders import GRUTextEncoder
from kitm.losses import AdaptiveMarginTripletLoss, InfoNCELoss, TripletLoss
from kitm.models import DualEncoder


def _batch_and_model(data_seed: int, weight_seed: int):
    """(x, y, a built DualEncoder with every weight from numpy, the weights' generator for further draws): the
    backends' initialisers draw differently, so nothing comes from them."""
    rng = np.random.default_rng(data_seed)
    x = {"image": rng.normal(size=(8, 6)), "tokens": rng.integers(1, 12, size=(8, 5)).astype("int32")}
    y = {"image_index": np.arange(8, dtype="int32")}
    model = DualEncoder(FeatureMLP(width=5, dropout=0.0), GRUTextEncoder(12, word_dim=4, units=3), embedding_dim=4)
    model(x)
    weights = np.random.default_rng(weight_seed)
    for weight in model.weights:
        weight.assign(weights.normal(scale=0.5, size=tuple(weight.shape)))
    return x, y, model, weights


def _centres_round_trip():
    """The semantic centres' losses (their own parameters and optimizers: optimizer groups) beside the triplet,
    trained 3 steps, saved, loaded, then 2 more steps each: {name: array}. PyTorch refuses optimizer groups in
    DualEncoder.compile (docs/backends.md), so there this gives nothing."""
    from kitm.losses.centers.loss_classes import ImageIndexCrossEntropy, SemanticCenterLoss

    if keras.backend.backend() == "torch":
        return {}
    x, y, model, weights = _batch_and_model(2, 3)
    centres = SemanticCenterLoss(8, 4)
    centres.table.trainable_variables[0].assign(weights.normal(scale=0.5, size=(8, 4)))
    model.compile(keras.optimizers.Adam(1e-2), losses={"triplet": TripletLoss(), "centers": centres,
                                                       "ce": ImageIndexCrossEntropy(8, 4)})
    model.fit(x, y, batch_size=8, epochs=3, shuffle=False, verbose=0)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "centres.keras")
        model.save(path)
        loaded = keras.saving.load_model(path)
    steps = [float(loss.centers_optimizer.iterations) for loss in (centres, loaded.loss_functions["centers"])]
    continued = model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0).history
    reloaded = loaded.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0).history
    return {"centres_steps": np.array(steps),
            "centres_continued": np.array([continued[k] for k in ("loss", "centers/image", "ce/text")]),
            "centres_reloaded": np.array([reloaded[k] for k in ("loss", "centers/image", "ce/text")])}


def cases():
    x, y, model, _ = _batch_and_model(0, 1)
    adaptive = AdaptiveMarginTripletLoss(sampling="hardest")  # deterministic negatives: equal continuations
    model.compile(keras.optimizers.Adam(1e-2), losses={"triplet": TripletLoss(), "nce": InfoNCELoss(),
                                                       "adaptive": adaptive},
                  loss_weights={"nce": 0.5})
    model.fit(x, y, batch_size=8, epochs=3, shuffle=False, verbose=0)
    adaptive.margin_x.assign(0.35)  # what kitm.callbacks.AdaptiveMarginCallback would have set
    adaptive.margin_y.assign(0.05)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.keras")
        model.save(path)
        loaded = keras.saving.load_model(path)
    state = [[float(np.sum(keras.ops.convert_to_numpy(v))) for v in (loss.margin_x, loss.margin_y,
                                                                        loss.satisfied_counts, loss.used_counts)]
             for loss in (adaptive, loaded.loss_functions["adaptive"])]
    continued = model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0).history
    reloaded = loaded.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0).history
    return {**_centres_round_trip(),
            "losses_named": np.array(float(sorted(loaded.loss_functions) == ["adaptive", "nce", "triplet"])),
            "adaptive_state": np.array(state),
            "continued_adaptive": np.asarray(continued["adaptive/i2t"]),
            "reloaded_adaptive": np.asarray(reloaded["adaptive/i2t"]),
            "nce_weight": np.array(loaded.loss_weights_by_name["nce"]),
            "continued_loss": np.asarray(continued["loss"]), "reloaded_loss": np.asarray(reloaded["loss"]),
            "continued_nce": np.asarray(continued["nce/i2t"]), "reloaded_nce": np.asarray(reloaded["nce/i2t"]),
            "steps": np.array([float(model.optimizer.iterations), float(loaded.optimizer.iterations)]),
            "logit_scale": np.array([float(keras.ops.convert_to_numpy(loss.trainable_variables[0]))
                                     for loss in (model.loss_functions["nce"], loaded.loss_functions["nce"])])}

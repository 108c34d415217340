"""A backend case: `DualEncoder.fit` for a few steps from fixed weights, with a loss written in keras.ops inside this
file (an InfoNCE with a learnable logit scale that the model's optimizer trains, as CLIP's): the loss history, the
final embeddings and the final scale must be the same on TensorFlow (kitm's own training step), JAX and PyTorch
(Keras' trainer over `compute_loss`). Also: on JAX and PyTorch, `compile` refuses gradient caching, and on PyTorch
losses with optimizers of their own (flags: 1 refused naming the backend, 0 accepted).

`LOSS` names the loss; tests/backend_cases/layers_dual_encoder_triplet.py runs the same with kitm's TripletLoss.
"""

import keras
import numpy as np
from keras import ops

from kitm.layers.image_encoders import FeatureMLP
from kitm.layers.text_encoders import GRUTextEncoder
from kitm.losses.base import RetrievalLoss
from kitm.models import DualEncoder

LOSS = "ops_infonce"
STEPS = 6


class OpsInfoNCE(RetrievalLoss):
    """Symmetric InfoNCE over the batch, logits s * exp(log_scale), log_scale learnt with the encoders."""

    term_names = ("i2t", "t2i")
    uses_model_optimizer = True

    def __init__(self):
        super().__init__(name="ops_infonce", reduction="sum_over_batch_size")
        self.log_scale = keras.Variable(np.log(5.0), name="log_scale")

    @property
    def trainable_variables(self):
        return [self.log_scale]

    def compute_terms(self, y_true, y_pred):
        logits = ops.matmul(y_pred["image"], ops.transpose(y_pred["text"])) * ops.exp(self.log_scale)
        positives = ops.diagonal(logits)
        return {"i2t": ops.logsumexp(logits, axis=1) - positives, "t2i": ops.logsumexp(logits, axis=0) - positives}


def _loss():
    if LOSS == "ops_infonce":
        return OpsInfoNCE()
    from kitm.losses import TripletLoss

    return TripletLoss(margin=0.2, max_violation=False)


def _data(rows=8):
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 7, size=rows)
    tokens = np.where(np.arange(7)[None, :] < lengths[:, None], rng.integers(1, 12, size=(rows, 7)), 0)
    x = {"image": rng.normal(size=(rows, 6)), "tokens": tokens.astype("int32")}
    return x, {"image_index": np.arange(rows, dtype="int32")}


def _model(x):
    model = DualEncoder(FeatureMLP(width=5, dropout=0.0), GRUTextEncoder(12, word_dim=4, units=3), embedding_dim=4)
    model(x)
    rng = np.random.default_rng(1)
    for weight in model.weights:  # the backends' initialisers draw differently: every weight from numpy
        weight.assign(rng.normal(scale=0.5, size=tuple(weight.shape)))
    return model


def cases():
    x, y = _data()
    model = _model(x)
    loss = _loss()
    model.compile(keras.optimizers.SGD(0.5), losses={"main": loss})
    history = model.fit(x, y, batch_size=len(y["image_index"]), epochs=STEPS, shuffle=False, verbose=0).history
    out = model(x)
    results = {"loss": np.asarray(history["loss"]), "image": out["image"], "text": out["text"]}
    results.update({f"term/{term}": np.asarray(history[f"main/{term}"]) for term in loss.term_names})
    if LOSS == "ops_infonce":
        results["log_scale"] = loss.log_scale
    if keras.backend.backend() != "tensorflow":
        try:
            _model(x).compile("sgd", losses={"main": _loss()}, grad_cache_chunk=4)
            results["refuses_grad_cache"] = np.array(0.0)
        except NotImplementedError as error:
            message = str(error)
            results["refuses_grad_cache"] = np.array(
                float("gradient caching" in message and keras.backend.backend() in message))
        owning = OpsInfoNCE()
        owning.optimizer_groups = lambda: [(keras.optimizers.SGD(0.1), [owning.log_scale])]
        try:
            _model(x).compile("sgd", losses={"centres": owning})
            results["refuses_optimizer_groups"] = np.array(0.0)
        except NotImplementedError as error:
            message = str(error)
            results["refuses_optimizer_groups"] = np.array(
                float("optimizer_groups" in message and keras.backend.backend() in message))
    return results

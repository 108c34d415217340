"""A backend case: the demo's training step (launch/demo.flags in miniature) from the same weights and batch.

The demo's model: the small CNN with batch normalisation and the pooled grid, frozen as the demo freezes it (its batch
norms in inference mode), a bidirectional GRU over word embeddings (masked, each caption's own tokens), the VSE++
triplet summed over the negatives, Adam at 2e-3 with the global norm of the gradient clipped to 2.0, as the launcher
builds it. Captions repeat words, as real ones do, so the embedding table's gradient has several rows per word: where
TensorFlow hands it over as slices, their sum is what the optimizer and the clipping must see (docs/backends.md,
"The same step on every engine"). Two steps, so that the second reads the first's moments. Everything after them: the
weights (batch-norm statistics included), the optimizer's moments and step count, and each step's loss.
"""

import keras
import numpy as np

from kitm.layers.image_encoders import SmallConvEncoder
from kitm.layers.text_encoders import GRUTextEncoder
from kitm.losses import TripletLoss
from kitm.models import DualEncoder

ROWS, WORDS, VOCABULARY = 16, 9, 6


def _data():
    rng = np.random.default_rng(0)
    lengths = rng.integers(3, WORDS + 1, size=ROWS)
    # Five words for 16 captions of 3 to 9 tokens: every word in several captions, most several times in one.
    tokens = np.where(np.arange(WORDS)[None, :] < lengths[:, None], rng.integers(1, VOCABULARY, size=(ROWS, WORDS)), 0)
    x = {"image": rng.uniform(size=(ROWS, 32, 32, 3)), "tokens": tokens.astype("int32")}
    return x, {"image_index": np.arange(ROWS, dtype="int32")}


def _optimizer():
    """Keras' Adam on every backend. (The launcher's default on TensorFlow, the fused kernel, forms 1 - beta_2 in
    float32, 4.7e-5 from Keras' 0.001: its second moments differ from Keras' by that much, by construction;
    tests/training/test_fused_adam.py compares the two.)"""
    return keras.optimizers.Adam(2e-3, global_clipnorm=2.0)


def _kind(variable) -> str:
    name = variable.path.rsplit("/", 1)[-1]  # "iteration", "learning_rate", "<weight's path>_momentum", ...
    return name.rsplit("_", 1)[-1] if name.endswith(("_momentum", "_velocity")) else name


def cases():
    x, y = _data()
    model = DualEncoder(SmallConvEncoder(filters=(4, 4, 4, 4), width=8, pooled=True),
                        GRUTextEncoder(VOCABULARY + 6, word_dim=4, units=3, recurrence="masked"), embedding_dim=4)
    model(x)
    rng = np.random.default_rng(1)
    for weight in model.weights:  # the backends' initialisers draw differently: every weight from numpy
        if "moving_variance" in weight.path:
            weight.assign(rng.uniform(0.5, 1.5, size=tuple(weight.shape)))
        else:
            weight.assign(rng.normal(scale=0.5, size=tuple(weight.shape)))
    model.image_encoder.trainable = False  # `--freeze_image_tower=true`: its batch norms in inference mode
    optimizer = _optimizer()
    model.compile(optimizer, losses={"main": TripletLoss(margin=0.2, max_violation=False)})
    history = model.fit(x, y, batch_size=ROWS, epochs=2, shuffle=False, verbose=0).history
    results = {"loss": np.asarray(history["loss"])}
    results.update({f"weight/{weight.path}": weight for weight in model.weights})
    # The optimizer's variables by position and kind (momentum, velocity, iteration, learning_rate).
    results.update({f"optimizer/{index}/{_kind(variable)}": variable
                    for index, variable in enumerate(optimizer.variables)})
    return results

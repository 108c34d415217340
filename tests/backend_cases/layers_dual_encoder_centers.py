"""A backend case: `DualEncoder.fit` with losses that train variables of their own with optimizers of their own
(Malali & Keller's semantic centres with SGD + momentum, the image-index heads with Adam; kitm.losses.centers) beside
the triplet, from fixed weights (tests/backend_cases/layers_dual_encoder.py's model and data), one batch a step.
TensorFlow's step applies each group's optimizer (kitm.models.dual_encoder); on JAX the groups ride in the
stateless step's state (kitm.distribute.steps.keras_trainers.jax_train_step). Loss history, embeddings, centres, heads and the
groups' optimizer step counts must be the same.
"""

import keras
import numpy as np

import layers_dual_encoder as base
from kitm.losses import TripletLoss
from kitm.losses.centers import ImageIndexCrossEntropy, SemanticCenterLoss

STEPS = 5


def cases():
    x, y = base._data()
    model = base._model(x)
    centers = SemanticCenterLoss(8, 4, centers_optimizer=keras.optimizers.SGD(0.5, momentum=0.9),
                                 centers_initializer="zeros")
    heads = ImageIndexCrossEntropy(8, 4, optimizer=keras.optimizers.Adam(0.05))
    rng = np.random.default_rng(3)
    for weight in heads.heads.weights:  # the backends' initialisers draw differently
        weight.assign(rng.normal(scale=0.5, size=tuple(weight.shape)))
    model.compile(keras.optimizers.SGD(0.5), losses={"triplet": TripletLoss(0.2, max_violation=False),
                                                     "centers": centers, "index_ce": heads})
    history = model.fit(x, y, batch_size=len(y["image_index"]), epochs=STEPS, shuffle=False, verbose=0).history
    out = model(x)
    results = {"loss": np.asarray(history["loss"]), "image": out["image"], "text": out["text"],
               "centers": centers.centers, "centers_steps": centers.centers_optimizer.iterations,
               "heads_steps": heads.optimizer.iterations}
    for index, weight in enumerate(heads.heads.weights):
        results[f"heads/{index}"] = weight
    for name in ("centers/image", "centers/text", "index_ce/image", "index_ce/text"):
        results[f"term/{name}"] = np.asarray(history[name])
    return results

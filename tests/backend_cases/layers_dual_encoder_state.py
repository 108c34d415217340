"""A backend case: `DualEncoder.fit` with losses whose state a training step reads or updates, from fixed weights
(tests/backend_cases/layers_dual_encoder.py's model and data), one batch a step:

- "warmup/": VSE++'s hardest-negative triplet with a 3-step warm-up on the sum over negatives (the step count the
  loss reads: the optimizer's on TensorFlow; on JAX a model variable carried through the stateless step);
- "ladder/": the re-clusterable ladder, whose step offers every negative's relevance to a sample that
  `LadderReclusterCallback` clusters every 2 batches into new thresholds. The sample holds every value offered
  (sample_size above the 2 x 56 negatives between updates), so the backends' different random keys keep the same
  set, and the clustering uses the exact k-means optimum only (`lloyd_runs=0`), which does not depend on the order.

Loss histories, final embeddings and thresholds must be the same on TensorFlow and JAX (PyTorch updates its
variables in place, as TensorFlow does).
"""

import keras
import numpy as np

import layers_dual_encoder as base
from kitm.callbacks import LadderReclusterCallback
from kitm.losses import ReclusterableLadderLoss, TripletLoss

STEPS = 6


def _relevance(rows=8):
    rng = np.random.default_rng(2)
    relevance = rng.choice([0.1, 0.3, 0.6, 0.9], size=(rows, rows))
    np.fill_diagonal(relevance, 1.0)
    return relevance


def _fit(prefix, loss, callbacks=()):
    x, y = base._data()
    y = dict(y, relevance=_relevance())
    model = base._model(x)
    model.compile(keras.optimizers.SGD(0.5), losses={"main": loss})
    history = model.fit(x, y, batch_size=len(y["image_index"]), epochs=STEPS, shuffle=False, verbose=0,
                        callbacks=list(callbacks)).history
    out = model(x)
    results = {f"{prefix}loss": np.asarray(history["loss"]), f"{prefix}image": out["image"],
               f"{prefix}text": out["text"]}
    return results


def cases():
    results = _fit("warmup/", TripletLoss(margin=0.2, max_violation=True, hardest_warmup_steps=3))
    results.update(_fit("hardest/", TripletLoss(margin=0.2, max_violation=True)))
    ladder = ReclusterableLadderLoss(thresholds=(0.5,), margins=(0.2, 0.05), betas=(1.0, 0.5), max_violation=False,
                                     sample_size=512)
    recluster = LadderReclusterCallback(ladder, every_batches=2, lloyd_runs=0)
    results.update(_fit("ladder/", ladder, [recluster]))
    results["ladder/thresholds"] = np.asarray([update["theta_1"] for update in recluster.updates])
    results["ladder/sampled"] = np.asarray([update["sampled"] for update in recluster.updates], np.float64)
    return results

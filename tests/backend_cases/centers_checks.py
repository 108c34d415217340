"""Backend cases: the semantic-centre losses refuse an out-of-range or negative image index on every backend (a
flag per check: 1 when the error names the argument), and under JAX's jit, where a traced index cannot be checked,
an invalid index gives NaN rather than another image's centre, and the loss classes' terms trace under jit and
equal their eager values."""

import keras
import numpy as np
from keras import ops

from kitm.losses.centers import ImageIndexCrossEntropy, QuantizedCenterLoss, SemanticCenterLoss


def _refused(loss, index, message) -> float:
    x = np.zeros((2, 3))
    try:
        loss.compute_terms({"image_index": np.array(index, np.int32)}, {"image": x, "text": x})
    except Exception as error:  # TensorFlow: InvalidArgumentError; the other backends: ValueError or IndexError
        return float(message in str(error))
    return 0.0


def cases():
    results = {}
    for name, loss in (("semantic", SemanticCenterLoss(4, 3)), ("cross_entropy", ImageIndexCrossEntropy(4, 3))):
        results[f"{name}/too_large"] = _refused(loss, [0, 4], "num_images=4")
        results[f"{name}/negative"] = _refused(loss, [-1, 0], ">= 0")
        x = np.ones((2, 3))
        terms = loss.compute_terms({"image_index": np.array([3, 0], np.int32)}, {"image": x, "text": x})
        results[f"{name}/valid_finite"] = ops.all(ops.isfinite(ops.stack(list(terms.values()))))
    if keras.backend.backend() == "jax":
        import jax

        loss = SemanticCenterLoss(4, 3)

        @jax.jit
        def traced(index):
            x = ops.ones((2, 3))
            return loss.compute_terms({"image_index": index}, {"image": x, "text": x})["image"]

        rows = np.asarray(traced(np.array([1, 4], np.int32)))
        negative = np.asarray(traced(np.array([-1, 2], np.int32)))
        results["jit_nan"] = float(np.isfinite(rows[0]) and np.isnan(rows[1]) and np.isnan(negative[0]))
        # Every loss class traces under jit (static shapes, no host reads) and gives its eager values.
        rng = np.random.default_rng(31)
        y_pred = {"image": rng.normal(size=(3, 3)), "text": rng.normal(size=(3, 3))}
        y_true = {"image_index": np.array([0, 3, 0], np.int32)}
        same = []
        for jit_loss in (SemanticCenterLoss(4, 3), QuantizedCenterLoss(2, 3), ImageIndexCrossEntropy(4, 3)):
            eager = jit_loss.compute_terms(y_true, y_pred)
            compiled = jax.jit(jit_loss.compute_terms)(y_true, y_pred)
            same.append(all(np.allclose(eager[key], compiled[key], rtol=1e-12) for key in eager))
        results["jit_terms"] = float(all(same))
    else:
        results["jit_nan"] = results["jit_terms"] = 1.0  # nothing to trace: the eager checks above apply
    return results

"""Backend cases: the semantic-centre loss classes called as Keras losses (`loss(y_true, y_pred)`, reduction "sum"),
value and the embeddings' gradients; this goes through `RetrievalLoss.__call__` (kitm.losses.base)."""

import numpy as np
from run import value_and_gradients

from kitm.losses.centers import ImageIndexCrossEntropy, QuantizedCenterLoss, SemanticCenterLoss


def unit(rng, b, d):
    x = rng.normal(size=(b, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def cases():
    rng = np.random.default_rng(16)
    b, d = 4, 3
    x, y = unit(rng, b, d), unit(rng, b, d)
    index = np.array([2, 0, 2, 5], np.int32)
    center_loss = SemanticCenterLoss(6, d, delta=0.05, dtype="float64")
    center_loss.centers.assign(rng.normal(size=(6, d)) * 0.5)
    quantized_loss = QuantizedCenterLoss(3, d, delta=0.2, dtype="float64")
    quantized_loss.quantizer.assignment.kernel.assign(rng.normal(size=(d, 3)))
    quantized_loss.quantizer.centers.assign(rng.normal(size=(3, d)) * 0.3)
    cross_entropy = ImageIndexCrossEntropy(6, d, dtype="float64")
    cross_entropy.heads.image_head.kernel.assign(rng.normal(size=(d, 6)))
    cross_entropy.heads.text_head.kernel.assign(rng.normal(size=(d, 6)))
    results = {}
    for name, loss in (("semantic", center_loss), ("quantized", quantized_loss), ("cross_entropy", cross_entropy)):
        def scalar(image, text, loss=loss):
            return loss({"image_index": index}, {"image": image, "text": text})

        value, grads = value_and_gradients(scalar, {"image": x, "text": y}, ("image", "text"))
        results[f"{name}/value"], results[f"{name}/d_image"], results[f"{name}/d_text"] = \
            value, grads["image"], grads["text"]
    return results

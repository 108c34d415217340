"""Backend cases: the semantic-centre terms (Malali & Keller, Eqs. 6-7, Sec. 3.2), the softmax quantized-center
layer, the centre-gradient scaling and the loss classes' `compute_terms`: values and gradients in float64."""

import keras
import numpy as np
from keras import ops
from run import value_and_gradients

from kitm.layers.quantized_centers import SoftmaxQuantizedCenters
from kitm.losses.centers import (ImageIndexCrossEntropy, QuantizedCenterLoss, SemanticCenterLoss, center_repulsion,
                                 index_cross_entropy_terms, quantized_center_terms, scale_gradient,
                                 semantic_center_terms)


def unit(rng, b, d):
    x = rng.normal(size=(b, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def softmax(logits):
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _add(results, prefix, value, grads):
    results[f"{prefix}/value"] = value
    for name, grad in grads.items():
        results[f"{prefix}/d_{name}"] = grad


def semantic_cases(results):
    rng = np.random.default_rng(10)
    x, y = unit(rng, 6, 5), unit(rng, 6, 5)
    centers = rng.normal(size=(6, 5)) * 0.6  # negative entries
    centers[0] = x[0]  # a sample on its centre: the hinge sits at its kink for delta = 0
    centers[1] = y[1] + 0.01  # inside the hinge for delta > 0
    centers[2] = centers[3]  # two rows of one image
    for delta in (0.0, 0.1, 5.0):  # 5.0: most hinges off, zero gradients there
        def scalar(image, text, centers, delta=delta):
            image_term, text_term = semantic_center_terms(image, text, centers, delta=delta)
            return ops.sum(image_term * ops.arange(1, 7, dtype="float64")) + 2.0 * ops.sum(text_term)

        value, grads = value_and_gradients(scalar, {"image": x, "text": y, "centers": centers},
                                           ("image", "text", "centers"))
        _add(results, f"semantic/delta={delta}", value, grads)
        terms = semantic_center_terms(x, y, centers, delta=delta)
        results[f"semantic/delta={delta}/image_rows"], results[f"semantic/delta={delta}/text_rows"] = terms


def repulsion_cases(results):
    rng = np.random.default_rng(11)
    centers = rng.normal(size=(5, 4)) * 0.3  # close centres: active hinges
    centers[4] = centers[0]  # a duplicated centre: distance 0
    spread = np.eye(5, 4) * 3.0  # far apart: every hinge off
    for name, points in (("close", centers), ("spread", spread)):
        for chunk in (1, 2, 1024):  # chunks of 1, uneven chunks, one chunk
            def scalar(centers, chunk=chunk):
                return center_repulsion(centers, delta=0.2, chunk_size=chunk)

            value, grads = value_and_gradients(scalar, {"centers": points}, ("centers",))
            _add(results, f"repulsion/{name}/chunk={chunk}", value, grads)


def quantized_cases(results):
    rng = np.random.default_rng(12)
    b, nq, d = 5, 4, 3
    x, y = unit(rng, b, d), unit(rng, b, d)
    wx, wy = softmax(rng.normal(size=(b, nq))), softmax(rng.normal(size=(b, nq)) * 4)
    wy[0] = np.eye(nq)[2]  # a hard assignment
    centers = rng.normal(size=(nq, d)) * 0.4
    centers[1] = centers[0] + 0.05
    centers[3] = x[2]  # a sample on a centre
    for delta, a_c in ((0.0, 1.0), (0.3, 1.5), (0.3, 0.0)):
        def scalar(image, text, image_weights, text_weights, centers, delta=delta, a_c=a_c):
            image_term, text_term, repulsion = quantized_center_terms(
                image, text, image_weights, text_weights, centers, delta=delta, repulsion_weight=a_c, chunk_size=3)
            return ops.sum(image_term * ops.arange(1, b + 1, dtype="float64")) + 3.0 * ops.sum(text_term) + \
                ops.sum(repulsion)

        inputs = {"image": x, "text": y, "image_weights": wx, "text_weights": wy, "centers": centers}
        value, grads = value_and_gradients(scalar, inputs, tuple(inputs))
        _add(results, f"quantized/delta={delta}/a_c={a_c}", value, grads)
        for key, rows in zip(("image", "text", "repulsion"),
                             quantized_center_terms(x, y, wx, wy, centers, delta=delta, repulsion_weight=a_c)):
            results[f"quantized/delta={delta}/a_c={a_c}/{key}_rows"] = rows


def cross_entropy_cases(results):
    rng = np.random.default_rng(13)
    image_logits, text_logits = rng.normal(size=(5, 7)) * 3, rng.normal(size=(5, 7)) * 3
    image_logits[1] = 0.0  # ties: every class equally likely
    text_logits[2] = np.where(np.arange(7) == 4, 60.0, -60.0)  # saturated, the target far below the others
    index = np.array([0, 6, 3, 3, 1])

    def scalar(image_logits, text_logits):
        image_term, text_term = index_cross_entropy_terms(image_logits, text_logits, index)
        return ops.sum(image_term * ops.arange(1, 6, dtype="float64")) + 2.0 * ops.sum(text_term)

    value, grads = value_and_gradients(scalar, {"image_logits": image_logits, "text_logits": text_logits},
                                       ("image_logits", "text_logits"))
    _add(results, "cross_entropy", value, grads)
    results["cross_entropy/image_rows"], results["cross_entropy/text_rows"] = index_cross_entropy_terms(
        image_logits, text_logits, index)


def scale_gradient_cases(results):
    def scalar(value):
        return ops.sum(3.0 * scale_gradient(value, 0.25) * ops.convert_to_tensor([1.0, -2.0], dtype="float64"))

    value, grads = value_and_gradients(scalar, {"value": np.array([1.5, -2.0])}, ("value",))
    _add(results, "scale_gradient", value, grads)


def layer_cases(results):
    rng = np.random.default_rng(14)
    b, nq, d = 4, 3, 5
    layer = SoftmaxQuantizedCenters(nq, dtype="float64")
    layer.build((None, d))
    weights = {"kernel": rng.normal(size=(d, nq)) * 2, "bias": rng.normal(size=(nq,)), "centers": unit(rng, nq, d)}
    layer.assignment.kernel.assign(weights["kernel"])
    layer.assignment.bias.assign(weights["bias"])
    layer.centers.assign(weights["centers"])
    embeddings = unit(rng, b, d)
    embeddings[3] = 0.0  # a zero embedding: the bias alone
    target = rng.normal(size=(b, nq))
    results["layer/assignments"] = layer(embeddings)

    def scalar(embeddings, kernel, bias, centers):
        trainable = {id(layer.assignment.kernel): kernel, id(layer.assignment.bias): bias, id(layer.centers): centers}
        values = [trainable[id(v)] for v in layer.trainable_variables]
        assignments, _ = layer.stateless_call(values, [], embeddings)
        # The quantized centre loss of those assignments, so that the centres get a gradient too.
        image_term, _, repulsion = quantized_center_terms(embeddings, embeddings, assignments, assignments, centers,
                                                          delta=0.1)
        return ops.sum(assignments * ops.convert_to_tensor(target)) + ops.sum(image_term) + ops.sum(repulsion)

    value, grads = value_and_gradients(scalar, {"embeddings": embeddings, **weights},
                                       ("embeddings", "kernel", "bias", "centers"))
    _add(results, "layer", value, grads)


def loss_class_cases(results):
    """`compute_terms` of the three loss classes (their parameters set from numpy) and the embeddings' gradients."""
    rng = np.random.default_rng(15)
    b, d = 4, 3
    x, y = unit(rng, b, d), unit(rng, b, d)
    index = np.array([2, 0, 2, 5], np.int32)

    center_loss = SemanticCenterLoss(6, d, delta=0.05, dtype="float64")
    center_loss.centers.assign(rng.normal(size=(6, d)) * 0.5)
    quantized_loss = QuantizedCenterLoss(3, d, delta=0.2, repulsion_weight=1.5, chunk_size=2, dtype="float64")
    quantized_loss.quantizer.assignment.kernel.assign(rng.normal(size=(d, 3)))
    quantized_loss.quantizer.centers.assign(rng.normal(size=(3, d)) * 0.3)
    cross_entropy = ImageIndexCrossEntropy(6, d, dtype="float64")
    cross_entropy.heads.image_head.kernel.assign(rng.normal(size=(d, 6)))
    cross_entropy.heads.text_head.kernel.assign(rng.normal(size=(d, 6)))
    cross_entropy.heads.text_head.bias.assign(rng.normal(size=(6,)))

    for name, loss in (("semantic", center_loss), ("quantized", quantized_loss), ("cross_entropy", cross_entropy)):
        def scalar(image, text, loss=loss):
            terms = loss.compute_terms({"image_index": index}, {"image": image, "text": text})
            return sum(ops.sum(value) * (k + 1) for k, value in enumerate(terms.values()))

        value, grads = value_and_gradients(scalar, {"image": x, "text": y}, ("image", "text"))
        _add(results, f"loss/{name}", value, grads)
        for key, rows in loss.compute_terms({"image_index": index}, {"image": x, "text": y}).items():
            results[f"loss/{name}/{key}_rows"] = rows


def cases():
    results = {}
    for group in (semantic_cases, repulsion_cases, quantized_cases, cross_entropy_cases, scale_gradient_cases,
                  layer_cases, loss_class_cases):
        group(results)
    return results

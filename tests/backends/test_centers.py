"""Semantic centres on every backend: the centre terms (Malali & Keller, Eqs. 6-7, Sec. 3.2), the softmax
quantized-center layer and the loss classes' terms give TensorFlow's values and gradients on JAX and PyTorch
(float64), TensorFlow's match numpy oracles written from the equations, and an invalid image index is refused on
each backend."""

import numpy as np
import pytest

BACKENDS = ("jax", "torch")


def _unit(rng, b, d):
    x = rng.normal(size=(b, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _softmax(logits):
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _tolerance(backend, reference):
    # Keras' PyTorch backend computes some float64 ops in float32 (keras.src.backend.common.dtypes maps float64 to
    # float32 in result_type off TensorFlow; ops.matmul, which keras.layers.Dense calls, is one): on PyTorch the
    # layer's and the loss classes' float64 results carry float32 rounding, relative to the array's largest value
    # (measured up to 7e-8 of it; an element far below the largest is off by more than its own 1e-6 then).
    if backend == "torch":
        return {"rtol": 1e-6, "atol": 1e-6 * max(1.0, float(np.max(np.abs(reference), initial=0.0)))}
    return {"rtol": 1e-6, "atol": 1e-9}


@pytest.mark.parametrize("backend", BACKENDS)
def test_backend_equals_tensorflow(backend_results, backend):
    reference = backend_results("centers.py", "tensorflow")
    results = backend_results("centers.py", backend)
    assert set(results) == set(reference)
    for name in reference:
        np.testing.assert_allclose(results[name], reference[name], err_msg=name, **_tolerance(backend, reference[name]))


def test_tensorflow_semantic_terms_match_numpy(backend_results):
    results = backend_results("centers.py", "tensorflow")
    rng = np.random.default_rng(10)
    x, y = _unit(rng, 6, 5), _unit(rng, 6, 5)
    centers = rng.normal(size=(6, 5)) * 0.6
    centers[0], centers[1], centers[2] = x[0], y[1] + 0.01, centers[3]
    weights = np.arange(1, 7)
    for delta in (0.0, 0.1, 5.0):
        image_active = np.sum((x - centers) ** 2, axis=1) - delta
        text_active = np.sum((y - centers) ** 2, axis=1) - delta
        prefix = f"semantic/delta={delta}"
        np.testing.assert_allclose(results[f"{prefix}/image_rows"], np.maximum(image_active, 0), atol=1e-14)
        np.testing.assert_allclose(results[f"{prefix}/text_rows"], np.maximum(text_active, 0), atol=1e-14)
        d_image = (weights * (image_active > 0))[:, None] * 2 * (x - centers)
        d_text = 2.0 * (text_active > 0)[:, None] * 2 * (y - centers)
        np.testing.assert_allclose(results[f"{prefix}/value"], np.sum(weights * np.maximum(image_active, 0))
                                   + 2 * np.sum(np.maximum(text_active, 0)), rtol=1e-12)
        np.testing.assert_allclose(results[f"{prefix}/d_image"], d_image, atol=1e-12)
        np.testing.assert_allclose(results[f"{prefix}/d_text"], d_text, atol=1e-12)
        np.testing.assert_allclose(results[f"{prefix}/d_centers"], -d_image - d_text, atol=1e-12)
    assert not np.any(results["semantic/delta=5.0/d_image"][:5])  # rows within the hinge: no gradient


def _repulsion(centers, delta):
    distances = np.sum((centers[:, None] - centers[None]) ** 2, axis=-1)
    hinge = np.maximum(2 * delta - distances, 0) * (1 - np.eye(len(centers)))
    # d/dc_k of sum_{k1 != k2} [2 delta - |c_k1 - c_k2|^2]+: each ordered pair with k in it, -2 (c_k - c_other).
    active = (hinge > 0).astype(float)
    gradient = -4 * (active.sum(axis=1)[:, None] * centers - active @ centers)
    return hinge.sum(), gradient


def test_tensorflow_repulsion_matches_numpy(backend_results):
    results = backend_results("centers.py", "tensorflow")
    rng = np.random.default_rng(11)
    centers = rng.normal(size=(5, 4)) * 0.3
    centers[4] = centers[0]
    for name, points in (("close", centers), ("spread", np.eye(5, 4) * 3.0)):
        value, gradient = _repulsion(points, 0.2)
        for chunk in (1, 2, 1024):
            np.testing.assert_allclose(results[f"repulsion/{name}/chunk={chunk}/value"], value, rtol=1e-12)
            np.testing.assert_allclose(results[f"repulsion/{name}/chunk={chunk}/d_centers"], gradient, atol=1e-12)
    assert results["repulsion/close/chunk=2/value"] > 0
    assert results["repulsion/spread/chunk=2/value"] == 0


def test_tensorflow_quantized_terms_and_cross_entropy_match_numpy(backend_results):
    results = backend_results("centers.py", "tensorflow")
    rng = np.random.default_rng(12)
    b, nq, d = 5, 4, 3
    x, y = _unit(rng, b, d), _unit(rng, b, d)
    wx, wy = _softmax(rng.normal(size=(b, nq))), _softmax(rng.normal(size=(b, nq)) * 4)
    wy[0] = np.eye(nq)[2]
    centers = rng.normal(size=(nq, d)) * 0.4
    centers[1], centers[3] = centers[0] + 0.05, x[2]
    for delta, a_c in ((0.0, 1.0), (0.3, 1.5), (0.3, 0.0)):
        prefix = f"quantized/delta={delta}/a_c={a_c}"
        for key, v, w in (("image", x, wx), ("text", y, wy)):
            hinge = np.maximum(np.sum((v[:, None] - centers[None]) ** 2, axis=-1) - delta, 0)
            np.testing.assert_allclose(results[f"{prefix}/{key}_rows"], np.sum(w * hinge, axis=1), atol=1e-12)
        np.testing.assert_allclose(results[f"{prefix}/repulsion_rows"], np.full(b, a_c * _repulsion(centers, delta)[0]
                                                                                / b), atol=1e-12)
        hinge_x = np.maximum(np.sum((x[:, None] - centers[None]) ** 2, axis=-1) - delta, 0)
        np.testing.assert_allclose(results[f"{prefix}/d_image_weights"], np.arange(1, b + 1)[:, None] * hinge_x,
                                   atol=1e-12)

    rng = np.random.default_rng(13)
    image_logits, text_logits = rng.normal(size=(5, 7)) * 3, rng.normal(size=(5, 7)) * 3
    image_logits[1] = 0.0
    text_logits[2] = np.where(np.arange(7) == 4, 60.0, -60.0)
    index = np.array([0, 6, 3, 3, 1])
    for key, logits, weight in (("image", image_logits, np.arange(1, 6)), ("text", text_logits, np.full(5, 2.0))):
        log_softmax = logits - np.log(np.sum(np.exp(logits - logits.max(1, keepdims=True)), axis=1,
                                             keepdims=True)) - logits.max(1, keepdims=True)
        np.testing.assert_allclose(results[f"cross_entropy/{key}_rows"], -log_softmax[np.arange(5), index],
                                   rtol=1e-12)
        gradient = weight[:, None] * (np.exp(log_softmax) - np.eye(7)[index])
        np.testing.assert_allclose(results[f"cross_entropy/d_{key}_logits"], gradient, atol=1e-12)
    np.testing.assert_allclose(results["cross_entropy/text_rows"][2], 120.0, rtol=1e-12)


def test_tensorflow_scale_gradient_and_layer(backend_results):
    results = backend_results("centers.py", "tensorflow")
    np.testing.assert_allclose(results["scale_gradient/value"], 3 * (1.5 + 4.0))
    np.testing.assert_allclose(results["scale_gradient/d_value"], [0.75, -1.5])
    assignments = results["layer/assignments"]
    np.testing.assert_allclose(assignments.sum(axis=1), 1.0, rtol=1e-12)
    rng = np.random.default_rng(14)
    kernel, bias = rng.normal(size=(5, 3)) * 2, rng.normal(size=(3,))
    rng.normal(size=(3, 5))  # the centres
    embeddings = _unit(rng, 4, 5)
    embeddings[3] = 0.0
    np.testing.assert_allclose(assignments, _softmax(embeddings @ kernel + bias), rtol=1e-12)


@pytest.mark.parametrize("backend", ("tensorflow",) + BACKENDS)
def test_invalid_image_index_is_refused(backend_results, backend):
    results = backend_results("centers_checks.py", backend)
    for name, value in results.items():
        assert value.all(), name


def test_tensorflow_loss_call_is_the_sum_of_its_terms(backend_results):
    calls = backend_results("centers_loss_call.py", "tensorflow")
    assert {name.split("/")[0] for name in calls} == {"semantic", "quantized", "cross_entropy"}
    for name, value in calls.items():
        assert np.all(np.isfinite(value)), name


@pytest.mark.parametrize("backend", BACKENDS)
def test_loss_call_equals_tensorflow(backend_results, backend):
    reference = backend_results("centers_loss_call.py", "tensorflow")
    results = backend_results("centers_loss_call.py", backend)
    assert set(results) == set(reference)
    for name in reference:
        np.testing.assert_allclose(results[name], reference[name], err_msg=name, **_tolerance(backend, reference[name]))

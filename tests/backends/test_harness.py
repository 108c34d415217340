"""The cross-backend harness itself: one small case gives the same value and gradients on every backend, and each
backend matches numpy (where TensorFlow is not installed, the numpy checks still run on the others)."""

import numpy as np
import pytest

ALL_BACKENDS = ("tensorflow", "jax", "torch")


def _oracle():
    rng = np.random.default_rng(0)
    image, text = rng.normal(size=(4, 3)), rng.normal(size=(4, 3))
    image = image / np.linalg.norm(image, axis=1, keepdims=True)
    text = text / np.linalg.norm(text, axis=1, keepdims=True)
    similarity = image @ text.T
    return np.maximum(0.0, 0.2 + similarity - np.diag(similarity)[:, None]).sum()


@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_each_backend_matches_numpy(backend_results, backend):
    results = backend_results("example_similarity.py", backend)
    # 1e-6, the cross-backend tolerance: Keras 3.15 runs some float64 ops (matmul, tanh) in float32 on JAX
    # and PyTorch, so they agree with numpy to about 1e-8 there, to 1e-15 on TensorFlow.
    np.testing.assert_allclose(results["value"], _oracle(), rtol=1e-12 if backend == "tensorflow" else 1e-6)


@pytest.mark.parametrize("backend", ("jax", "torch"))
def test_backend_equals_tensorflow(assert_matches_tensorflow, backend):
    assert_matches_tensorflow("example_similarity.py", backend, rtol=1e-6, atol=1e-9)

"""The callbacks' arithmetic on every backend: Eq. 13's adaptive margins (Malali & Keller, Sec. 3.5) every q
batches, the checkpoint's finite-weights check and the shared variable reads give TensorFlow's results on JAX and
PyTorch, and TensorFlow's are Eq. 13 worked by hand."""

import numpy as np
import pytest

BACKENDS = ("jax", "torch")


@pytest.mark.parametrize("backend", BACKENDS)
def test_backend_equals_tensorflow(assert_matches_tensorflow, backend):
    assert_matches_tensorflow("centers_callbacks.py", backend, rtol=1e-6)


def test_tensorflow_is_equation_13_by_hand(backend_results):
    results = backend_results("centers_callbacks.py", "tensorflow")
    # m <- min(c m, cap) when the window's share M > r (c = 1.5, r = 0.8, cap = 1): x from 0.2, y from 0.95.
    np.testing.assert_allclose(results["margins"], [[0.3, 1.0], [0.3, 1.0], [0.3, 1.0], [0.45, 1.0]], rtol=1e-6)
    np.testing.assert_allclose(results["shares"], [[0.9, 0.9], [0.8, 0.1], [-1.0, 1.0], [1.0, 1.0]])  # -1: none used
    assert results["resets"] == 4
    np.testing.assert_allclose(results["epoch_logs"], [0.45, 1.0, 1.0, 1.0], rtol=1e-6)
    assert results["finite_before"] == 1 and results["finite_after_nan"] == 0
    np.testing.assert_array_equal(results["is_variable"], [1.0, 0.0])

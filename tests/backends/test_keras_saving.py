"""A `.keras` round trip of a compiled DualEncoder continues training with the same losses, on every backend
(issue 47, item 4; tests/backend_cases/keras_saving.py)."""

import numpy as np
import pytest


@pytest.mark.parametrize("backend", ("tensorflow", "jax", "torch"))
def test_a_loaded_keras_file_continues_training_with_the_same_loss(backend_results, backend):
    results = backend_results("keras_saving.py", backend)
    assert results["losses_named"] == 1.0 and results["nce_weight"] == 0.5
    np.testing.assert_array_equal(results["steps"], [5.0, 5.0])  # 3 steps before the save, 2 after, on both
    # The same computation from the same state: equal to float rounding (Keras runs some float64 ops in float32 on
    # JAX and PyTorch, tests/backends/test_harness.py).
    np.testing.assert_allclose(results["reloaded_loss"], results["continued_loss"], rtol=1e-6)
    np.testing.assert_allclose(results["reloaded_nce"], results["continued_nce"], rtol=1e-6)
    np.testing.assert_allclose(results["logit_scale"][1], results["logit_scale"][0], rtol=1e-6)

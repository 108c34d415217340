"""A `.keras` round trip of a compiled DualEncoder continues training with the same losses and the state a loss keeps
outside the optimizer (adaptive margins and their counters), on every backend (issue 47, item 4;
tests/backend_cases/keras_saving.py)."""

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
    # The adaptive margins (0.35, 0.05, set after training) and the counters of satisfied and used negatives (3 steps
    # of 8 rows, both directions: 48 used) come back from the file, and the loss continues with them.
    saved, loaded = results["adaptive_state"]
    np.testing.assert_allclose(saved[:2], [0.35, 0.05], rtol=1e-6)
    assert saved[3] == 48 and 0 <= saved[2] <= 48
    np.testing.assert_array_equal(loaded, saved)
    np.testing.assert_allclose(results["reloaded_adaptive"], results["continued_adaptive"], rtol=1e-6)


@pytest.mark.parametrize("backend", ("tensorflow", "jax"))
def test_a_loaded_keras_file_continues_the_centres_optimizer_groups(backend_results, backend):
    """The semantic centres' losses own parameters and optimizers (optimizer groups): a `.keras` round trip brings
    back the centres, the index heads and their optimizers' state, and training continues with the same losses
    (PyTorch trains no optimizer groups: DualEncoder.compile refuses them there)."""
    results = backend_results("keras_saving.py", backend)
    np.testing.assert_array_equal(results["centres_steps"], [3.0, 3.0])
    np.testing.assert_allclose(results["centres_reloaded"], results["centres_continued"], rtol=1e-6)

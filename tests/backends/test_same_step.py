"""The demo's training step gives the same weights and optimizer state on TensorFlow, JAX and PyTorch (issue 46,
item 6; tests/backend_cases/same_training_step.py says what the step holds and docs/backends.md what it found)."""

import numpy as np
import pytest


def _comparable(name, value):
    """Adam's second moment in the gradient's units (its square root), as the first moment is: v holds g^2, so a
    relative rounding difference in g shows twice over in v."""
    return np.sqrt(value) if name.endswith("/velocity") else value


@pytest.mark.parametrize("backend", ("jax", "torch"))
def test_the_demo_step_equals_tensorflows(backend_results, backend):
    reference = backend_results("same_training_step.py", "tensorflow")
    results = backend_results("same_training_step.py", backend)
    assert set(results) == set(reference)
    kinds = {name.rsplit("/", 1)[-1] for name in reference if name.startswith("optimizer/")}
    assert {"momentum", "velocity", "iteration"} <= kinds
    np.testing.assert_array_equal(results["optimizer/0/iteration"], 2)
    for name in reference:
        expected, actual = _comparable(name, reference[name]), _comparable(name, results[name])
        # 1e-5 of each array's scale. The case runs in float64, where Keras 3.15 still computes some ops in float32
        # on JAX and PyTorch (PyTorch's matmul, the GRU's activations): measured up to 3e-6 (JAX) and 5e-6
        # (PyTorch) here; TensorFlow's summed-slice gradient before the fix was off by far more (docs/backends.md).
        scale = max(float(np.max(np.abs(expected))), 1e-12)
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5 * scale, err_msg=name)

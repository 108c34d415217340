"""The angular and neighbourhood losses on JAX and PyTorch equal TensorFlow's (value and gradients, float64), and
TensorFlow's equal a numpy loop oracle of docs/methods.md#angular on the same inputs."""

import math

import numpy as np
import pytest

CASE = "losses_angular.py"


def _unit(rows):
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def _npair_oracle(anchors, positives, pool, mask, angle):
    tan2 = math.tan(math.radians(angle)) ** 2
    total = 0.0
    for i in range(len(anchors)):
        terms = [4 * tan2 * (anchors[i] + positives[i]) @ pool[j] - 2 * (1 + tan2) * anchors[i] @ positives[i]
                 for j in range(len(pool)) if mask[i, j]]
        total += math.log(1 + sum(math.exp(t) for t in terms))
    return total


def test_tensorflow_matches_the_loop_oracle(backend_results):
    rng = np.random.default_rng(4)
    image, text = _unit(rng.normal(size=(6, 5))), _unit(rng.normal(size=(6, 5)))
    lonely = np.zeros((6, 6), dtype=bool)
    lonely[1:, :] = ~np.eye(6, dtype=bool)[1:, :]
    results = backend_results(CASE, "tensorflow")
    for angle in (45.0, 30.0):
        np.testing.assert_allclose(results[f"angular_npair_{int(angle)}"],
                                   _npair_oracle(image, text, text, lonely, angle), rtol=1e-10)
    assert results["coverage"] == pytest.approx(4 / 6)


@pytest.mark.parametrize("backend", ("jax", "torch"))
def test_backend_equals_tensorflow(assert_matches_tensorflow, backend):
    # 1e-6 relative, 1e-9 absolute: Keras computes some float64 ops in float32 off TensorFlow (harness).
    assert_matches_tensorflow(CASE, backend, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("backend", ("tensorflow", "jax", "torch"))
def test_relevance_sample_keeps_a_sample_of_what_it_was_offered(backend_results, backend):
    results = backend_results("relevance_sample.py", backend)
    offered = np.delete(np.arange(12, dtype=np.float32) / 10, [0, 11])
    np.testing.assert_allclose(results["roomy_sorted"], np.sort(offered), rtol=1e-7)
    assert results["roomy_offered"] == 10 and results["tight_offered"] == 30
    assert results["tight_size"] == 4 and results["tight_from_offered"] == 1.0

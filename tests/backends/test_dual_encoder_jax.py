"""DualEncoder.fit on JAX (and PyTorch): Keras' own trainer over `compute_loss`, from fixed weights, equals kitm's
TensorFlow training step (tests/backend_cases/layers_dual_encoder.py); the loss's own variable (a learnable logit
scale trained by the model's optimizer) is trained there too; TensorFlow-only features are refused at compile.

Tolerance: float32 rounding, not float64's, because Keras 3.15.1 computes some float64 ops in float32 on JAX and
PyTorch (tests/backends/test_layers.py), and six optimizer steps carry it along.
"""

import numpy as np
import pytest

BACKENDS = ("jax", "torch")
CASE = "layers_dual_encoder.py"


def _compare(results, reference, atol=2e-6):
    for name in reference:
        np.testing.assert_allclose(results[name], reference[name], rtol=1e-5, atol=atol, err_msg=name)


def _trains(results):
    losses = results["loss"]
    assert losses.shape == (6,) and np.all(np.isfinite(losses))
    assert losses[-1] < losses[0]
    np.testing.assert_allclose(sum(results[name] for name in results if name.startswith("term/")), losses,
                               rtol=1e-6)


def test_tensorflow_fit_with_the_ops_loss_trains_it_and_its_scale(backend_results):
    results = backend_results(CASE, "tensorflow")
    _trains(results)
    assert abs(float(results["log_scale"]) - np.log(5.0)) > 1e-3
    np.testing.assert_allclose(np.linalg.norm(results["image"], axis=1), 1.0, rtol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_fit_with_a_keras_ops_loss_equals_tensorflow(backend_results, backend):
    reference = backend_results(CASE, "tensorflow")
    results = backend_results(CASE, backend)
    _trains(results)
    _compare(results, reference)


@pytest.mark.parametrize("backend", BACKENDS)
def test_compile_refuses_tensorflow_only_features_naming_backend_and_feature(backend_results, backend):
    results = backend_results(CASE, backend)
    assert float(results["refuses_grad_cache"]) == 1.0
    # Losses with optimizers of their own train on JAX (below); PyTorch refuses them, naming the backend.
    assert float(results["refuses_optimizer_groups"]) == (1.0 if backend == "torch" else 0.0)


@pytest.mark.parametrize("backend", ["jax"])
def test_fit_with_losses_that_own_optimizers_equals_tensorflow(backend_results, backend):
    """The semantic centres (SGD + momentum) and the image-index heads (Adam) beside the triplet: five steps of fit on
    JAX apply each group's optimizer as TensorFlow's step does (tests/backend_cases/layers_dual_encoder_centers.py)."""
    reference = backend_results("layers_dual_encoder_centers.py", "tensorflow")
    assert np.all(np.diff(reference["loss"]) < 0) and float(reference["centers_steps"]) == 5
    assert np.abs(reference["centers"]).max() > 0.1  # the centres moved from their zeros
    results = backend_results("layers_dual_encoder_centers.py", backend)
    for name in reference:  # float32 rounding (module docstring), which Adam's normalised steps carry along: 1e-5
        np.testing.assert_allclose(results[name], reference[name], rtol=1e-5, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("backend", BACKENDS)
def test_fit_with_kitm_triplet_loss_equals_tensorflow(backend_results, backend):
    reference = backend_results("layers_dual_encoder_triplet.py", "tensorflow")
    _trains(reference)
    results = backend_results("layers_dual_encoder_triplet.py", backend)
    _trains(results)
    # The case's SGD step of 0.5 over the sum of hinges carries float32 rounding along further than the InfoNCE
    # case does: embeddings (unit vectors) 7.3e-6 apart on PyTorch on an Intel Xeon, within 2e-6 on AMD EPYC.
    _compare(results, reference, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_fit_with_loss_state_equals_tensorflow(backend_results, backend):
    """The hardest-negative warm-up's step count and the re-clustered ladder's sample and thresholds advance inside
    the step on JAX as on TensorFlow (tests/backend_cases/layers_dual_encoder_state.py)."""
    reference = backend_results("layers_dual_encoder_state.py", "tensorflow")
    # The case exercises what it claims: the warm-up changes the first steps, the ladder re-clusters 3 times
    # from all 2 x 56 negatives' values offered since the previous update.
    assert not np.allclose(reference["warmup/loss"][:3], reference["hardest/loss"][:3])
    np.testing.assert_array_equal(reference["ladder/sampled"], [112, 112, 112])
    assert np.all(np.isfinite(reference["ladder/thresholds"]))
    results = backend_results("layers_dual_encoder_state.py", backend)
    for name in reference:
        np.testing.assert_allclose(results[name], reference[name], rtol=1e-5, atol=2e-6, err_msg=name)

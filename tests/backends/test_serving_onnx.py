"""The ONNX towers (kitm.serving.onnx) under onnxruntime equal the model they were written from on TensorFlow and
JAX, and the two backends' models (the same weights) equal each other; PyTorch refuses with a message naming the
backends that convert (tests/backend_cases/serving_onnx.py)."""

import importlib.util

import numpy as np
import pytest

CASE = "serving_onnx.py"


def _skip_without_jax2onnx():
    """JAX's towers convert with jax2onnx, which kitm does not depend on (docs/serving.md: `pip install jax2onnx`):
    where JAX is installed without it, the JAX cases skip, saying so, as they do where JAX is absent."""
    if importlib.util.find_spec("jax2onnx") is None:
        pytest.skip("jax2onnx is not installed (pip install jax2onnx): JAX's towers are not converted here")


@pytest.mark.parametrize("backend", ("tensorflow", "jax"))
def test_the_onnx_towers_embed_as_the_model(backend_results, backend):
    if backend == "jax":
        _skip_without_jax2onnx()
    results = backend_results(CASE, backend)
    assert results["files"] == 1.0
    np.testing.assert_allclose(results["onnx_text"], results["model_text"], atol=1e-5)
    np.testing.assert_allclose(results["onnx_image"], results["model_image"], atol=1e-5)
    np.testing.assert_allclose(results["onnx_text_one"], results["model_text"][1:2], atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(results["onnx_text"], axis=1), 1.0, atol=1e-5)


def test_jax_and_tensorflow_towers_are_the_same_model(backend_results):
    _skip_without_jax2onnx()
    tensorflow, jax = backend_results(CASE, "tensorflow"), backend_results(CASE, "jax")
    for name in ("model_text", "model_image"):
        np.testing.assert_allclose(jax[name], tensorflow[name], atol=1e-6, err_msg=name)


def test_pytorch_refuses_naming_the_backends_that_convert(backend_results):
    assert backend_results(CASE, "torch")["refused"] == 1.0

"""The ONNX towers (kitm.serving.onnx) under onnxruntime equal the model they were written from on TensorFlow and
JAX, and the two backends' models (the same weights) equal each other; PyTorch refuses with a message naming the
backends that convert (tests/backend_cases/serving_onnx.py)."""

import numpy as np
import pytest

CASE = "serving_onnx.py"


@pytest.mark.parametrize("backend", ("tensorflow", "jax"))
def test_the_onnx_towers_embed_as_the_model(backend_results, backend):
    results = backend_results(CASE, backend)
    assert results["files"] == 1.0
    np.testing.assert_allclose(results["onnx_text"], results["model_text"], atol=1e-5)
    np.testing.assert_allclose(results["onnx_image"], results["model_image"], atol=1e-5)
    np.testing.assert_allclose(results["onnx_text_one"], results["model_text"][1:2], atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(results["onnx_text"], axis=1), 1.0, atol=1e-5)


def test_jax_and_tensorflow_towers_are_the_same_model(backend_results):
    tensorflow, jax = backend_results(CASE, "tensorflow"), backend_results(CASE, "jax")
    for name in ("model_text", "model_image"):
        np.testing.assert_allclose(jax[name], tensorflow[name], atol=1e-6, err_msg=name)


def test_pytorch_refuses_naming_the_backends_that_convert(backend_results):
    assert backend_results(CASE, "torch")["refused"] == 1.0

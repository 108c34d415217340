"""kitm's layers on JAX and PyTorch equal TensorFlow's (tests/backend_cases/layers_encoders.py), and on TensorFlow
the one-product projections equal Keras' einsum and the packed GRU equals the masked one.

Tolerance: Keras 3.15.1 computes some float64 ops in float32 on JAX and PyTorch (its `dtypes.result_type` returns
float32 for two float64 operands, which JAX's `ops.tanh` and PyTorch's `ops.matmul` use as their output dtype), so
the comparison allows float32 rounding (atol 1e-6 on values of order 1) rather than float64's.
"""

import numpy as np
import pytest

BACKENDS = ("jax", "torch")
CASE = "layers_encoders.py"


@pytest.mark.parametrize("backend", BACKENDS)
def test_backend_equals_tensorflow(assert_matches_tensorflow, backend):
    assert_matches_tensorflow(CASE, backend, rtol=1e-6, atol=1e-6)


def test_tensorflow_flat_projections_equal_einsum(backend_results):
    results = backend_results(CASE, "tensorflow")
    flat = [name for name in results if "/flat/" in name]
    assert len(flat) == 9
    for name in flat:
        np.testing.assert_allclose(results[name], results[name.replace("/flat/", "/einsum/")], rtol=1e-12,
                                   atol=1e-14, err_msg=name)


def test_tensorflow_packed_gru_equals_masked(backend_results):
    results = backend_results(CASE, "tensorflow")
    packed = [name for name in results if "packed" in name]
    assert len(packed) == 14
    for name in packed:
        np.testing.assert_allclose(results[name], results[name.replace("packed", "masked")], rtol=1e-12,
                                   atol=1e-14, err_msg=name)


def test_tensorflow_text_encoder_trimming_changes_nothing_and_empty_caption_is_zero(backend_results):
    results = backend_results(CASE, "tensorflow")
    for name in [n for n in results if n.startswith("text/") and "/trim/" in n]:
        np.testing.assert_array_equal(results[name], results[name.replace("/trim/", "/full/")], err_msg=name)
        np.testing.assert_array_equal(results[name][3], 0.0)  # the caption without a word
        assert np.all(np.abs(results[name][[0, 1, 2, 4]]).sum(axis=1) > 0)


def test_tensorflow_masked_gru_matches_numpy(backend_results):
    """`masked_gru` (the other backends' packed recurrence) against the cell's equations in numpy."""
    results = backend_results(CASE, "tensorflow")
    rng = np.random.default_rng(10)
    inputs, lengths = rng.normal(size=(5, 7, 4)), np.array([5, 1, 7, 0, 3])
    kernel, recurrent, bias = (rng.normal(scale=0.5, size=s) for s in ((4, 9), (3, 9), (2, 9)))
    readout = np.random.default_rng(11).normal(size=(5, 3))

    def sigmoid(v):
        return 1 / (1 + np.exp(-v))

    for reverse in (False, True):
        final = np.zeros((5, 3))
        for row in range(5):
            h = np.zeros(3)
            steps = range(lengths[row])
            for t in (reversed(steps) if reverse else steps):
                x_z, x_r, x_g = np.split(inputs[row, t] @ kernel + bias[0], 3)
                h_z, h_r, h_g = np.split(h @ recurrent + bias[1], 3)
                z, r = sigmoid(x_z + h_z), sigmoid(x_r + h_r)
                h = z * h + (1 - z) * np.tanh(x_g + r * h_g)
            final[row] = h
        key = f"gru/masked/{'reverse' if reverse else 'forward'}/value"
        np.testing.assert_allclose(results[key], (final * readout).sum(), rtol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_hub_towers_equal_tensorflow(backend_results, backend):
    """tests/backend_cases/layers_hub_towers.py: the towers' normalisation and pooling over tiny keras-hub
    backbones, and LoRA on a CLIP image tower (same tolerance as above)."""
    pytest.importorskip("keras_hub")
    reference = backend_results("layers_hub_towers.py", "tensorflow")
    results = backend_results("layers_hub_towers.py", backend)
    assert set(results) == set(reference)
    # One layer of 2 heads of 4: query and value adapted, each A [8, 2, 2] + B [2, 4] + its bias [2, 4].
    assert reference["clip_lora/adapted"] == 2 and reference["clip_lora/trainable"] == 2 * (32 + 8 + 8)
    for name in reference:
        np.testing.assert_allclose(results[name], reference[name], rtol=1e-6, atol=1e-6, err_msg=name)


def test_the_gru_recurrence_defaults_to_keras_gru_on_jax():
    """`recurrence="auto"` is Keras' masked GRU on JAX (faster there than kitm's masked scan of "packed";
    docs/performance.md), whatever the trimming."""
    import os
    import subprocess
    import sys

    pytest.importorskip("jax")
    code = ("from kitm.layers import GRUTextEncoder\n"
            "print(GRUTextEncoder(5, 2, 2).recurrence, GRUTextEncoder(5, 2, 2, trim_padding=False).recurrence,\n"
            "      GRUTextEncoder(5, 2, 2, recurrence='packed').recurrence)\n")
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["masked", "masked", "packed"]

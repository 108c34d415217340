"""kitm.metrics on every backend: `mean_pairwise_cosine`, `EmbeddingCollapse` and `RelevanceStatistics` give
TensorFlow's figures on JAX and PyTorch, eagerly and inside a compiled step, and TensorFlow's match numpy."""

import numpy as np
import pytest

BACKENDS = ("jax", "torch")
# The collapse statistic is float32 by design (kitm.metrics.collapse); the relevance sums are float64.
FLOAT32 = {"rtol": 1e-6, "atol": 1e-6}


def _compare(backend_results, case, backend):
    reference = backend_results(case, "tensorflow")
    results = backend_results(case, backend)
    assert set(results) == set(reference)
    for name in reference:
        np.testing.assert_allclose(results[name], reference[name], err_msg=name, **FLOAT32)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", ["metrics_collapse.py", "metrics_relevance.py", "metrics_compiled.py"])
def test_backend_equals_tensorflow(backend_results, backend, case):
    _compare(backend_results, case, backend)


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_relevance_statistics_compiled_equals_tensorflow(backend_results, backend):
    _compare(backend_results, "metrics_compiled_relevance.py", backend)


def _cosine_oracle(x):
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    unit = np.where(norms > 0, x / np.maximum(norms, 1e-6), 0.0)
    b = len(x)
    if b < 2:
        return 0.0
    gram = unit @ unit.T
    return (gram.sum() - np.trace(gram)) / (b * (b - 1))


def test_tensorflow_matches_numpy(backend_results):
    results = backend_results("metrics_collapse.py", "tensorflow")
    rng = np.random.default_rng(20)
    random = rng.normal(size=(6, 4))
    collapsed = np.tile(rng.normal(size=(1, 4)), (5, 1)) * np.arange(1, 6)[:, None]
    zero_row = np.concatenate([rng.normal(size=(3, 4)), np.zeros((1, 4))])
    for name, x in (("random", random), ("collapsed", collapsed), ("zero_row", zero_row),
                    ("opposite", np.array([[1.0, 0.0], [-1.0, 0.0]])), ("single_row", rng.normal(size=(1, 4)))):
        np.testing.assert_allclose(results[f"cosine/{name}"], _cosine_oracle(x), atol=1e-6, err_msg=name)
    expected = np.mean([_cosine_oracle(x) for x in (random, collapsed, zero_row)])
    np.testing.assert_allclose(results["metric/collapse/image_cosine"], expected, atol=1e-6)
    np.testing.assert_allclose(results["metric/collapse/text_cosine"], expected, atol=1e-6)  # -x reversed: same

    results = backend_results("metrics_relevance.py", "tensorflow")
    rng = np.random.default_rng(21)
    first = rng.uniform(size=(6, 6)).astype(np.float32).astype(np.float64)
    second = rng.uniform(size=(4, 4))
    index = np.array([0, 0, 1, 2, 3, 3])
    negatives = np.concatenate([first[index[:, None] != index[None]], second[~np.eye(4, dtype=bool)]])
    positives = np.concatenate([np.diag(first), np.diag(second)])
    np.testing.assert_allclose(results["pooled/relevance/negative_mean"], negatives.mean(), rtol=1e-6)
    np.testing.assert_allclose(results["pooled/relevance/negative_std"], negatives.std(), rtol=1e-5)
    np.testing.assert_allclose(results["pooled/relevance/positive_mean"], positives.mean(), rtol=1e-6)
    np.testing.assert_allclose(results["sums/negative_count"], len(negatives))
    np.testing.assert_allclose(results["sums/negative_sum"], negatives.sum(), rtol=1e-12)
    assert results["reset/relevance/negative_mean"] == 0.0


def test_relevance_statistics_on_jax_without_64_bit_types_accumulate_in_float32_without_warnings():
    """JAX's default has no float64: the sums are float32 there (no truncation warning at every step) and the
    figures still match numpy (hand-made 3 x 3 relevance: negatives 0.1..0.6, positives 0.9..1.0)."""
    import os
    import subprocess
    import sys

    pytest.importorskip("jax")
    code = ("import warnings; warnings.simplefilter('error')\n"
            "import numpy as np\n"
            "from kitm.metrics import RelevanceStatistics\n"
            "m = RelevanceStatistics()\n"
            "r = np.array([[0.9, 0.1, 0.2], [0.3, 1.0, 0.4], [0.5, 0.6, 0.95]], 'float32')\n"
            "m.update_state({'relevance': r, 'image_index': np.arange(3)})\n"
            "print(m.accumulator_dtype, *[float(v) for v in m.result().values()])\n")
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu", "JAX_ENABLE_X64": "0"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    dtype, negative_mean, negative_std, positive_mean = done.stdout.split()
    negatives = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    assert dtype == "float32"
    np.testing.assert_allclose([float(negative_mean), float(negative_std), float(positive_mean)],
                               [negatives.mean(), negatives.std(), np.mean([0.9, 1.0, 0.95])], rtol=1e-5)

"""kitm.metrics.collapse: the mean pairwise cosine of a batch's embeddings against a numpy oracle, averaged over
batches."""

import numpy as np

import kitm  # noqa: F401  (selects the TensorFlow backend)
from kitm.metrics import EmbeddingCollapse, mean_pairwise_cosine


def pairwise_cosine_oracle(x):
    """Mean of the off-diagonal entries of the cosine matrix."""
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    c = x @ x.T
    b = len(x)
    return (c.sum() - np.trace(c)) / (b * (b - 1)) if b > 1 else 0.0


def test_mean_pairwise_cosine_matches_the_oracle_and_its_limits():
    rng = np.random.default_rng(0)
    for b, d in ((2, 3), (7, 5), (64, 16)):
        x = rng.normal(size=(b, d)) * rng.uniform(0.5, 3, size=(b, 1))  # rows of any norm
        np.testing.assert_allclose(float(mean_pairwise_cosine(x)), pairwise_cosine_oracle(x), atol=1e-5)
    same = np.tile(rng.normal(size=(1, 8)), (10, 1))
    np.testing.assert_allclose(float(mean_pairwise_cosine(same)), 1.0, atol=1e-5)  # collapsed
    np.testing.assert_allclose(float(mean_pairwise_cosine(np.eye(6))), 0.0, atol=1e-7)  # orthogonal
    np.testing.assert_allclose(float(mean_pairwise_cosine(np.array([[1.0, 0], [-1.0, 0]]))), -1.0, atol=1e-7)
    assert float(mean_pairwise_cosine(np.ones((1, 4)))) == 0.0  # no pair


def test_metric_averages_batches_and_resets():
    rng = np.random.default_rng(1)
    metric = EmbeddingCollapse()
    batches = [(rng.normal(size=(8, 4)), rng.normal(size=(8, 4))) for _ in range(3)]
    for image, text in batches:
        metric.update_state(None, {"image": image, "text": text})
    result = {key: float(value) for key, value in metric.result().items()}
    np.testing.assert_allclose(result["collapse/image_cosine"], np.mean([pairwise_cosine_oracle(i) for i, _ in batches]),
                               atol=1e-5)
    np.testing.assert_allclose(result["collapse/text_cosine"], np.mean([pairwise_cosine_oracle(t) for _, t in batches]),
                               atol=1e-5)
    metric.reset_state()
    assert float(metric.result()["collapse/image_cosine"]) == 0.0

"""RelevanceStatistics (kitm.metrics): the relevance of positives and negatives pooled over batches, against numpy."""

import numpy as np
import pytest

import kitm  # noqa: F401
from kitm.metrics import RelevanceStatistics


def test_relevance_statistics_pool_negatives_over_batches_like_numpy():
    rng = np.random.default_rng(0)
    metric = RelevanceStatistics()
    batches = []
    for _ in range(3):
        relevance = rng.uniform(size=(6, 6)).astype(np.float32)
        image_index = np.array([0, 0, 1, 2, 3, 3], np.int32)  # two captions of image 0 and of image 3
        metric.update_state({"relevance": relevance, "image_index": image_index})
        batches.append((relevance, image_index))
    negatives = np.concatenate([r[(i[:, None] != i[None, :])] for r, i in batches]).astype(np.float64)
    positives = np.concatenate([np.diag(r) for r, _ in batches])
    result = {key: float(value) for key, value in metric.result().items()}
    assert result["relevance/negative_mean"] == pytest.approx(negatives.mean(), rel=1e-6)
    assert result["relevance/negative_std"] == pytest.approx(negatives.std(), rel=1e-5)
    assert result["relevance/positive_mean"] == pytest.approx(positives.mean(), rel=1e-6)
    metric.update_state({"image_index": np.arange(6)})  # no relevance: nothing to pool
    assert float(metric.result()["relevance/negative_mean"]) == pytest.approx(negatives.mean(), rel=1e-6)
    metric.reset_state()
    assert float(metric.result()["relevance/negative_mean"]) == 0.0

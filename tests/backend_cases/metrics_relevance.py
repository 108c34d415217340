"""Backend cases: `RelevanceStatistics` pooled over batches (with and without image_index, a batch without relevance)."""

import numpy as np
from keras import ops

from kitm.metrics import RelevanceStatistics


def cases():
    rng = np.random.default_rng(21)
    metric = RelevanceStatistics()
    metric.update_state({"relevance": rng.uniform(size=(6, 6)).astype(np.float32),
                         "image_index": np.array([0, 0, 1, 2, 3, 3], np.int32)})
    metric.update_state({"relevance": rng.uniform(size=(4, 4))})
    metric.update_state({"image_index": np.arange(4)})  # no relevance: nothing to pool
    results = {f"pooled/{key}": value for key, value in metric.result().items()}
    results.update({f"sums/{key}": ops.convert_to_numpy(variable) for key, variable in metric.sums.items()})
    metric.reset_state()
    results.update({f"reset/{key}": value for key, value in metric.result().items()})
    return results

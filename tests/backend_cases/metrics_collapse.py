"""Backend cases: the collapse statistic `mean_pairwise_cosine` (float32 by design) and the epoch means of
`EmbeddingCollapse` over a few batches."""

import numpy as np

from kitm.metrics import EmbeddingCollapse, mean_pairwise_cosine


def cases():
    rng = np.random.default_rng(20)
    inputs = {
        "random": rng.normal(size=(6, 4)),
        "collapsed": np.tile(rng.normal(size=(1, 4)), (5, 1)) * np.arange(1, 6)[:, None],  # one direction
        "zero_row": np.concatenate([rng.normal(size=(3, 4)), np.zeros((1, 4))]),
        "opposite": np.array([[1.0, 0.0], [-1.0, 0.0]]),
        "single_row": rng.normal(size=(1, 4)),
        "float32": rng.normal(size=(5, 3)).astype(np.float32),
    }
    results = {f"cosine/{name}": mean_pairwise_cosine(value) for name, value in inputs.items()}
    metric = EmbeddingCollapse()
    for name in ("random", "collapsed", "zero_row"):
        metric.update_state(None, {"image": inputs[name], "text": inputs[name][::-1] * -1.0})
    results.update({f"metric/{key}": value for key, value in metric.result().items()})
    metric.reset_state()
    results.update({f"reset/{key}": value for key, value in metric.result().items()})
    return results

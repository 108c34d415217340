"""A backend case: the reclusterable ladder's relevance sample (bottom-k sampling) keeps every offered value while
fewer than its size were offered, and exactly `size` of them after; its counters."""

import numpy as np

from kitm.losses.reclusterable_ladder import RelevanceSample


def cases():
    values = np.arange(12, dtype=np.float32).reshape(3, 4) / 10
    mask = np.ones((3, 4), dtype=bool)
    mask[0, 0] = mask[2, 3] = False
    roomy = RelevanceSample(size=16, seed=3)
    roomy.update(values, mask)
    tight = RelevanceSample(size=4, seed=3)
    for _ in range(3):
        tight.update(values, mask)
    sample = tight.sample()
    return {"roomy_sorted": np.sort(roomy.sample()), "roomy_offered": roomy.offered_count(),
            "tight_size": sample.size, "tight_offered": tight.offered_count(),
            "tight_from_offered": float(np.isin(sample, values[mask]).all())}

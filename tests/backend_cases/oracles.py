"""Numpy loop oracles shared by the cross-backend loss tests (tests/backends/test_losses_core*.py), written from
docs/methods.md: the VSE++ triplet per row and the samplers' picks. Not a case file (it defines no `cases()`)."""

import numpy as np


def triplet_oracle(s, margin, hardest, image_index=None):
    """Per row: max (hardest) or sum over the negatives of [a + s[p, q] - s[p, p]]+, both directions; an anchor
    without a negative gives 0."""
    b = len(s)
    idx = np.arange(b) if image_index is None else np.asarray(image_index)
    aggregate = max if hardest else sum
    rows = np.zeros(b)
    for p in range(b):
        i2t = [max(0.0, margin + s[p, q] - s[p, p]) for q in range(b) if idx[q] != idx[p] and q != p]
        t2i = [max(0.0, margin + s[m, p] - s[p, p]) for m in range(b) if idx[m] != idx[p] and m != p]
        rows[p] = (aggregate(i2t) if i2t else 0.0) + (aggregate(t2i) if t2i else 0.0)
    return rows


def pick_oracle(scores, negative, axis, want):
    """Per anchor the first index of the max (want='max') or min score among its negatives; -1 without one."""
    if axis == 0:
        scores, negative = scores.T, negative.T
    picks = []
    for row, allowed in zip(scores, negative):
        candidates = [j for j in range(len(row)) if allowed[j]]
        best = -1
        for j in candidates:
            if best < 0 or ((row[j] > row[best]) if want == "max" else (row[j] < row[best])):
                best = j
        picks.append(best)
    return np.array(picks)

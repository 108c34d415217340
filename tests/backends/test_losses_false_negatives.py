"""False-negative filtering (kitm.losses.false_negatives) on every backend: each in-batch objective's per-anchor terms
equal numpy oracles written from the module's equations (docs/methods.md#false-negatives) on TensorFlow, JAX and
PyTorch, and the gradients on JAX and PyTorch equal TensorFlow's (tests/backend_cases/losses_false_negatives.py)."""

import pathlib
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "backend_cases"))
import losses_false_negatives as case  # noqa: E402  (the case file's inputs, for the oracles)

CASE = "losses_false_negatives.py"


def flags(relevance, rule):
    """(rows, columns): caption q flagged for image anchor p, image p flagged for caption anchor q."""
    settings = case.RULES[rule]
    if settings["false_negative_rule"] == "threshold":
        flagged = relevance >= settings["false_negative_threshold"]
        return flagged, flagged
    own = np.diag(relevance)
    margin = settings["false_negative_margin"]
    return relevance > own[:, None] - margin, relevance > own[None, :] - margin


def softmax_terms(logits, targets_of, excluded, axis):
    """Half of -sum_q target[q] log softmax over the kept candidates, per anchor along `axis` (1: rows)."""
    if axis == 0:
        logits, excluded = logits.T, excluded.T
    values = []
    for anchor, (row, out) in enumerate(zip(logits, excluded)):
        kept = ~out
        log_probability = row - np.log(np.exp(row[kept]).sum())
        target = targets_of(anchor, kept)
        values.append(-0.5 * sum(target[q] * log_probability[q] for q in range(len(row)) if kept[q]))
    return np.array(values)


def oracle(name, mode, rule, image, text, relevance):
    """{term: per-anchor values} of loss `name` with the filter (mode, rule)."""
    s = image @ text.T
    b = len(s)
    same = case.IMAGE_INDEX[:, None] == case.IMAGE_INDEX[None, :]
    row_flags, column_flags = flags(relevance, rule)
    if mode == "positive":
        row_positives, column_positives = same | row_flags, same | column_flags
        row_excluded = column_excluded = np.zeros_like(same)
    else:
        row_positives = column_positives = same
        row_excluded, column_excluded = row_flags & ~same, column_flags & ~same
    if name == "infonce":
        def uniform(positives):
            return lambda anchor, kept: positives[anchor] / positives[anchor].sum()
        return {"i2t": softmax_terms(5.0 * s, uniform(row_positives), row_excluded, 1),
                "t2i": softmax_terms(5.0 * s, uniform(column_positives.T), column_excluded, 0)}
    if name == "graded":
        def graded(positives, matrix):
            def targets(anchor, kept):
                raised = np.where(positives[anchor], matrix[anchor].max(), matrix[anchor]) / 0.2
                weights = np.where(kept, np.exp(raised - raised.max()), 0.0)
                return weights / weights.sum()
            return targets
        return {"i2t": softmax_terms(5.0 * s, graded(row_positives, relevance), row_excluded, 1),
                "t2i": softmax_terms(5.0 * s, graded(column_positives.T, relevance.T), column_excluded, 0)}
    if name == "siglip":
        def pair_terms(positives, excluded):
            z = 4.0 * s - 1.0
            y = np.where(positives, 1.0, -1.0)
            return np.where(excluded, 0.0, np.log1p(np.exp(-y * z)))
        return {"i2t": 0.5 * pair_terms(row_positives, row_excluded).sum(axis=1),
                "t2i": 0.5 * pair_terms(column_positives, column_excluded).sum(axis=0)}
    # The triplet and SAM: flagged candidates leave the negatives in either mode.
    row_negatives, column_negatives = ~same & ~row_flags, ~same & ~column_flags

    def hinges(margins_i2t, margins_t2i, aggregate):
        i2t, t2i = np.zeros(b), np.zeros(b)
        for p in range(b):
            costs = [max(0.0, margins_i2t(p, q) + s[p, q] - s[p, p]) for q in range(b) if row_negatives[p, q]]
            i2t[p] = aggregate(costs) if costs else 0.0
            costs = [max(0.0, margins_t2i(p, m) + s[m, p] - s[p, p]) for m in range(b) if column_negatives[m, p]]
            t2i[p] = aggregate(costs) if costs else 0.0
        return i2t, t2i

    def fixed(p, q):
        return 0.2

    if name.startswith("triplet"):
        i2t, t2i = hinges(fixed, fixed, max if name == "triplet_hardest" else sum)
        return {"i2t": i2t, "t2i": t2i}
    triplet_i2t, triplet_t2i = hinges(fixed, fixed, max)

    def hardest(scores, allowed):
        candidates = [j for j in range(b) if allowed[j]]
        return max(candidates, key=lambda j: (scores[j], -j)) if candidates else None  # the first of ties

    sam_i2t, sam_t2i = np.zeros(b), np.zeros(b)
    for p in range(b):
        n = hardest(s[p], row_negatives[p])
        if n is not None:
            sam_i2t[p] = max(0.0, min((relevance[p, p] - relevance[p, n]) / 3.0, 1.0) + s[p, n] - s[p, p])
        m = hardest(s[:, p], column_negatives[:, p])
        if m is not None:
            sam_t2i[p] = max(0.0, min((relevance[p, p] - relevance[m, p]) / 3.0, 1.0) + s[m, p] - s[p, p])
    return {"triplet_i2t": triplet_i2t, "triplet_t2i": triplet_t2i, "sam_i2t": sam_i2t, "sam_t2i": sam_t2i}


@pytest.mark.parametrize("backend", ("tensorflow", "jax", "torch"))
def test_every_in_batch_objective_filters_as_its_oracle(backend_results, backend):
    results = backend_results(CASE, backend)
    image, text, relevance = case.inputs()
    checked = 0
    for mode, rule in case.SETTINGS:
        for name in ("infonce", "graded", "siglip", "triplet_hardest", "triplet_sum", "sam"):
            expected = oracle(name, mode, rule, image, text, relevance)
            for term, values in expected.items():
                key = f"{name}/{mode}/{rule}/{term}"
                np.testing.assert_allclose(results[key], values, rtol=1e-6, atol=1e-9, err_msg=key)
                checked += 1
            total = sum(values.sum() for values in expected.values())
            np.testing.assert_allclose(results[f"{name}/{mode}/{rule}/value"], total, rtol=1e-6, err_msg=name)
            for grad in ("d_image", "d_text"):
                assert np.all(np.isfinite(results[f"{name}/{mode}/{rule}/{grad}"]))
    assert checked == 3 * (2 * 5 + 4)


def test_the_flags_differ_by_rule_and_by_direction():
    """The case's relevance flags what its docstring says: the threshold flags (2, 4) both ways, (3, 5) and the
    tie (0, 2); GISTEmbed's rule flags (3, 5) for image anchor 3 only, not for caption anchor 5."""
    _, _, relevance = case.inputs()
    rows, columns = flags(relevance, "threshold")
    assert rows[2, 4] and rows[4, 2] and rows[3, 5] and rows[0, 2]
    gist_rows, gist_columns = flags(relevance, "gist")
    assert gist_rows[3, 5] and not gist_columns[3, 5] and gist_rows[2, 4] and gist_columns[2, 4]


@pytest.mark.parametrize("backend", ("jax", "torch"))
def test_backend_gradients_equal_tensorflow(assert_matches_tensorflow, backend):
    # float32 rounding allowed: Keras computes some float64 ops in float32 on JAX and PyTorch
    # (tests/backends/test_harness.py); gradients here reach about 5.
    assert_matches_tensorflow(CASE, backend, rtol=1e-6, atol=1e-6)

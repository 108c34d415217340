"""kitm.losses.sam on JAX and PyTorch equals TensorFlow (values and gradients, float64,
tests/backend_cases/losses_core_sam.py), and TensorFlow equals numpy oracles of docs/methods.md#sam."""

import pathlib
import sys

import numpy as np
import pytest

BACKENDS = ("jax", "torch")
CASE = "losses_core_sam.py"
ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "backend_cases"))
import losses_core_sam as case  # noqa: E402
from oracles import pick_oracle, triplet_oracle  # noqa: E402


@pytest.mark.parametrize("backend", BACKENDS)
def test_backend_equals_tensorflow(assert_matches_tensorflow, backend):
    assert_matches_tensorflow(CASE, backend, rtol=1e-6, atol=1e-9)


def sam_oracle(s, r, n0, n1, tau, max_margin, pairing):
    """Per row, the module docstring's two pairings; an index outside [0, B) drops its term."""
    b = len(s)
    clip = (lambda m: m) if max_margin is None else (lambda m: min(m, max_margin))
    ok = lambda i: 0 <= i < b  # noqa: E731
    rows = np.zeros(b)
    for p in range(b):
        if pairing == "matched":
            if ok(n0[p]):
                rows[p] += max(0.0, clip((r[p, p] - r[p, n0[p]]) / tau) + s[p, n0[p]] - s[p, p])
            if ok(n1[p]):
                rows[p] += max(0.0, clip((r[p, p] - r[n1[p], p]) / tau) + s[n1[p], p] - s[p, p])
            continue
        ms = lambda k: clip((r[k, k] - r[k, n1[k]]) / tau)  # noqa: E731
        mi = lambda k: clip((r[k, k] - r[k, n0[k]]) / tau)  # noqa: E731
        if ok(n0[p]) and ok(n1[n0[p]]):
            rows[p] += max(0.0, ms(n0[p]) + s[p, n0[p]] - s[p, p])
        if ok(n1[p]) and ok(n0[n1[p]]):
            rows[p] += max(0.0, mi(n1[p]) + s[p, n1[p]] - s[n1[p], n1[p]])
    return rows


def test_tensorflow_matches_numpy(backend_results):
    results = backend_results(CASE, "tensorflow")
    for name, (image, text, image_index, relevance, captions, images) in case.inputs().items():
        s = image @ text.T
        for pairing in ("matched", "reference"):
            for max_margin in (1.0, None):
                want = sam_oracle(s, relevance, captions, images, 3.0, max_margin, pairing).sum()
                np.testing.assert_allclose(results[f"{name}/{pairing}_{max_margin}/value"], want, rtol=1e-12,
                                           atol=1e-12, err_msg=f"{name} {pairing} {max_margin}")
        negative = ~np.eye(len(s), dtype=bool) & (image_index[:, None] != image_index[None, :])
        for sampling in ("hardest", "easiest"):
            want_pick = "max" if sampling == "hardest" else "min"
            for pairing in ("matched", "reference"):
                key = f"{name}/class_{sampling}_{pairing}"
                n0 = results[f"{key}/negative_captions"].astype(int)
                n1 = results[f"{key}/negative_images"].astype(int)
                np.testing.assert_array_equal(n0, pick_oracle(s, negative, 1, want_pick), key)
                if pairing == "matched":
                    np.testing.assert_array_equal(n1, pick_oracle(s, negative, 0, want_pick), key)
                else:
                    np.testing.assert_array_equal(n1, pick_oracle(s - np.diag(s)[None, :], negative, 1, want_pick),
                                                  key)
                want = (triplet_oracle(s, 0.2, True, image_index)
                        + sam_oracle(s, relevance, n0, n1, 4.0, 1.0, pairing)).sum()
                np.testing.assert_allclose(results[f"{key}/value"], want, rtol=1e-12, atol=1e-12, err_msg=key)
        for draw in range(3):
            np.testing.assert_array_equal(results[f"{name}/random_valid_{draw}"], [1.0, 1.0])

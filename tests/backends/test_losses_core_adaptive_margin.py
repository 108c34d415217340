"""kitm.losses.adaptive_margin on JAX and PyTorch equals TensorFlow (values, gradients and counts, float64,
tests/backend_cases/losses_core_adaptive_margin.py), and TensorFlow equals a numpy oracle of Eqs. 10-11 (Malali &
Keller; docs/methods.md#adaptive-margins: a negative is satisfied when its hinge argument is <= 0)."""

import pathlib
import sys

import numpy as np
import pytest

BACKENDS = ("jax", "torch")
CASE = "losses_core_adaptive_margin.py"
ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "backend_cases"))
import losses_core_adaptive_margin as case  # noqa: E402


@pytest.mark.parametrize("backend", BACKENDS)
def test_backend_equals_tensorflow(assert_matches_tensorflow, backend):
    assert_matches_tensorflow(CASE, backend, rtol=1e-6, atol=1e-9)


def oracle(x, y, captions, images, margin_x, margin_y, squared, image_index=None):
    """(i2t [B], t2i [B], [satisfied_x, used_x, satisfied_y, used_y]); captions/images None: every negative."""
    def distance(a, b):
        d = np.sum((a - b) ** 2)
        return d if squared else np.sqrt(d)

    b = len(x)
    idx = np.arange(b) if image_index is None else image_index
    i2t, t2i, counts = np.zeros(b), np.zeros(b), np.zeros(4)
    for p in range(b):
        for direction, anchors, candidates, chosen, margin, out in ((0, x, y, captions, margin_x, i2t),
                                                                   (2, y, x, images, margin_y, t2i)):
            if chosen is None:
                negatives = [q for q in range(b) if q != p and idx[q] != idx[p]]
            else:
                negatives = [chosen[p]] if chosen[p] >= 0 else []
            for n in negatives:
                argument = distance(anchors[p], candidates[p]) - distance(anchors[p], candidates[n]) + margin
                out[p] += max(0.0, argument)
                counts[direction] += argument <= 0
                counts[direction + 1] += 1
    return i2t, t2i, counts


def closest(x, y, image_index, axis):
    """The hardest (closest) negative per anchor: captions of image anchors (axis 1), images of caption anchors."""
    d = np.linalg.norm(x[:, None, :] - y[None, :, :], axis=-1)
    negative = ~np.eye(len(x), dtype=bool) & (image_index[:, None] != image_index[None, :])
    d = np.where(negative, d, np.inf)
    return d.argmin(axis=axis)


def test_tensorflow_matches_numpy(backend_results):
    results = backend_results(CASE, "tensorflow")
    for name, (image, text, image_index, captions, images) in case.inputs().items():
        for squared in (False, True):
            tag = "squared" if squared else "l2"
            for mode, args in (("given", (captions, images, None)), ("all", (None, None, image_index))):
                n0, n1, idx = args
                i2t, t2i, counts = oracle(image, text, n0, n1, 0.3, 0.6, squared, idx)
                key = f"{name}/{mode}_{tag}"
                np.testing.assert_allclose(results[f"{key}/value"], i2t.sum() + 2 * t2i.sum(), rtol=1e-9,
                                           atol=1e-9, err_msg=key)
                np.testing.assert_array_equal(results[f"{key}/counts"], counts, key)
        pairwise = np.sum((image[:, None, :] - text[None, :, :]) ** 2, axis=-1)
        np.testing.assert_allclose(results[f"{name}/pairwise_squared"], pairwise, atol=1e-12)
        for sampling, args in (("hardest", (closest(image, text, image_index, 1), closest(text, image, image_index, 1),
                                            None)),
                               ("all", (None, None, image_index))):
            # The margins are float32 variables.
            i2t, t2i, counts = oracle(image, text, *args[:2], float(np.float32(0.45)), float(np.float32(0.25)), False,
                                      args[2])
            key = f"{name}/class_{sampling}"
            np.testing.assert_allclose(results[f"{key}/value"], (i2t + t2i).sum(), rtol=1e-9, atol=1e-9, err_msg=key)
            np.testing.assert_array_equal(results[f"{key}/statistics"], 2 * counts, key)  # two calls
            np.testing.assert_array_equal(results[f"{key}/reset"], 0)

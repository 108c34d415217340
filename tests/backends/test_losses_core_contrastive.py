"""kitm.losses.contrastive on JAX (under jax.jit, the LogitScale variable read in the traced step) and PyTorch equals
TensorFlow (values and gradients w.r.t. both embeddings and the temperature / bias, float64,
tests/backend_cases/losses_core_contrastive.py), and TensorFlow equals numpy oracles of docs/methods.md#contrastive."""

import ast
import math
import pathlib
import sys

import numpy as np
import pytest

BACKENDS = ("jax", "torch")
CASE = "losses_core_contrastive.py"
ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "backend_cases"))
import losses_core_contrastive as case  # noqa: E402  (the case file's inputs, for the oracles)


@pytest.mark.parametrize("backend", BACKENDS)
def test_backend_equals_tensorflow(assert_matches_tensorflow, backend):
    assert_matches_tensorflow(CASE, backend, rtol=1e-6, atol=1e-9)


def log_softmax(z, axis):
    z = z - z.max(axis=axis, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=axis, keepdims=True))


def softmax(z, axis):
    return np.exp(log_softmax(z, axis))


def positives(b, image_index):
    return np.eye(b, dtype=bool) if image_index is None else image_index[:, None] == image_index[None, :]


def info_nce(s, scale, image_index=None):
    p = positives(len(s), image_index).astype(float)
    z = scale * s
    i2t = -(p / p.sum(1, keepdims=True) * log_softmax(z, 1)).sum(1)
    t2i = -(p / p.sum(0, keepdims=True) * log_softmax(z, 0)).sum(0)
    return 0.5 * (i2t + t2i)


def graded_targets(r, tau, image_index=None):
    p = positives(len(r), image_index)
    rows = softmax(np.where(p, r.max(1, keepdims=True), r) / tau, 1)
    columns = softmax(np.where(p, r.max(0, keepdims=True), r) / tau, 0)
    return rows, columns


def graded(s, r, scale, tau, image_index=None):
    rows, columns = graded_targets(r, tau, image_index)
    z = scale * s
    return 0.5 * (-(rows * log_softmax(z, 1)).sum(1) - (columns * log_softmax(z, 0)).sum(0))


def siglip(s, scale, bias, image_index=None):
    y = np.where(positives(len(s), image_index), 1.0, -1.0)
    nls = np.log1p(np.exp(-y * (scale * s + bias)))
    return 0.5 * (nls.sum(1) + nls.sum(0))


def close(got, want, what):
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12, err_msg=what)


def test_tensorflow_matches_numpy(backend_results):
    results = backend_results(CASE, "tensorflow")
    t = math.log(7.0)
    for name, (image, text, image_index, relevance) in case.inputs().items():
        s = image @ text.T
        for with_index in (False, True):
            idx = image_index if with_index else None
            tag = f"{name}{'_index' if with_index else ''}"
            close(results[f"{tag}/infonce/value"], info_nce(s, 7.0, idx).sum(), tag)
            close(results[f"{tag}/graded/value"], graded(s, relevance, 7.0, 0.3, idx).sum(), tag)
            close(results[f"{tag}/siglip/value"], siglip(s, 7.0, -2.0 * t, idx).sum(), tag)
            rows, columns = graded_targets(relevance, 0.3, idx)
            close(results[f"{tag}/targets_rows"], rows, tag)
            close(results[f"{tag}/targets_columns"], columns, tag)
        close(results[f"{name}/InfoNCELoss/value"], info_nce(s, 7.0, image_index).sum(), name)
        close(results[f"{name}/InfoNCELoss_clipped/value"], info_nce(s, 60.0, image_index).sum(), name)
        assert results[f"{name}/InfoNCELoss_clipped/d_t"] == 0.0  # above the clip t gets no gradient
        close(results[f"{name}/GradedInfoNCELoss/value"], graded(s, relevance, 7.0, 0.3, image_index).mean(), name)
        close(results[f"{name}/SigLIPLoss/value"], siglip(s, 7.0, -3.0, image_index).sum(), name)
        # d/dt of sum L(exp(t) s) = sum dL/dz * z: checked against a central difference of the oracle.
        h = 1e-6
        numeric = (info_nce(s, math.exp(t + h), image_index).sum() - info_nce(s, math.exp(t - h), image_index).sum())
        np.testing.assert_allclose(results[f"{name}/InfoNCELoss/d_t"], numeric / (2 * h), rtol=1e-6, atol=1e-8)
        numeric = (siglip(s, 7.0, -3.0 + h, image_index).sum() - siglip(s, 7.0, -3.0 - h, image_index).sum())
        np.testing.assert_allclose(results[f"{name}/SigLIPLoss/d_b"], numeric / (2 * h), rtol=1e-6, atol=1e-8)
        if len(s) % 2 == 0:  # the two replicas' blocks put together are the whole batch's terms
            whole = {"infonce": info_nce(s, 7.0, image_index), "graded": graded(s, relevance, 7.0, 0.3, image_index),
                     "siglip": siglip(s, 7.0, -3.0, image_index)}
            for key, want in whole.items():
                got = sum(np.concatenate([results[f"{name}/block{r}_{key}_{d}"] for r in range(2)])
                          for d in ("i2t", "t2i"))
                close(got, want, f"{name} {key} blocks")


def test_contrastive_imports_no_tensorflow_at_module_level():
    tree = ast.parse((ROOT / "kitm/losses/contrastive.py").read_text())
    for node in tree.body:
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        assert not any(n.split(".")[0] == "tensorflow" for n in names), ast.dump(node)

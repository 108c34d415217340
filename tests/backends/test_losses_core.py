"""kitm.ops.similarity, kitm.losses.samplers, kitm.losses.triplet and RetrievalLoss (reductions, the warm-up switch)
on JAX and PyTorch equal TensorFlow (values and gradients, float64, tests/backend_cases/losses_core.py), and the
TensorFlow results equal numpy oracles written from the equations (docs/methods.md#triplet, kitm.losses.samplers)."""

import ast
import pathlib
import sys

import numpy as np
import pytest

BACKENDS = ("jax", "torch")
CASE = "losses_core.py"
ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "backend_cases"))
import losses_core  # noqa: E402  (the case file's inputs, for the oracles)
from oracles import pick_oracle, triplet_oracle  # noqa: E402


@pytest.mark.parametrize("backend", BACKENDS)
def test_backend_equals_tensorflow(assert_matches_tensorflow, backend):
    assert_matches_tensorflow(CASE, backend, rtol=1e-6, atol=1e-9)


def numpy_negative_mask(b, image_index=None):
    mask = ~np.eye(b, dtype=bool)
    if image_index is not None:
        mask &= image_index[:, None] != image_index[None, :]
    return mask


def test_tensorflow_matches_numpy(backend_results):
    results = backend_results(CASE, "tensorflow")
    for name, (image, text, image_index) in losses_core.inputs().items():
        s = image @ text.T
        b = len(s)
        np.testing.assert_array_equal(results[f"{name}/negative_mask"], numpy_negative_mask(b, image_index))
        for hardest in (True, False):
            for with_index in (True, False):
                key = f"{name}/triplet_{'hardest' if hardest else 'sum'}{'_index' if with_index else ''}"
                want = triplet_oracle(s, 0.2, hardest, image_index if with_index else None).sum()
                np.testing.assert_allclose(results[f"{key}/value"], want, rtol=1e-12, atol=1e-12, err_msg=key)
        for reduction, reduce in (("sum", np.sum), ("sum_over_batch_size", np.mean), ("none", np.sum)):
            np.testing.assert_allclose(results[f"{name}/class_{reduction}/value"],
                                       reduce(triplet_oracle(s, 0.2, True, image_index)), rtol=1e-12, atol=1e-12)
        weights = np.linspace(0.5, 1.5, b)
        np.testing.assert_allclose(results[f"{name}/class_weighted"],
                                   (weights * triplet_oracle(s, 0.2, False, image_index)).sum(), rtol=1e-12,
                                   atol=1e-12)
        for step in (0, 1, 2, 5):
            np.testing.assert_allclose(results[f"{name}/warmup_step{step}/value"],
                                       triplet_oracle(s, 0.2, step >= 2).sum(), rtol=1e-12, atol=1e-12)
            assert results[f"{name}/warmup_step{step}/on"] == float(step >= 2)
        rounded = np.round(s * 2) / 2
        for with_index in (False, True):
            mask = numpy_negative_mask(b, image_index if with_index else None)
            for axis in (0, 1):
                tag = f"{name}/sampler_axis{axis}{'_index' if with_index else ''}"
                np.testing.assert_array_equal(results[f"{tag}/hardest"], pick_oracle(rounded, mask, axis, "max"), tag)
                np.testing.assert_array_equal(results[f"{tag}/easiest"], pick_oracle(rounded, mask, axis, "min"), tag)
                np.testing.assert_array_equal(results[f"{tag}/switched_on"], results[f"{tag}/hardest"], tag)
                np.testing.assert_array_equal(results[f"{tag}/hardest_valid"], mask.any(axis=axis), tag)
    per_row = np.array([0.5, 1.5, 2.0])
    assert results["reduce/sum"] == 4.0 and results["reduce/sum_over_batch_size"] == pytest.approx(4.0 / 3)
    np.testing.assert_array_equal(results["reduce/none"], per_row)
    np.testing.assert_array_equal(results["scale_for_replicas/sum"], 4.0)  # one replica: nothing divided


def test_the_switched_triplet_is_the_hardest_or_the_sum(backend_results):
    # triplet_terms with a bool tensor for max_violation gives exactly the Python-bool forms.
    results = backend_results(CASE, "tensorflow")
    for name, (image, text, image_index) in losses_core.inputs().items():
        s = image @ text.T
        for on in (True, False):
            i2t = triplet_oracle(s, 0.3, on, image_index)  # both directions per row
            t2i_only = _caption_anchor_terms(s, 0.3, on, image_index)
            want = (i2t - t2i_only).sum() + 2.0 * t2i_only.sum()
            np.testing.assert_allclose(results[f"{name}/triplet_switch_{on}/value"], want, rtol=1e-12, atol=1e-12)


def _caption_anchor_terms(s, margin, hardest, image_index):
    b = len(s)
    aggregate = max if hardest else sum
    out = np.zeros(b)
    for q in range(b):
        hinges = [max(0.0, margin + s[m, q] - s[q, q]) for m in range(b) if m != q and image_index[m] != image_index[q]]
        out[q] = aggregate(hinges) if hinges else 0.0
    return out


PORTED = ("kitm/ops/similarity.py", "kitm/losses/base.py", "kitm/losses/samplers.py", "kitm/losses/triplet.py",
          "kitm/losses/global_batch.py", "kitm/losses/contrastive.py", "kitm/losses/sam.py",
          "kitm/losses/adaptive_margin.py")


@pytest.mark.parametrize("path", PORTED)
def test_ported_modules_import_no_tensorflow_at_module_level(path):
    """TensorFlow only inside the helpers that need it on the TensorFlow backend (imported on demand)."""
    tree = ast.parse((ROOT / path).read_text())
    for node in tree.body:
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        assert not any(name.split(".")[0] == "tensorflow" for name in names), f"{path}: {ast.dump(node)}"


NO_TENSORFLOW = """
import sys, types, pathlib
sys.modules["tensorflow"] = None  # any `import tensorflow` now fails
root = pathlib.Path(sys.argv[1])
import kitm
# kitm.losses' and kitm.ops' __init__ import modules not ported yet: load the ported ones on their own.
for name in ("kitm.losses", "kitm.ops"):
    package = types.ModuleType(name)
    package.__path__ = [str(root / name.replace(".", "/"))]
    sys.modules[name] = package
import numpy as np
from kitm.losses.contrastive import GradedInfoNCELoss, InfoNCELoss, SigLIPLoss
from kitm.losses.adaptive_margin import AdaptiveMarginTripletLoss
from kitm.losses.sam import SAMLoss
from kitm.losses.triplet import TripletLoss
from kitm.losses import global_batch, samplers
x = np.eye(3, dtype="float32")
y_true = {"relevance": np.eye(3, dtype="float32"), "image_index": np.arange(3)}
for loss in (InfoNCELoss(), GradedInfoNCELoss(0.1), SigLIPLoss(), TripletLoss(negatives="global"),
             SAMLoss(3.0, sampling="random", seed=1), AdaptiveMarginTripletLoss(seed=2)):
    assert np.isfinite(float(loss(y_true, {"image": x, "text": x})))
assert loss.statistics()["used_x"] == 3
assert global_batch.global_batch({"image": x, "text": x}) is None and global_batch.num_replicas_in_sync() == 1
picks = samplers.random_negatives(np.eye(3) < 1, seed=samplers.seed_stream(3)).indices
assert all(int(p) != i for i, p in enumerate(picks))
print("OK")
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_ported_losses_run_without_tensorflow(backend):
    import importlib.util
    import os
    import subprocess

    if importlib.util.find_spec(backend) is None:
        pytest.skip(f"{backend} is not installed here")
    env = {**os.environ, "KERAS_BACKEND": backend, "JAX_PLATFORMS": "cpu", "CUDA_VISIBLE_DEVICES": "",
           "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", NO_TENSORFLOW, str(ROOT)], env=env, capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert done.returncode == 0 and "OK" in done.stdout, done.stderr[-3000:]

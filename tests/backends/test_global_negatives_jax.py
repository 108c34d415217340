"""Global negatives on JAX: `keras.distribution.DataParallel` over 2 host devices trains `DualEncoder` with
negatives="global", and one training step's loss, logged terms and gradients equal those of one device with the
whole batch (the oracle); negatives="local" is refused there; PyTorch still refuses negatives="global"
(tests/backend_cases/dual_encoder_data_parallel.py; kitm.losses.global_batch, "Backends"; docs/scale.md).

The case runs in a fresh interpreter, as tests/backend_cases/run.py runs every case, with
XLA_FLAGS=--xla_force_host_platform_device_count=2: JAX fixes its device count when it is imported. It needs no
TensorFlow (the oracle is JAX on one device), so it also runs in the environment without TensorFlow.

Tolerance: both steps run in float64 and differ only in the order of the devices' partial sums (the benchmark's
--check measures at most ~2e-13, on gradients of up to ~400 for these losses), so 1e-9 absolute; the three-step Adam
`fit` carries that rounding through the updates, 1e-8.
"""

import importlib.util
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CASE = ROOT / "tests" / "backend_cases" / "dual_encoder_data_parallel.py"
STEP_LOSSES = ("infonce", "infonce_mean", "triplet")

pytestmark = pytest.mark.slow


def _run_case(backend: str, out: pathlib.Path) -> dict:
    if importlib.util.find_spec({"jax": "jax", "torch": "torch"}[backend]) is None:
        pytest.skip(f"the {backend} backend is not installed here")
    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=2".strip()
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3", "JAX_PLATFORMS": "cpu",
           "CUDA_VISIBLE_DEVICES": "", "XLA_FLAGS": flags}
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "backend_cases" / "run.py"), str(CASE), str(out)],
                          env=env, capture_output=True, text=True, timeout=900, cwd=ROOT)
    if done.returncode != 0:
        raise AssertionError(f"{CASE.name} on {backend} failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    with np.load(out) as data:
        return {name: data[name] for name in data.files}


@pytest.fixture(scope="module")
def jax_results(tmp_path_factory):
    return _run_case("jax", tmp_path_factory.mktemp("data_parallel") / "jax.npz")


def _matching(results, prefix):
    return {name[len(prefix):]: value for name, value in results.items() if name.startswith(prefix)}


def test_the_case_ran_on_two_devices_with_the_rows_split(jax_results):
    assert float(jax_results["device_count"]) == 2
    assert float(jax_results["fit/rows_split"]) == 1.0  # the loss saw the global batch sharded by rows
    assert float(jax_results["devices"]) == 2 and float(jax_results["devices_without"]) == 1
    assert float(jax_results["replicas"]) == 1  # one replica: the loss is computed once, over the global batch


@pytest.mark.parametrize("loss", STEP_LOSSES)
def test_one_step_on_two_devices_equals_one_device_with_the_whole_batch(jax_results, loss):
    one, two = _matching(jax_results, f"{loss}/one/"), _matching(jax_results, f"{loss}/two/")
    assert set(one) == set(two) and "log/loss" in one
    assert sum(name.startswith("gradient/") for name in one) >= 7  # the towers' and projections' (and the loss's)
    for name in one:
        np.testing.assert_allclose(two[name], one[name], rtol=0, atol=1e-9, err_msg=f"{loss}: {name}")
    assert all(np.any(value != 0) for name, value in one.items() if name.startswith("gradient/"))


def test_reductions_are_the_global_batch_s(jax_results):
    # "sum" and "sum_over_batch_size" of the same InfoNCE: the mean is the sum over the global batch of 16 rows
    # (one replica on JAX), for the loss and for its gradients.
    total, mean = _matching(jax_results, "infonce/two/"), _matching(jax_results, "infonce_mean/two/")
    np.testing.assert_allclose(mean["log/loss"] * 16, total["log/loss"], rtol=1e-12)
    for name in total:
        if name.startswith("gradient/"):
            np.testing.assert_allclose(mean[name] * 16, total[name], rtol=1e-9, atol=1e-12, err_msg=name)


def test_fit_trains_on_two_devices_as_on_one(jax_results):
    one, two = _matching(jax_results, "fit/one/"), _matching(jax_results, "fit/two/")
    assert two["loss"].shape == (3,) and np.all(np.isfinite(two["loss"])) and two["loss"][-1] < two["loss"][0]
    for name in one:
        np.testing.assert_allclose(two[name], one[name], rtol=0, atol=1e-8, err_msg=name)


def test_local_negatives_on_several_devices_are_refused_naming_backend_and_alternative(jax_results):
    assert float(jax_results["refuses_local"]) == 1.0


def test_pytorch_still_refuses_global_negatives(tmp_path):
    results = _run_case("torch", tmp_path / "torch.npz")
    assert float(results["refuses_global"]) == 1.0

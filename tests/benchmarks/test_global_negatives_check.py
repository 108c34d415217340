"""benchmarks/bench_global_negatives.py --check: on 2 logical CPU devices (a fresh process: the devices are split
before TensorFlow starts), the three contrastive losses with global negatives, with gradient caching and with both
have the loss and gradients of one device with the whole batch, to 1e-5 (float64); so do its JAX rows (2 host
devices, keras.distribution.DataParallel, in a subprocess) where JAX is installed, which say "skipped" where not."""

import importlib.util
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_global_negatives_and_gradient_caching_match_one_device(tmp_path, kitm_python):
    result = kitm_python([ROOT / "benchmarks" / "bench_global_negatives.py", "--check", "--losses",
                          "infonce,siglip,graded_infonce"], cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    largest = float(re.match(r"largest difference (\S+) ", lines[-1]).group(1))
    assert largest <= 1e-5
    assert sum("global + cached, 2 replicas" in line for line in lines) == 3
    jax_rows = [line for line in lines if "global, 2 devices (JAX DataParallel)" in line]
    assert len(jax_rows) == 3
    if importlib.util.find_spec("jax") is None:
        assert all(line.endswith("skipped: JAX not installed") for line in jax_rows)
    else:
        assert all(float(line.split()[-1]) <= 1e-5 for line in jax_rows)
        assert any("(local, 2 devices)" in line and line.endswith("refused at compile") for line in lines)
    # Without the gathers the 2-replica step is not the whole batch's: the check can tell.
    local = [line for line in lines if "(local, 2 replicas" in line]
    assert local and all(float(line.split()[-1]) > 1e-3 for line in local)

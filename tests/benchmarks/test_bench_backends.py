"""benchmarks/bench_backends.py still runs (quick mode: tiny shapes, two rounds): every row's step trains on both
the TensorFlow and the JAX worker and gets its JAX/TF line. No timing is asserted (docs/performance.md reads the
script's own output); skipped where JAX is not installed beside TensorFlow."""

import importlib.util
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
ROWS = ("demo", "demo_sam", "clip_infonce", "clip_graded")


@pytest.mark.slow
@pytest.mark.benchmark
def test_bench_backends_runs_every_row_on_both_backends_in_quick_mode(tmp_path):
    if importlib.util.find_spec("jax") is None:
        pytest.skip('JAX is not installed (pip install "jax[cpu]>=0.10,<0.11"; docs/backends.md)')
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), HF_HUB_OFFLINE="1")
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_backends.py"), "--quick"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = result.stdout.split("summary (")[1].splitlines()[1:]
    for row in ROWS:
        assert any(line.split()[0] == row and "JAX/TF median" in line for line in summary), (row, summary)
    assert "load average" in result.stdout
    assert "FAILED" not in result.stdout

"""The side-by-side benchmarks still run (quick mode: tiny shapes, two pairs each). No timing is asserted here: the
speed comparisons are read from the scripts' own output (docs/performance.md)."""

import importlib.util
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
# open_clip is not a kitm dependency: bench_clip_step.py runs where it was installed for the benchmark only
# (`pip install --no-deps --target /tmp/oc open_clip_torch ftfy wcwidth`, or KITM_OPEN_CLIP_PATH), else it is skipped.
OPEN_CLIP_PATH = os.environ.get("KITM_OPEN_CLIP_PATH", "/tmp/oc")
SCRIPTS = ("bench_vsepp_step.py", "bench_sam_step.py", "bench_input_pipeline.py", "bench_evaluation.py",
           "bench_clip_step.py")


@pytest.mark.slow
@pytest.mark.benchmark
@pytest.mark.parametrize("script", SCRIPTS)
def test_benchmark_runs_in_quick_mode(script, tmp_path):
    pytest.importorskip("torch")
    extra_args = []
    if script == "bench_clip_step.py":
        if not (os.path.isdir(os.path.join(OPEN_CLIP_PATH, "open_clip")) or importlib.util.find_spec("open_clip")):
            pytest.skip(f"open_clip_torch is not installed (looked in {OPEN_CLIP_PATH} and on sys.path)")
        extra_args = ["--open_clip_path", OPEN_CLIP_PATH]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), HF_HUB_OFFLINE="1")
    extra = {"bench_sam_step.py": ["--data_dir", str(tmp_path / "synthetic_cider")],
             "bench_input_pipeline.py": ["--folder", str(tmp_path / "jpegs")]}.get(script, extra_args)
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--quick", *extra], cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "kitm/peer median" in result.stdout
    assert "load average" in result.stdout


@pytest.mark.slow
@pytest.mark.benchmark
def test_the_pytorch_clip_peer_runs_in_quick_mode(tmp_path):
    """benchmarks/bench_clip_torch_peer.py (the GPU comparison's PyTorch side, issue 47 item 5): its step on a tiny
    CLIPModel on the CPU trains (the loss moves) and reports samples/s and MFU."""
    pytest.importorskip("transformers")
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_clip_torch_peer.py"), "--quick"],
                            cwd=tmp_path, env=dict(os.environ, HF_HUB_OFFLINE="1"), capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "CLIPModel (tiny) on CPU" in result.stdout and "samples/s" in result.stdout and "MFU" in result.stdout

"""benchmarks/bench_multiworker.py's arithmetic, against hand-computed values: the bytes a worker gathers per step,
the 8-worker prediction from the one-process runs, and the step time read from Keras' per-epoch line. (Running it
trains eight launcher runs: docs/performance.md has its figures, measured by hand.)"""

import importlib.util
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_multiworker", ROOT / "benchmarks" / "bench_multiworker.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gathered_bytes(bench):
    # 2 workers, B = 128, D = 256, 1,000 weights: each gathers the other's 64 rows of both embeddings,
    # 2 * 1 * 64 * 256 * 4 bytes, and a ring all-reduce moves 2 * (1/2) * 1000 * 4 bytes.
    assert bench._gathered_bytes(2, 128, 256, 1000) == {"embeddings": 131072, "gradients": 4000, "total": 135072}
    assert bench._gathered_bytes(1, 128, 256, 1000)["total"] == 0
    # 8 workers: 7 others' 16 rows each; 2 * 7/8 of the weights.
    assert bench._gathered_bytes(8, 128, 256, 1000) == {"embeddings": 229376, "gradients": 7000, "total": 236376}


def test_prediction_fits_a_fixed_and_a_per_row_part(bench):
    runs = [{"batch": 128, "step_ms": 10 + 0.5 * 128}, {"batch": 64, "step_ms": 10 + 0.5 * 64},
            {"batch": 32, "step_ms": 10 + 0.5 * 32}]
    prediction = bench._prediction(runs, 8, 256, 1000)
    assert prediction["fixed_ms"] == pytest.approx(10) and prediction["per_row_ms"] == pytest.approx(0.5)
    assert prediction["compute_ms"] == pytest.approx(10 + 0.5 * 16)
    assert prediction["images_per_step"] == 16
    # 236,376 bytes at 10 Gbit/s: 0.189 ms.
    assert prediction["step_ms"][10] == pytest.approx(18 + 236376 * 8 / 1e10 * 1e3)
    # A negative intercept (a step faster than linear at small batches) becomes the line through the origin.
    through_origin = bench._prediction([{"batch": 128, "step_ms": 128.0}, {"batch": 64, "step_ms": 40.0}], 8, 256, 0)
    assert through_origin["fixed_ms"] == 0.0 and through_origin["per_row_ms"] == pytest.approx(
        (128 * 128 + 64 * 40) / (128 ** 2 + 64 ** 2))


def test_step_line_reads_keras_per_epoch_line(bench):
    text = ("7/7 - 12s - 2s/step - loss: 386.4478\n"
            "7/7 - 2s - 252ms/step - collapse/image_cosine: 0.2309 - loss: 253.2385\n")
    found = [(value, unit) for _, _, value, unit in bench.STEP_LINE.findall(text)]
    assert found == [("2", "s"), ("252", "ms")]

"""benchmarks/bench_search_load.py still runs (quick mode: 1 and 8 clients for 2 s against the tiny index, both
servers). No figure is asserted: the load figures are read from the script's output (docs/search.md)."""

import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.benchmark
def test_the_load_benchmark_runs_in_quick_mode(tiny_search_index, tmp_path, subprocess_env):
    out = tmp_path / "rows.json"
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_search_load.py"),
                             f"--index={tiny_search_index}", "--quick", "--modes=unbatched,batched", f"--json={out}"],
                            cwd=tmp_path, env=subprocess_env(), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rows = json.loads(out.read_text())
    assert [(row["mode"], row["clients"]) for row in rows] == [("unbatched", 1), ("unbatched", 8), ("batched", 1),
                                                               ("batched", 8)]
    assert all(row["requests"] > 0 and set(row["statuses"]) == {"200"} for row in rows), rows
    assert "| batched | 8 |" in result.stdout

"""The semantic-centre losses, the quantized-center layer, kitm.metrics and the callbacks' arithmetic import no
TensorFlow at module level (TensorFlow only inside the helpers for tf.distribute, TensorBoard and TF checkpoints),
and, once every module they import is ported, import with TensorFlow absent."""

import ast
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
NEUTRAL = sorted([*ROOT.glob("kitm/losses/centers/*.py"), ROOT / "kitm/layers/quantized_centers.py",
                  *ROOT.glob("kitm/metrics/*.py"),
                  *(ROOT / "kitm/callbacks" / name for name in (
                      "__init__.py", "adaptive_margin.py", "checkpoint.py", "collapse_monitor.py", "every_q_batches.py",
                      "ladder_recluster.py", "loss_state_checkpoint.py", "retrieval_evaluation.py"))])


def _module_level_imports(path):
    names = []
    for node in ast.parse(path.read_text()).body:  # module level only: lazy imports inside functions are allowed
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
    return names


@pytest.mark.parametrize("path", NEUTRAL, ids=lambda path: str(path.relative_to(ROOT)))
def test_no_module_level_tensorflow(path):
    assert not [name for name in _module_level_imports(path) if name.split(".")[0] == "tensorflow"]


def test_imports_without_tensorflow():
    pytest.importorskip("jax")  # the check runs on JAX: CI's environment without TensorFlow has it, the main one not
    code = ("import sys; sys.modules['tensorflow'] = None\n"  # import tensorflow -> ImportError
            "import kitm.losses.centers, kitm.layers.quantized_centers, kitm.metrics\n"
            "from kitm.losses.centers import SemanticCenterLoss\n"
            "import numpy as np\n"
            "loss = SemanticCenterLoss(3, 2)\n"
            "terms = loss.compute_terms({'image_index': np.array([0, 2])}, {'image': np.ones((2, 2)), "
            "'text': np.zeros((2, 2))})\n"
            "print(sorted(terms))\n")
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "['image', 'text']" in done.stdout
